"""Waiting for an asyncio.Event with a timeout, without losing a cancellation.

On Python 3.11, ``asyncio.wait_for`` swallows a cancellation that arrives just as the awaited
event is set (it returns the result instead), so a controller loop cancelled at shutdown could
go on forever and hold kubesim's exit. ``asyncio.timeout`` keeps the cancellation.
"""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """True when the event was set within `timeout` seconds (None: no limit), False when the
    time ran out."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True
