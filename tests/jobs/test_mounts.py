"""jobs/mounts.py and the volume parts of jobs/manifests.py: pure, no database, no cluster."""

from decimal import Decimal

import pytest

from jobs.manifests import JobManifestInput, build_job_manifests
from jobs.mounts import VolumeFacts, default_shm_bytes, mount_path_error, resolve_mounts

VOLUMES = {
    "imagenet": VolumeFacts("imagenet", "imagenet-pvc", "/data", read_only=True),
    "scratch": VolumeFacts("scratch", "gp-vol-scratch", "/scratch", read_only=False),
}


def resolve(raw):
    return resolve_mounts(raw, VOLUMES, project_slug="alpha")


def test_defaults_come_from_the_volume():
    mounts, errors = resolve([{"volume": "imagenet"}, {"volume": "scratch", "path": "/out"}])
    assert errors == {}
    assert [m.as_dict() for m in mounts] == [
        {"volume": "imagenet", "claim": "imagenet-pvc", "path": "/data", "read_only": True},
        {"volume": "scratch", "claim": "gp-vol-scratch", "path": "/out", "read_only": False},
    ]
    # A read-write volume may be mounted read-only.
    (m,), _ = resolve([{"volume": "scratch", "read_only": True}])
    assert m.read_only is True


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        ([{"volume": "nope"}], "mounts[0].volume", "has no volume 'nope'"),
        ([{"volume": "imagenet", "path": "/proc"}], "mounts[0].path", "shadow /proc"),
        ([{"volume": "imagenet", "path": "/etc/ssl"}], "mounts[0].path", "shadow /etc"),
        ([{"volume": "imagenet", "path": "/"}], "mounts[0].path", "whole image"),
        ([{"volume": "imagenet", "path": "/var"}], "mounts[0].path", "hide /var/run"),
        ([{"volume": "imagenet", "path": "/dev/shm"}], "mounts[0].path", "/dev"),
        ([{"volume": "imagenet", "path": "/checkpoints"}], "mounts[0].path", "/checkpoints"),
        ([{"volume": "imagenet", "path": "data"}], "mounts[0].path", "not an absolute path"),
        ([{"volume": "imagenet", "path": "/data/../etc"}], "mounts[0].path", "plain path"),
        (
            [{"volume": "imagenet"}, {"volume": "scratch", "path": "/data"}],
            "mounts[1].path",
            "mounts[0] is already mounted at /data",
        ),
        (
            [{"volume": "imagenet", "read_only": False}],
            "mounts[0].read_only",
            "imagenet is read-only",
        ),
        ([{"volume": "imagenet", "hostPath": "/"}], "mounts[0].hostPath", "Unknown field"),
        (["imagenet"], "mounts[0]", "is an object"),
        ({"volume": "imagenet"}, "mounts", "must be a list"),
    ],
)
def test_bad_mounts_name_the_field(raw, field, words):
    _, errors = resolve(raw)
    assert field in errors, errors
    assert any(words in message for message in errors[field]), errors[field]


def test_mount_path_rule_allows_ordinary_directories():
    for path in ("/data", "/workspace/in", "/home/me", "/var/lib/data", "/opt/x", "/mnt/a.b"):
        assert mount_path_error(path) is None, path


def test_default_shm_is_half_the_memory_capped():
    gib = Decimal(2**30)
    assert default_shm_bytes(64 * gib, 64 * gib) == 32 * gib
    assert default_shm_bytes(256 * gib, 64 * gib) == 64 * gib


def spec(**overrides) -> JobManifestInput:
    base = dict(
        job_id=7,
        name="train",
        project_slug="alpha",
        namespace="gp-alpha",
        kind="gang",
        backend="kueue",
        image="nvcr.io/nvidia/pytorch:24.08-py3",
        command=("python", "train.py"),
        env={},
        gpus=8,
        mig_resource="",
        replicas=2,
        cpu="8",
        memory="64Gi",
        priority="normal",
        max_runtime_seconds=3600,
        mounts=(
            {"volume": "imagenet", "claim": "imagenet-pvc", "path": "/data", "read_only": True},
            {"volume": "scratch", "claim": "gp-vol-scratch", "path": "/out", "read_only": False},
        ),
        shm_size="32Gi",
        termination_grace_seconds=120,
        checkpoint_dir="/checkpoints/alpha/train",
        checkpoint_claim="gp-vol-ckpt",
    )
    base.update(overrides)
    return JobManifestInput(**base)


def pod_specs(manifests):
    for obj in manifests:
        if obj["kind"] == "Job" and obj["apiVersion"] == "batch/v1":
            yield obj["spec"]["template"]["spec"]
        elif obj["apiVersion"].startswith("batch.volcano.sh"):
            for task in obj["spec"]["tasks"]:
                yield task["template"]["spec"]


@pytest.mark.parametrize("backend", ["kueue", "volcano"])
def test_pods_get_claims_shm_checkpoints_and_grace_never_host_paths(backend):
    pods = list(pod_specs(build_job_manifests(spec(backend=backend))))
    assert pods
    for pod in pods:
        assert pod["terminationGracePeriodSeconds"] == 120
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert not any("hostPath" in v for v in pod["volumes"])
        assert volumes["dshm"] == {
            "name": "dshm",
            "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"},
        }
        assert volumes["vol-imagenet"]["persistentVolumeClaim"] == {
            "claimName": "imagenet-pvc",
            "readOnly": True,
        }
        assert volumes["vol-scratch"]["persistentVolumeClaim"]["readOnly"] is False
        assert volumes["checkpoints"]["persistentVolumeClaim"] == {"claimName": "gp-vol-ckpt"}
        (container,) = pod["containers"]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert mounts["/dev/shm"]["name"] == "dshm"
        assert mounts["/data"] == {"name": "vol-imagenet", "mountPath": "/data", "readOnly": True}
        assert mounts["/out"]["readOnly"] is False
        assert mounts["/checkpoints/alpha/train"]["subPath"] == "alpha/train"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["CHECKPOINT_DIR"] == "/checkpoints/alpha/train"


def test_no_checkpoint_volume_means_no_checkpoint_env():
    (job,) = build_job_manifests(
        spec(kind="single", replicas=1, checkpoint_dir="", checkpoint_claim="", mounts=())
    )
    pod = job["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["dshm"]
    (container,) = pod["containers"]
    assert "CHECKPOINT_DIR" not in {e["name"] for e in container.get("env", [])}
