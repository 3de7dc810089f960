"""End to end for GPU metrics: jobs submitted through the API run on kubesim, a real Celery
worker with beat scrapes the dcgm-exporter pods, attributes the readings to the jobs, stores,
rolls up and judges them; the API serves them."""

import pytest
from kubesim.testing import KubesimProcess, shared_crds_dir

from tests.e2e.conftest import wait_for
from tests.e2e.test_jobs_e2e import api_as, resync_until, submit, sync_quotas_and_wait

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# Opaque programs (python train.py) run 3,000 simulated seconds: 30 s at speed 100.
DURATION = 3000


@pytest.fixture(scope="module")
def e2e_kubesim(tmp_path_factory):
    with KubesimProcess(
        crds=[shared_crds_dir()],
        speed=100,
        workdir=tmp_path_factory.mktemp("ks-e2e-metrics"),
        extra_args=["--default-duration", str(DURATION)],
    ) as server:
        yield server


@pytest.fixture(autouse=True)
def _fast_metrics_beat(monkeypatch):
    """Sweep every 2 s and maintain every 3 s in the worker (set before worker_factory reads
    the environment); the jobs run 30 s, so idleness is judged on 12 s of samples."""
    monkeypatch.setenv("PORTAL_METRICS_PERIOD_SECONDS", "2")
    monkeypatch.setenv("PORTAL_METRICS_IDLE_MIN_MINUTES", "0.2")
    monkeypatch.setenv("PORTAL_METRICS_MAINTAIN_SECONDS", "3")


def metrics(client, job_id, **params):
    response = client.get(f"/api/v1/jobs/{job_id}/metrics/", params)
    assert response.status_code == 200, response.content[:300]
    return response.json()


def test_jobs_metrics_from_scrape_to_summary(e2e_org, worker_factory, e2e_kubesim):
    from gpumetrics.models import ExporterStatus, JobGpu, JobGpuSummary
    from portal.kube import apply as kube

    worker_factory(beat_seconds=3)
    sync_quotas_and_wait(e2e_org)
    bob = api_as(e2e_org["bob"])
    busy = submit(bob, kind="single", gpus=1)
    sleepy = submit(bob, kind="single", gpus=1, command=["sh", "-c", f"sleep {DURATION}"])
    mig = submit(bob, kind="mig", mig_profile="1g.10gb")
    eight = submit(bob, kind="single", gpus=8)
    ids = [busy["id"], sleepy["id"], mig["id"], eight["id"]]
    resync_until(ids, {"running"}, timeout=120)

    def pod_uuids(job_id):
        pods = kube.list_owned(
            "v1", "Pod", namespace="gp-alpha", selector=f"gpu-portal.io/job-id={job_id}"
        )
        return {
            u
            for p in pods
            for u in (p["metadata"].get("annotations") or {})
            .get("kubesim.dev/gpu-uuids", "")
            .split(",")
            if u
        }

    # attribution while the jobs run: exactly the devices each job's pod was given
    def seen(job_id, count):
        devices = list(JobGpu.objects.filter(job_id=job_id, samples__gte=2))
        return len(devices) == count and devices

    (busy_gpu,) = wait_for(lambda: seen(busy["id"], 1), timeout=60, what="the busy job's GPU")
    assert {busy_gpu.gpu_uuid} == pod_uuids(busy["id"])
    body = metrics(bob, busy["id"])
    assert [d["uuid"] for d in body["devices"]] == [busy_gpu.gpu_uuid]
    assert body["devices"][0]["mig_instance_id"] is None
    assert max(body["devices"][0]["mean"]["util"]) > 50
    (mig_gpu,) = wait_for(lambda: seen(mig["id"], 1), timeout=30, what="the MIG job's instance")
    assert mig_gpu.mig_instance_id
    assert mig_gpu.mig_profile == "1g.10gb"
    body = metrics(bob, mig["id"])
    assert body["devices"][0]["mig_instance_id"] == mig_gpu.mig_instance_id
    eight_gpus = wait_for(lambda: seen(eight["id"], 8), timeout=30, what="the 8-GPU job's GPUs")
    assert {d.gpu_uuid for d in eight_gpus} == pod_uuids(eight["id"])
    assert len(metrics(bob, eight["id"])["devices"]) == 8
    assert api_as(e2e_org["oscar"]).get(f"/api/v1/jobs/{busy['id']}/metrics/").status_code == 404

    # a scrape with invalid lines: the lines are counted, the valid ones still stored
    e2e_kubesim.admin(
        "/kubesim/dcgm/garbage",
        {"lines": ['DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-x",Hostname="h"} ERROR: not supported']},
    )
    try:
        before = JobGpu.objects.get(pk=busy_gpu.pk).samples
        wait_for(
            lambda: sum(ExporterStatus.objects.values_list("skipped_lines", flat=True)) > 0,
            timeout=30,
            what="skipped lines to be counted",
        )
        wait_for(
            lambda: JobGpu.objects.get(pk=busy_gpu.pk).samples >= before + 2,
            timeout=30,
            what="samples stored from scrapes with invalid lines",
        )
    finally:
        e2e_kubesim.admin("/kubesim/dcgm/garbage", {"lines": []})

    # the jobs end: the sleeping one is flagged idle, the busy one is not
    final = resync_until(ids, {"succeeded", "failed"}, timeout=120)
    assert set(final.values()) == {"succeeded"}, final

    def summaries():
        rows = {s.job_id: s for s in JobGpuSummary.objects.filter(job_id__in=ids, final=True)}
        return len(rows) == len(ids) and rows

    done = wait_for(summaries, timeout=60, what="the final summaries")
    assert done[busy["id"]].idle is False
    assert done[busy["id"]].util_mean > 50
    assert done[sleepy["id"]].idle is True
    assert done[sleepy["id"]].util_mean < 1
    assert done[eight["id"]].gpu_hours > done[busy["id"]].gpu_hours
    summary = metrics(bob, sleepy["id"], step="60")["summary"]
    assert summary["idle"] is True
    assert summary["idle_verdict"] == "idle"
    assert summary["final"] is True
