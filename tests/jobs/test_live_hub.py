"""The live hub's fan-out rule: a stream receives only notices of the projects (and the job) it
was opened for, and a stalled stream never grows without bound."""

import asyncio

from portal.live import QUEUE_LIMIT, LiveHub, Subscriber


def test_dispatch_respects_projects_and_job():
    hub = LiveHub("redis://unused")
    alpha = Subscriber(projects=frozenset({"alpha"}))
    one_job = Subscriber(projects=frozenset({"alpha"}), job_id=5)
    staff = Subscriber(projects=None)
    hub.subscribers.update({alpha, one_job, staff})

    assert hub.dispatch("portal:jobs:alpha", b'{"job": 5, "state": "running"}') == 3
    assert hub.dispatch("portal:jobs:alpha", b'{"job": 6, "state": "queued"}') == 2
    assert hub.dispatch("portal:jobs:beta", b'{"job": 9, "state": "failed"}') == 1
    assert hub.dispatch("portal:jobs:alpha", b"not json") == 0

    assert alpha.queue.qsize() == 2
    assert one_job.queue.get_nowait() == {"job": 5, "state": "running", "project": "alpha"}
    assert one_job.queue.empty()
    assert staff.queue.qsize() == 3


def test_a_stalled_stream_keeps_only_the_newest_notices():
    hub = LiveHub("redis://unused")
    slow = Subscriber(projects=None)
    hub.subscribers.add(slow)
    for n in range(QUEUE_LIMIT + 10):
        hub.dispatch("portal:jobs:alpha", f'{{"job": {n}, "state": "queued"}}')
    assert slow.queue.qsize() == QUEUE_LIMIT
    assert slow.queue.get_nowait()["job"] == 10


def test_event_stream_says_hello_then_sends_job_events():
    from portal.live import event_stream

    async def scenario():
        hub = LiveHub("redis://unused")
        hub._task = asyncio.get_running_loop().create_future()  # no Redis pump in this test
        hub.subscribed.set()
        subscriber = Subscriber(projects=None)
        stream = event_stream(hub, subscriber)
        hello = await anext(stream)
        hub.dispatch("portal:jobs:alpha", b'{"job": 1, "state": "running"}')
        event = await anext(stream)
        await stream.aclose()
        return hello, event, hub.subscribers

    hello, event, left = asyncio.run(scenario())
    assert hello.startswith("retry: 2000\nevent: hello\n")
    assert event == 'event: job\ndata: {"job":1,"state":"running","project":"alpha"}\n\n'
    assert left == set()
