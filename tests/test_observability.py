"""/metrics: figures recorded by any process (through Redis) come back in Prometheus' format,
and only the allowed callers may read them."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from portal import observability, pubsub


@pytest.fixture
def metrics_redis(settings, redis_server):
    import redis

    url = redis_server.url()
    settings.PORTAL_PUBSUB_URL = url
    settings.PORTAL_METRICS_TOKEN = ""
    client = redis.Redis.from_url(url)
    client.delete(observability.COUNTERS_KEY, observability.GAUGES_KEY)
    pubsub._client = None
    yield client
    client.delete(observability.COUNTERS_KEY, observability.GAUGES_KEY)
    pubsub._client = None


def samples(text: str) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_recorded_figures_are_served_in_prometheus_format(metrics_redis, client, db):
    observability.count("watch_events_total", kind="Pod")
    observability.count("watch_events_total", 2, kind="Pod")
    observability.count("reconcile_failures_total", reason="Conflict")
    observability.observe("reconcile_duration_seconds", 0.03, outcome="applied")
    observability.observe("reconcile_duration_seconds", 4.0, outcome="applied")
    observability.gauge("watcher_leader", 1, ttl=30, identity="watcher-a")
    observability.gauge("watcher_leader", 1, ttl=-1, identity="dead-watcher")  # already expired
    observability.flush()

    response = client.get("/metrics")  # the test client calls from 127.0.0.1
    assert response.status_code == 200
    got = samples(response.content.decode())
    assert got[("gpuportal_watch_events_total", (("kind", "Pod"),))] == 3
    assert got[("gpuportal_reconcile_failures_total", (("reason", "Conflict"),))] == 1
    duration = "gpuportal_reconcile_duration_seconds"
    assert got[(f"{duration}_count", (("outcome", "applied"),))] == 2
    assert got[(f"{duration}_sum", (("outcome", "applied"),))] == pytest.approx(4.03)
    assert got[(f"{duration}_bucket", (("le", "0.05"), ("outcome", "applied")))] == 1
    assert got[(f"{duration}_bucket", (("le", "+Inf"), ("outcome", "applied")))] == 2
    assert got[("gpuportal_watcher_leader", (("identity", "watcher-a"),))] == 1
    assert ("gpuportal_watcher_leader", (("identity", "dead-watcher"),)) not in got


def test_metrics_need_the_token_when_one_is_set(metrics_redis, client, settings, db):
    settings.PORTAL_METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


def test_remote_callers_need_staff_without_a_token(metrics_redis, client, db):
    from tests.factories import UserFactory

    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 403
    client.force_login(UserFactory(username="researcher"))
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 403
    client.force_login(UserFactory(username="operator", is_staff=True))
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200


def test_a_reconcile_is_timed_by_outcome(metrics_redis, client, db):
    from jobs.tasks import reconcile_job

    assert reconcile_job(999_999) == "gone"  # no such job: nothing to do, but it was timed
    observability.flush()
    got = samples(client.get("/metrics").content.decode())
    assert got[("gpuportal_reconcile_duration_seconds_count", (("outcome", "gone"),))] == 1
