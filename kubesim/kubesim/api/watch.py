"""Change events and watchers.

Every write produces one WatchEvent that is appended to the store's bounded history and pushed to
the watchers of its resource type. A watcher filters events itself (namespace, labels, fields),
so the writer's cost is one append per interested watcher. HTTP watchers have a bounded queue: one
that falls too far behind is closed (the client re-watches from its last resourceVersion), so a slow
reader never blocks writers. In-process subscribers (the controllers) get unbounded queues.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

import orjson

from kubesim.waiting import wait_event


class WatchEvent:
    """One change. `obj` and `old` are the stored dicts and must never be mutated."""

    __slots__ = ("_bytes", "key", "namespace", "obj", "old", "rv", "type")

    def __init__(
        self, rv: int, type_: str, key: tuple[str, str], namespace: str, obj: dict, old: dict | None
    ):
        self.rv = rv
        self.type = type_
        self.key = key
        self.namespace = namespace
        self.obj = obj
        self.old = old
        self._bytes: dict[str, bytes] | None = None

    def object_bytes(self, version: str, render: Callable[[dict], dict] | None = None) -> bytes:
        """The object serialized in `version`, cached so N watchers serialize it once."""
        cache = self._bytes
        if cache is None:
            cache = self._bytes = {}
        data = cache.get(version)
        if data is None:
            data = orjson.dumps(render(self.obj) if render else self.obj)
            cache[version] = data
        return data


class Watcher:
    """A queue of (event_type, WatchEvent) that one consumer reads."""

    def __init__(
        self,
        key: tuple[str, str] | None,
        namespace: str | None,
        matches: Callable[[dict], bool] | None = None,
        *,
        max_queue: int | None = None,
    ):
        self.key = key
        self.namespace = namespace or None
        self.matches = matches
        self.max_queue = max_queue
        self.queue: deque = deque()
        self.closed = False
        self.overflowed = False
        self._wakeup = asyncio.Event()
        self._on_close: list[Callable[[Watcher], None]] = []

    def offer(self, event: WatchEvent) -> None:
        if self.closed:
            return
        if self.namespace is not None and event.namespace != self.namespace:
            return
        event_type = event.type
        if self.matches is not None:
            new_ok = self.matches(event.obj)
            if event_type == "MODIFIED":
                old_ok = event.old is not None and self.matches(event.old)
                if new_ok and not old_ok:
                    event_type = "ADDED"
                elif old_ok and not new_ok:
                    event_type = "DELETED"
                elif not new_ok:
                    return
            elif not new_ok:
                return
        self.queue.append((event_type, event))
        if self.max_queue is not None and len(self.queue) > self.max_queue:
            self.overflowed = True
            self.close()
            return
        self._wakeup.set()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._wakeup.set()
        for callback in self._on_close:
            callback(self)
        self._on_close.clear()

    def on_close(self, callback: Callable[[Watcher], None]) -> None:
        self._on_close.append(callback)

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until an event is queued or the watcher closes; False on timeout."""
        if self.queue or self.closed:
            return True
        self._wakeup.clear()
        return await wait_event(self._wakeup, timeout)

    def drain(self) -> list:
        items = list(self.queue)
        self.queue.clear()
        return items


class Subscription:
    """The store's in-process change feed: `async for event_type, obj in sub`.

    Objects are deep copies in the requested apiVersion (storage version when watching all kinds).
    """

    def __init__(self, watcher: Watcher, render: Callable[[dict], dict]):
        self._watcher = watcher
        self._render = render

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> tuple[str, dict]:
        watcher = self._watcher
        while True:
            if watcher.queue:
                event_type, event = watcher.queue.popleft()
                return event_type, self._render(event.obj)
            if watcher.closed:
                raise StopAsyncIteration
            await watcher.wait()

    def pending(self) -> int:
        return len(self._watcher.queue)

    def close(self) -> None:
        self._watcher.close()
