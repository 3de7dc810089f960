"""portal/kube: the token bucket and error classification (no server needed)."""

import json

import urllib3
from kubernetes.client.exceptions import ApiException

from portal.kube.apply import PermanentKubeError, RetryableKubeError, classify, object_path
from portal.kube.client import TokenBucket


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_token_bucket_allows_a_burst_then_paces_at_the_rate():
    clock = FakeClock()
    bucket = TokenBucket(20, 40, clock=clock, sleep=clock.sleep)
    for _ in range(40):
        assert bucket.acquire() == 0.0
    assert clock.now == 0.0
    for _ in range(20):
        bucket.acquire()
    assert 0.99 <= clock.now <= 1.01  # 20 more requests took one second at 20/s


def test_token_bucket_refills_while_idle_up_to_burst():
    clock = FakeClock()
    bucket = TokenBucket(10, 5, clock=clock, sleep=clock.sleep)
    for _ in range(5):
        bucket.acquire()
    clock.now += 100
    for _ in range(5):
        assert bucket.acquire() == 0.0
    assert bucket.acquire() > 0


def test_zero_rate_means_no_pacing():
    clock = FakeClock()
    bucket = TokenBucket(0, 1, clock=clock, sleep=clock.sleep)
    for _ in range(1000):
        bucket.acquire()
    assert clock.now == 0


def api_error(status, message="boom", reason="Invalid"):
    exc = ApiException(status=status, reason=reason)
    exc.body = json.dumps({"kind": "Status", "message": message, "reason": reason, "code": status})
    return exc


def test_classification():
    for status in (409, 429, 500, 503):
        assert isinstance(classify(api_error(status)), RetryableKubeError)
    err = classify(api_error(422, 'Job.batch "x" is invalid: spec.foo: Invalid value'))
    assert isinstance(err, PermanentKubeError)
    assert err.status == 422
    assert err.message == 'Job.batch "x" is invalid: spec.foo: Invalid value'
    assert isinstance(classify(api_error(403)), PermanentKubeError)
    # A terminating namespace refuses new content with 403: a wait, not a rejection.
    terminating = classify(
        api_error(
            403,
            'jobs.batch "gp-job-1" is forbidden: unable to create new content in namespace '
            "gp-vision because it is being terminated",
            reason="Forbidden",
        )
    )
    assert isinstance(terminating, RetryableKubeError)
    assert terminating.status == 403
    conn = urllib3.exceptions.MaxRetryError(None, "/", "refused")
    assert isinstance(classify(conn), RetryableKubeError)
    assert isinstance(classify(ConnectionRefusedError()), RetryableKubeError)


def test_object_paths():
    assert object_path("batch/v1", "Job", "ns", "j") == "/apis/batch/v1/namespaces/ns/jobs/j"
    assert object_path("v1", "Namespace", None, "ns") == "/api/v1/namespaces/ns"
    assert (
        object_path("kueue.x-k8s.io/v1beta2", "ClusterQueue", None, "cq")
        == "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/cq"
    )
    assert (
        object_path("scheduling.volcano.sh/v1beta1", "Queue", None, None)
        == "/apis/scheduling.volcano.sh/v1beta1/queues"
    )
