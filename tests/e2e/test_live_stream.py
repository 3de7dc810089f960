"""Live pages' event stream under a real ASGI server, fed by Redis pub/sub: what a browser's
EventSource receives, and who may receive what."""

import contextlib
import json
import threading
import time

import httpx
import pytest

from tests.asgi_server import session_cookie, start_asgi_server

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def redis_url(e2e_redis_url):
    return e2e_redis_url


@pytest.fixture
def server(tmp_path, redis_url):
    server = start_asgi_server(tmp_path, PORTAL_PUBSUB_URL=redis_url)
    yield server
    server.stop()


@pytest.fixture
def org(db):
    from tests.factories import MembershipFactory, ProjectFactory, UserFactory

    alpha = ProjectFactory(slug="alpha")
    beta = ProjectFactory(slug="beta")
    bob = UserFactory(username="bob")
    MembershipFactory(user=bob, project=alpha, role="viewer")
    return {"alpha": alpha, "beta": beta, "bob": bob}


class Listener(threading.Thread):
    """Reads an event stream in the background and keeps the parsed events."""

    def __init__(self, url: str, cookies: dict[str, str]):
        super().__init__(daemon=True)
        self.url, self.cookies = url, cookies
        self.events: list[tuple[str, dict]] = []
        self.opened = threading.Event()
        self.status: int | None = None

    def run(self) -> None:
        with contextlib.suppress(httpx.TransportError):  # the server stops at the test's end
            self._read()

    def _read(self) -> None:
        with (
            httpx.Client(cookies=self.cookies, timeout=None) as client,
            client.stream("GET", self.url) as response,
        ):
            self.status = response.status_code
            event = None
            for line in response.iter_lines():
                if line.startswith("event: "):
                    event = line.removeprefix("event: ")
                elif line.startswith("data: ") and event:
                    self.events.append((event, json.loads(line.removeprefix("data: "))))
                    if event == "hello":
                        self.opened.set()

    def jobs(self) -> list[dict]:
        return [data for name, data in self.events if name == "job"]


def publish(redis_url: str, project: str, message: dict) -> None:
    import redis

    redis.Redis.from_url(redis_url).publish(f"portal:jobs:{project}", json.dumps(message))


def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_member_hears_their_projects_jobs_and_nothing_else(server, org, redis_url):
    listener = Listener(server.url + "/jobs/live/", session_cookie(org["bob"]))
    listener.start()
    assert listener.opened.wait(10), listener.status

    publish(redis_url, "beta", {"job": 7, "state": "running"})  # another tenant's job
    publish(redis_url, "alpha", {"job": 5, "state": "running"})
    # (How fast it arrives is a figure for a bench, not an assertion on a shared machine.)
    assert wait_until(lambda: listener.jobs(), timeout=30.0)
    time.sleep(0.3)
    assert listener.jobs() == [{"job": 5, "state": "running", "project": "alpha"}]


def test_a_job_stream_carries_only_that_job(server, org, redis_url):
    from jobs.models import Job
    from tests.factories import UserFactory

    job = Job.objects.create(
        project=org["alpha"],
        submitter=UserFactory(),
        name="one",
        kind="single",
        image="busybox",
        gpus=1,
        cpu="1",
        memory="1Gi",
        max_runtime_minutes=10,
        backend="kueue",
    )
    listener = Listener(f"{server.url}/jobs/live/?job={job.pk}", session_cookie(org["bob"]))
    listener.start()
    assert listener.opened.wait(10), listener.status
    publish(redis_url, "alpha", {"job": job.pk + 1, "state": "queued"})
    publish(redis_url, "alpha", {"job": job.pk, "state": "queued"})
    assert wait_until(lambda: listener.jobs(), timeout=5.0)
    time.sleep(0.3)
    assert listener.jobs() == [{"job": job.pk, "state": "queued", "project": "alpha"}]


def test_other_tenants_and_strangers_are_refused(server, org):
    from jobs.models import Job
    from tests.factories import UserFactory

    other = Job.objects.create(
        project=org["beta"],
        submitter=UserFactory(),
        name="theirs",
        kind="single",
        image="busybox",
        gpus=1,
        cpu="1",
        memory="1Gi",
        max_runtime_minutes=10,
        backend="kueue",
    )
    cookies = session_cookie(org["bob"])
    assert httpx.get(f"{server.url}/jobs/live/?job={other.pk}", cookies=cookies).status_code == 404
    assert httpx.get(f"{server.url}/jobs/live/?project=beta", cookies=cookies).status_code == 404
    assert httpx.get(f"{server.url}/jobs/live/?job=abc", cookies=cookies).status_code == 404
    assert httpx.get(f"{server.url}/jobs/live/").status_code == 401


def test_without_pub_sub_the_stream_says_204_so_pages_poll(tmp_path, org):
    server = start_asgi_server(tmp_path, PORTAL_PUBSUB_URL="", CELERY_BROKER_URL="memory://")
    try:
        answer = httpx.get(server.url + "/jobs/live/", cookies=session_cookie(org["bob"]))
        assert answer.status_code == 204
    finally:
        server.stop()
