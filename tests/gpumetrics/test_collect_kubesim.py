"""The sweep against kubesim's dcgm-exporter pods (API server pod proxy, official client) into
PostgreSQL: attribution to jobs, MIG instances, failures, invalid lines, XID events, rollup,
summary and the API. Pods are created directly with the names the portal's Jobs give them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubesim.testing import wait_for

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]

TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
GPU_UUIDS = "kubesim.dev/gpu-uuids"


def make_pod(core, namespace, name, command, limits, node=None):
    spec = {
        "restartPolicy": "Never",
        "tolerations": TOLERATE_GPU,
        "containers": [
            {
                "name": "trainer",
                "image": "pytorch/pytorch:2.4.0",
                "command": command,
                "resources": {"limits": limits},
            }
        ],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    core.create_namespaced_pod(
        namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    )


@pytest.fixture
def running(kube, personas, make_job):
    """Four jobs of project alpha with running pods: busy 1 GPU, sleeping 1 GPU, MIG, 8 GPUs."""
    core = kube
    namespace = personas.project_a.namespace
    try:
        core.create_namespace({"metadata": {"name": namespace}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    jobs = {
        "busy": make_job(gpus=1),
        "sleepy": make_job(gpus=1, command=["sh", "-c", "sleep 100000"]),
        "mig": make_job(kind="mig", gpus=0, mig_profile="1g.10gb"),
        "eight": make_job(gpus=8),
    }
    pods = {key: f"gp-job-{job.pk}-{key[:3]}xy" for key, job in jobs.items()}
    make_pod(
        core, namespace, pods["busy"], ["python", "train.py"], {"nvidia.com/gpu": 1}, "gpu-h100-0"
    )
    make_pod(
        core,
        namespace,
        pods["sleepy"],
        ["sh", "-c", "sleep 100000"],
        {"nvidia.com/gpu": 1},
        "gpu-h100-0",
    )
    make_pod(core, namespace, pods["mig"], ["python", "train.py"], {"nvidia.com/mig-1g.10gb": 1})
    make_pod(
        core, namespace, pods["eight"], ["python", "train.py"], {"nvidia.com/gpu": 8}, "gpu-h100-1"
    )

    def all_running():
        return all(
            core.read_namespaced_pod(p, namespace).status.phase == "Running" for p in pods.values()
        )

    wait_for(all_running, timeout=60, message="the job pods to run")
    yield jobs, pods, namespace
    for pod in pods.values():
        core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)


def uuids_of(core, namespace, pod):
    return set(core.read_namespaced_pod(pod, namespace).metadata.annotations[GPU_UUIDS].split(","))


def test_sweep_attributes_stores_and_serves(kube, sim, running, personas, api_client_for, settings):
    from gpumetrics import services
    from gpumetrics.models import ExporterStatus, JobGpu, JobGpuSummary, MetricBlock
    from jobs.models import JobEvent
    from jobs.services import job_transition

    core = kube
    jobs, pods, namespace = running
    t0 = int(time.time()) - 600
    reports = [services.collect(now=t0 + 15 * i) for i in range(3)]
    report = reports[-1]
    assert report.failures == 0
    assert report.targets == 6  # one exporter per GPU node
    assert report.ingest.jobs == 4

    devices = {key: list(JobGpu.objects.filter(job=job)) for key, job in jobs.items()}
    # a single-GPU job names exactly one GPU UUID, the one the device plugin gave its pod
    assert [d.gpu_uuid for d in devices["busy"]] == list(uuids_of(core, namespace, pods["busy"]))
    assert devices["busy"][0].samples == 3
    # the MIG job names its instance: parent GPU UUID + GPU instance id + profile
    (mig,) = devices["mig"]
    assert mig.mig_instance_id != ""
    assert mig.mig_profile == "1g.10gb"
    assert mig.node == "gpu-h100-mig-0"
    # the 8-GPU job names eight
    assert {d.gpu_uuid for d in devices["eight"]} == uuids_of(core, namespace, pods["eight"])
    assert len(devices["eight"]) == 8
    assert not JobEvent.objects.filter(reason="IsolationCheck").exists()
    assert ExporterStatus.objects.filter(last_success__isnull=False).count() == 6

    # storage: packed blocks, a few bytes per sample
    assert MetricBlock.objects.filter(device__job=jobs["busy"], resolution=0).count() == 1

    # invalid lines in a scrape: counted, and the valid lines are still stored
    sim.admin(
        "/kubesim/dcgm/garbage",
        {
            "node": "gpu-h100-0",
            "lines": [
                'DCGM_FI_DEV_GPU_UTIL{gpu="9",UUID="GPU-bad",Hostname="x"} ERROR: no data',
                "DCGM_FI_DEV_GPU_TEMP{gpu=0,UUID=broken} 1",
            ],
        },
    )
    try:
        report = services.collect(now=t0 + 45)
    finally:
        sim.admin("/kubesim/dcgm/garbage", {"node": "gpu-h100-0", "lines": []})
    assert report.ingest.skipped_lines == 2
    assert JobGpu.objects.get(job=jobs["busy"]).samples == 4
    assert JobGpu.objects.get(job=jobs["sleepy"]).samples == 4
    assert ExporterStatus.objects.get(node="gpu-h100-0").skipped_lines == 2

    # a dead exporter is counted as a failure; the other exporters are still read
    sim.admin("/kubesim/nodes/gpu-a100-0/not-ready")
    try:
        report = services.collect(now=t0 + 60)
    finally:
        sim.admin("/kubesim/nodes/gpu-a100-0/ready")
    assert report.failures == 1
    status = ExporterStatus.objects.get(node="gpu-a100-0")
    assert (status.failures, status.consecutive_failures) == (1, 1)
    assert "503" in status.last_error or "reach" in status.last_error
    assert JobGpu.objects.get(job=jobs["busy"]).samples == 5

    # an XID on the busy job's GPU becomes one job event with its meaning
    busy_gpu = JobGpu.objects.get(job=jobs["busy"])
    sim.admin("/kubesim/xid", {"node": "gpu-h100-0", "gpu": int(busy_gpu.gpu_index), "xid": 79})
    try:
        services.collect(now=t0 + 75)
        services.collect(now=t0 + 90)
    finally:
        sim.admin("/kubesim/xid", {"node": "gpu-h100-0", "gpu": int(busy_gpu.gpu_index), "xid": 0})
    (xid_event,) = JobEvent.objects.filter(job=jobs["busy"], reason="XidError")
    assert "XID 79" in xid_event.message
    assert "fallen off the bus" in xid_event.message
    assert busy_gpu.gpu_uuid in xid_event.message

    # the API: series per device, tenancy, clear errors
    member = api_client_for(personas.member)
    url = f"/api/v1/jobs/{jobs['busy'].pk}/metrics/"
    body = member.get(url, {"series": "util,fb_used"}).json()
    (device,) = body["devices"]
    assert device["uuid"] == busy_gpu.gpu_uuid
    assert len(device["timestamps"]) == 7
    assert set(device["mean"]) == {"util", "fb_used"}
    assert min(device["mean"]["util"]) > 50
    mig_body = member.get(f"/api/v1/jobs/{jobs['mig'].pk}/metrics/").json()
    assert mig_body["devices"][0]["mig_instance_id"] == mig.mig_instance_id
    assert len(member.get(f"/api/v1/jobs/{jobs['eight'].pk}/metrics/").json()["devices"]) == 8
    assert api_client_for(personas.outsider).get(url).status_code == 404
    bad = member.get(url, {"series": "util,bogus"})
    assert bad.status_code == 400
    assert "bogus" in str(bad.json())
    assert member.get(url, {"since": "yesterday"}).status_code == 400
    assert member.get(url, {"step": "-5"}).status_code == 400

    # the jobs end: summary, idle flag, rollups (7 sweeps over 90 s: judged on 1 minute here)
    settings.PORTAL_METRICS_IDLE_MIN_MINUTES = 1
    for job in jobs.values():
        job_transition(
            job, to="succeeded", reason="Completed", source="test", expected_from=job.state
        )
    assert services.rollup_finished() == 4
    busy = JobGpuSummary.objects.get(job=jobs["busy"])
    sleepy = JobGpuSummary.objects.get(job=jobs["sleepy"])
    assert busy.final
    assert busy.idle is False
    assert busy.util_mean > 50
    assert sleepy.idle is True
    assert (busy.idle_verdict, sleepy.idle_verdict) == ("busy", "idle")
    assert sleepy.util_mean < 1
    assert busy.fb_peak_mib > 10000
    assert busy.fb_total_mib > 80000
    assert busy.energy_kwh > sleepy.energy_kwh > 0
    assert busy.gpu_hours == pytest.approx((90 + 15) / 3600)  # 7 samples, 15 s apart
    eight = JobGpuSummary.objects.get(job=jobs["eight"])
    assert eight.gpu_hours == pytest.approx(8 * 105 / 3600)
    assert MetricBlock.objects.filter(device__job=jobs["busy"], resolution=60).count() == 1
    assert MetricBlock.objects.filter(device__job=jobs["busy"], resolution=3600).count() == 1
    minute = member.get(url, {"step": "60"}).json()
    assert minute["resolution"] == 60
    assert minute["summary"]["idle"] is False
    assert minute["devices"][0]["max"]["util"][0] >= minute["devices"][0]["mean"]["util"][0]
    assert services.rollup_finished() == 0  # once only

    # project usage from the hourly rollups, JSON and CSV
    usage_url = f"/api/v1/projects/{personas.project_a.slug}/usage/"
    rows = member.get(usage_url, {"group_by": "user"}).json()["rows"]
    (row,) = rows
    assert row["user"] == personas.member.username
    assert row["jobs"] == 4
    assert row["gpu_hours_held"] > row["gpu_hours_used"] > 0
    csv_text = member.get(usage_url, {"group_by": "day", "format": "csv"}).content.decode()
    assert csv_text.splitlines()[0] == "day,jobs,gpu_hours_held,gpu_hours_used,util_mean"
    assert len(csv_text.splitlines()) >= 2
    (pool_row,) = member.get(usage_url, {"group_by": "pool"}).json()["rows"]
    assert pool_row["pool"] == "NVIDIA H100 80GB HBM3"  # no pool chosen: the GPU model
    assert pool_row["gpu_hours_held"] == pytest.approx(row["gpu_hours_held"])
    assert api_client_for(personas.outsider).get(usage_url).status_code == 404
    assert member.get(usage_url, {"group_by": "month"}).status_code == 400


@pytest.fixture
def prometheus(sim, kube, tmp_path):
    """A real Prometheus (Debian's package) scraping every kubesim exporter through the API
    server's pod proxy, with the kubeconfig's CA and bearer token."""
    import shutil
    import socket
    import subprocess
    import urllib.request

    import yaml

    from portal.kube.metrics import list_exporter_pods

    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    assert Path(binary).exists(), "prometheus is not installed (scripts/ensure-services.sh)"
    token = tmp_path / "token"
    token.write_text(sim.token)
    host = sim.url.split("://", 1)[1]
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": f"dcgm-{pod.node}",
                "scheme": "https",
                "metrics_path": (
                    f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}:9400/proxy/metrics"
                ),
                "honor_labels": True,
                "tls_config": {"ca_file": str(sim.ca_file)},
                "authorization": {"type": "Bearer", "credentials_file": str(token)},
                "static_configs": [{"targets": [host]}],
            }
            for pod in list_exporter_pods("gpu-operator", "app=nvidia-dcgm-exporter")
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - open for the child's lifetime
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def all_targets_up():
        try:
            with urllib.request.urlopen(f"{url}/api/v1/query?query=up", timeout=2) as response:
                result = json.loads(response.read())["data"]["result"]
        except OSError:
            return False
        return len(result) == len(config["scrape_configs"]) and all(
            r["value"][1] == "1" for r in result
        )

    try:
        wait_for(all_targets_up, timeout=60, message="Prometheus to scrape every exporter")
        yield url
    finally:
        process.terminate()
        process.wait(20)
        log.close()


def test_prometheus_source_gives_the_same_series_as_the_direct_scrape(
    kube, running, prometheus, settings
):
    from gpumetrics import services
    from gpumetrics.conf import config
    from gpumetrics.models import JobGpu
    from gpumetrics.sources import read_prometheus, scrape_exporters
    from portal.kube.metrics import list_exporter_pods

    jobs, pods, _namespace = running
    wanted = set(pods.values())
    settings.PORTAL_METRICS_SOURCE = "prometheus"
    settings.PORTAL_METRICS_PROMETHEUS_URL = prometheus
    cfg = config()

    def job_devices(readings):
        return {k: d for k, d in readings.devices.items() if d.pod in wanted}

    # wait until Prometheus has scraped the job pods (labels carry the pod once it holds a GPU)
    wait_for(
        lambda: len(job_devices(read_prometheus(cfg).readings)) == 11,
        timeout=30,
        message="Prometheus to see the jobs' devices",
    )
    via_prometheus = job_devices(read_prometheus(cfg).readings)
    direct = job_devices(
        scrape_exporters(cfg, list_exporter_pods(cfg.namespace, cfg.label_selector)).readings
    )
    assert set(via_prometheus) == set(direct)
    for key, device in direct.items():
        other = via_prometheus[key]
        assert (other.pod, other.namespace, other.gi_profile) == (
            device.pod,
            device.namespace,
            device.gi_profile,
        )
        assert set(other.fields) == set(device.fields)
        for field in ("DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_SM_CLOCK"):
            if field in device.fields:
                assert other.fields[field] == device.fields[field]
    # and the whole path with the prometheus source stores the same devices per job
    report = services.collect(cfg=cfg, now=time.time())
    assert report.source == "prometheus"
    assert report.failures == 0
    for key, job in jobs.items():
        stored = {(d.gpu_uuid, d.mig_instance_id) for d in JobGpu.objects.filter(job=job)}
        expected = {(k.uuid, k.gi_id) for k, d in direct.items() if d.pod == pods[key]}
        assert stored == expected
