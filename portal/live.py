"""Live pages: job changes from Redis pub/sub to browsers as server-sent events (ASGI only).

Publishers (jobs.services, the watcher) send `{"job": id, "state": s}` on the channel
`portal:jobs:<project slug>` (portal.pubsub). Each server process keeps ONE Redis connection,
pattern-subscribed to every job channel, and fans messages out to the streams open in that
process; a stream only ever receives the projects its user could see when it connected. So 1,000
open pages cost 1,000 idle HTTP connections and one Redis connection per process, not 1,000.

Pages use htmx's SSE extension: an element with `hx-trigger="sse:job"` re-fetches its fragment
on each event. When the stream is not available (no Redis configured, or the connection drops)
static/js/portal.js falls back to polling until the stream is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from django.conf import settings

log = logging.getLogger(__name__)

JOB_CHANNEL_PREFIX = "portal:jobs:"
KEEPALIVE_SECONDS = 15.0
SUBSCRIBE_WAIT_SECONDS = 5.0
QUEUE_LIMIT = 256  # a stream this far behind is a dead client; drop its oldest notices


@dataclass(eq=False)
class Subscriber:
    projects: frozenset[str] | None  # None: every project (staff)
    job_id: int | None = None  # a job page only wants its own job
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(QUEUE_LIMIT))

    def wants(self, project: str, message: dict) -> bool:
        if self.projects is not None and project not in self.projects:
            return False
        return self.job_id is None or message.get("job") == self.job_id


class LiveHub:
    """Per process and event loop: one Redis pattern subscription, many local subscribers."""

    def __init__(self, url: str):
        self.url = url
        self.subscribers: set[Subscriber] = set()
        self._task: asyncio.Task | None = None
        # Set while the Redis subscription is active: notices published before it are lost.
        self.subscribed = asyncio.Event()

    def add(self, subscriber: Subscriber) -> None:
        self.subscribers.add(subscriber)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._pump())

    def remove(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)

    def dispatch(self, channel: str, raw: bytes | str) -> int:
        """Hand one pub/sub message to the subscribers that may see it; returns how many."""
        project = channel.removeprefix(JOB_CHANNEL_PREFIX)
        try:
            message = json.loads(raw)
        except ValueError:
            log.warning("ignoring a malformed notice on %s", channel)
            return 0
        if not isinstance(message, dict):
            return 0
        message["project"] = project
        delivered = 0
        for subscriber in list(self.subscribers):
            if not subscriber.wants(project, message):
                continue
            if subscriber.queue.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    subscriber.queue.get_nowait()
            subscriber.queue.put_nowait(message)
            delivered += 1
        return delivered

    async def _pump(self) -> None:
        """Read the pattern subscription until nobody listens; reconnect with backoff."""
        import redis.asyncio as aioredis

        delay = 0.5
        while self.subscribers:
            client = aioredis.Redis.from_url(self.url)
            pubsub = client.pubsub()
            try:
                await pubsub.psubscribe(JOB_CHANNEL_PREFIX + "*")
                self.subscribed.set()
                delay = 0.5
                while self.subscribers:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message and message.get("type") == "pmessage":
                        channel = message["channel"]
                        if isinstance(channel, bytes):
                            channel = channel.decode()
                        self.dispatch(channel, message["data"])
            except asyncio.CancelledError:
                raise
            except Exception:  # redis errors of every kind: wait and reconnect
                log.warning("live hub lost Redis; reconnecting in %.1fs", delay, exc_info=True)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
            finally:
                self.subscribed.clear()
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
                    await client.aclose()


_hubs: dict[int, LiveHub] = {}


def hub() -> LiveHub | None:
    """This event loop's hub, or None when no pub/sub is configured (pages poll instead)."""
    url = getattr(settings, "PORTAL_PUBSUB_URL", "")
    if not url:
        return None
    loop_id = id(asyncio.get_running_loop())
    found = _hubs.get(loop_id)
    if found is None or found.url != url:
        found = _hubs[loop_id] = LiveHub(url)
    return found


def sse_event(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def event_stream(live: LiveHub, subscriber: Subscriber) -> AsyncIterator[str]:
    """The text/event-stream body: a hello, then one `job` event per notice, keep-alives."""
    live.add(subscriber)
    try:
        # Say hello only once notices can reach this stream, so a page that saw the hello misses
        # nothing; if Redis is slow to answer, go on (the stream still serves later notices).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(live.subscribed.wait(), SUBSCRIBE_WAIT_SECONDS)
        # retry: how long the browser waits before reconnecting after a drop.
        yield "retry: 2000\n" + sse_event("hello", {"live": True})
        while True:
            try:
                message = await asyncio.wait_for(subscriber.queue.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            # Under load several notices wait: send them in one write (one ASGI message).
            chunk = [sse_event("job", message)]
            while not subscriber.queue.empty():
                chunk.append(sse_event("job", subscriber.queue.get_nowait()))
            yield "".join(chunk)
    finally:
        live.remove(subscriber)
