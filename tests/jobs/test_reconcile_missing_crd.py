"""A cluster without Volcano: a Volcano job is told so (not retried in silence), staff see it in
the log, and /healthz?deep=1 says which backends' CRDs the cluster serves."""

import logging

import pytest
from kubesim.testing import KubesimProcess, vendored_crds_dir

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]


@pytest.fixture(scope="module")
def kueue_only_cluster(tmp_path_factory):
    with KubesimProcess(
        crds=[vendored_crds_dir() / "kueue"],
        extra_args=["--no-default-crds"],
        speed=100,
        workdir=tmp_path_factory.mktemp("ks-no-volcano"),
    ) as server:
        yield server


@pytest.fixture
def kueue_only(kueue_only_cluster, settings):
    from portal.kube import discovery
    from portal.kube.client import reset_api_client

    settings.KUBECONFIG = str(kueue_only_cluster.kubeconfig)
    settings.PORTAL_KUBE_QPS = 0
    reset_api_client()
    discovery.forget()
    yield kueue_only_cluster
    discovery.forget()


def test_a_volcano_job_on_a_cluster_without_volcano_is_told_why_it_waits(
    kueue_only, make_job, caplog
):
    from jobs.models import Job
    from jobs.reconcile.services import job_reconcile
    from portal.kube.apply import ResourceNotServed, RetryableKubeError

    job = make_job(kind="gang", gpus=1, replicas=2, backend="volcano")
    caplog.set_level(logging.ERROR, logger="jobs.reconcile.services")
    for _ in range(3):  # the task's retries
        with pytest.raises(ResourceNotServed) as raised:
            job_reconcile(job_id=job.pk)
        assert isinstance(raised.value, RetryableKubeError)  # retried, never failed
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == "submitted"
    assert stored.state_reason == "BackendMissing"
    assert "the cluster has no Volcano installed" in stored.state_message
    (event,) = stored.events.filter(reason="BackendMissing")  # told once, not at every retry
    assert "no Volcano installed" in event.message
    staff_lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(staff_lines) == 1
    assert f"job {job.pk}" in staff_lines[0]
    assert "no Volcano installed" in staff_lines[0]


def test_a_kueue_job_on_the_same_cluster_is_applied(kueue_only, make_job):
    from jobs.reconcile.services import job_reconcile
    from portal.kube import apply as kube

    job = make_job(kind="single", gpus=1, backend="kueue")
    kube.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": job.project.namespace}}
    )
    assert job_reconcile(job_id=job.pk) == "applied"


def test_healthz_deep_reports_which_backends_the_cluster_serves(kueue_only, client):
    shallow = client.get("/healthz")
    assert shallow.json() == {"status": "ok"}

    response = client.get("/healthz?deep=1")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "degraded"
    assert body["kubernetes"] == "ok"
    assert body["backends"]["kueue"]["installed"] is True
    volcano = body["backends"]["volcano"]
    assert volcano["installed"] is False
    assert "batch.volcano.sh/v1alpha1 jobs" in volcano["missing"]
    assert "the cluster has no Volcano installed" in volcano["message"]


def test_healthz_deep_answers_503_when_the_cluster_is_unreachable(settings, tmp_path, client, db):
    # A kubeconfig pointing at a port nothing listens on (closed right after binding it).
    import socket

    from portal.kube.client import reset_api_client

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        f"clusters: [{{name: x, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: x, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\n"
    )
    settings.KUBECONFIG = str(kubeconfig)
    settings.PORTAL_KUBE_QPS = 0
    reset_api_client()
    response = client.get("/healthz?deep=1")
    assert response.status_code == 503
    assert response.json()["status"] == "error"
    assert "cannot reach" in response.json()["kubernetes"]
