"""kubesim's controller loops end when cancelled, even when the cancellation comes as their
event is set (asyncio.wait_for on Python 3.11 lost it, and kubesim then hung at exit until it
was killed)."""

import asyncio

from kubesim.waiting import wait_event


async def _loop_cancelled_as_it_wakes() -> bool:
    event = asyncio.Event()

    async def controller() -> None:
        while True:
            await wait_event(event, 5)
            event.clear()
            await asyncio.sleep(0.001)

    task = asyncio.create_task(controller())
    await asyncio.sleep(0.01)  # waiting on the event
    event.set()
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=2)
    task.cancel()
    return task in done and task.cancelled()


def test_a_loop_cancelled_as_its_event_is_set_ends():
    assert asyncio.run(_loop_cancelled_as_it_wakes())


def test_wait_event_says_whether_the_event_came_or_the_time_ran_out():
    async def both() -> tuple[bool, bool]:
        event = asyncio.Event()
        timed_out = await wait_event(event, 0.01)
        event.set()
        return timed_out, await wait_event(event, None)

    assert asyncio.run(both()) == (False, True)
