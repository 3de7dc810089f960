"""The watcher's Kubernetes plumbing against kubesim (no mocks): Lease leader election and an
informer that relists after the API server's history expired."""

import json
import ssl
import threading
import time
import urllib.request

import pytest

pytestmark = [pytest.mark.kubesim]


@pytest.fixture
def kube(kubesim_api, settings):
    from portal.kube.client import reset_api_client

    settings.KUBECONFIG = str(kubesim_api.kubeconfig)
    settings.PORTAL_KUBE_QPS = 0
    reset_api_client()
    yield kubesim_api
    reset_api_client()


def _fault(server, body):
    context = ssl.create_default_context(cafile=str(server.ca_file))
    request = urllib.request.Request(
        server.url + "/kubesim/faults",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, context=context) as response:
        return json.loads(response.read())


def _until(predicate, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class ManualClock:
    """The electors' monotonic clock, moved on by the test: how long a lease has gone
    unrenewed is then a fact of the test, not of how busy the machine is."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_candidate_holds_the_lease_and_a_standby_takes_over_when_it_stops(kube):
    from jobs.watcher.leader import LeaderElector
    from portal.kube import watch

    name = f"lease-{time.time_ns()}"
    clock = ManualClock()
    a = LeaderElector(namespace="default", name=name, identity="a", lease_seconds=2, clock=clock)
    b = LeaderElector(namespace="default", name=name, identity="b", lease_seconds=2, clock=clock)
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    assert a.try_acquire_or_renew() is True  # renewing keeps it
    assert b.try_acquire_or_renew() is False
    assert watch.get_lease("default", name)["spec"]["holderIdentity"] == "a"
    # a dies (stops renewing): b sees no change for a whole lease duration, then takes over;
    # not a moment before.
    clock.now += 1.9
    assert b.try_acquire_or_renew() is False
    assert watch.get_lease("default", name)["spec"]["holderIdentity"] == "a"
    clock.now += 0.1
    assert b.try_acquire_or_renew() is True
    assert not a.try_acquire_or_renew()  # a, back, finds b holding a fresh lease
    assert not a.is_leader
    lease = watch.get_lease("default", name)["spec"]
    assert lease["holderIdentity"] == "b"
    assert lease["leaseTransitions"] == 2


def test_an_informer_relists_after_410_gone_and_reports_what_it_missed(kube):
    from jobs.watcher.informer import Collection, Informer
    from portal.kube import apply

    ns = "default"
    label = f"t{time.time_ns()}"
    changes = []

    def cm(name, labelled=True):
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {"watch-test": label} if labelled else {},
            },
            "data": {"k": "v"},
        }

    apply.apply(cm(f"{label}-a"))
    stop = threading.Event()
    informer = Informer(
        Collection("v1", "ConfigMap", f"watch-test={label}"), changes.append, stop=stop
    )
    informer.start()
    try:
        _until(lambda: informer.known == {(ns, f"{label}-a")}, what="the first list")
        assert informer.relists == 1
        # Move the server's revision past the informer's without it noticing, then expire the
        # history and drop the watch: resuming must get 410 Gone and relist.
        apply.apply(cm(f"{label}-unwatched", labelled=False))
        _fault(kube, {"expire_history": True, "close_watches": True})
        apply.delete("v1", "ConfigMap", f"{label}-a", ns)
        apply.apply(cm(f"{label}-b"))
        _until(lambda: informer.known == {(ns, f"{label}-b")}, what="the relist")
        assert informer.relists == 2
        names = [(c.type, c.obj.get("metadata", {}).get("name")) for c in changes]
        assert ("DELETED", f"{label}-a") in names
        assert any(name == f"{label}-b" for _, name in names)
    finally:
        stop.set()
        apply.delete("v1", "ConfigMap", f"{label}-b", ns)
        apply.delete("v1", "ConfigMap", f"{label}-unwatched", ns)


def test_a_lease_renewal_does_not_wait_behind_the_process_rate_limit(kube, settings):
    """The watcher's own reads may use up the process's API budget; its Lease renewals go
    through a client of their own, so a busy leader does not lose its Lease by queueing."""
    from jobs.watcher.leader import LeaderElector
    from portal.kube.client import get_api_client, get_lease_client, reset_api_client

    # One request every 1,000 seconds for everything else: a paced Lease call would wait that
    # long, far past the generous wait below.
    settings.PORTAL_KUBE_QPS = 0.001
    settings.PORTAL_KUBE_BURST = 1
    reset_api_client()
    assert get_api_client().bucket is not None
    assert get_lease_client().bucket is None
    get_api_client().bucket.acquire()  # the process's budget is spent
    elector = LeaderElector(
        namespace="default", name=f"lease-{time.time_ns()}", identity="a", lease_seconds=2
    )
    results: list[bool] = []
    renewals = threading.Thread(
        target=lambda: results.extend(elector.try_acquire_or_renew() for _ in range(5)),
        daemon=True,
    )
    renewals.start()
    renewals.join(timeout=60)
    assert not renewals.is_alive(), "a Lease call waited for the process's rate limit"
    assert results == [True] * 5  # ten Lease calls, none paced
