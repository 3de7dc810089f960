"""Jobs with data volumes, /dev/shm and checkpoints against kubesim: the objects the cluster
holds, and a checkpoint directory that survives preemption and resubmission."""

import pytest

from tests.jobs.kubesim_org import reconcile_until, submit

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]


def _pvc(org, name):
    from portal.kube import apply as kube

    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": org["project"].namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "standard",
                "resources": {"requests": {"storage": "10Gi"}},
            },
        },
        field_manager="test-setup",
    )


def _volume(org, **fields):
    from volumes.models import DataVolume

    base = {"project": org["project"], "kind": "existing", "read_only": True}
    base.update(fields)
    return DataVolume.objects.create(**base)


def _pods(job):
    from jobs.manifests import job_selector
    from portal.kube import apply as kube

    return kube.list_objects(
        "v1", "Pod", namespace=job.project.namespace, label_selector=job_selector(job.pk)
    )


def _env(pod) -> dict:
    (container,) = pod["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_a_job_mounting_a_read_only_dataset_runs_with_shm_and_no_host_path(org):
    from jobs.manifests import object_name
    from portal.kube import apply as kube

    _pvc(org, "imagenet-pvc")
    _volume(org, name="imagenet", claim_name="imagenet-pvc", mount_path="/data")
    job = submit(
        org,
        kind="single",
        gpus=1,
        memory="16Gi",
        mounts=[{"volume": "imagenet"}],
        command=["sleep", "36000"],
    )
    seen = reconcile_until(job, {"running", "failed"})
    assert seen[-1] == "running", seen
    applied = kube.get("batch/v1", "Job", object_name(job.pk), job.project.namespace)
    for pod in [applied["spec"]["template"], *_pods(job)]:
        spec = pod["spec"]
        assert "hostPath" not in str(spec)
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
        assert volumes["vol-imagenet"]["persistentVolumeClaim"] == {
            "claimName": "imagenet-pvc",
            "readOnly": True,
        }
        (container,) = spec["containers"]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert mounts["/data"]["readOnly"] is True
        assert mounts["/dev/shm"]["name"] == "dshm"
        assert spec["terminationGracePeriodSeconds"] == 60


def test_a_preempted_job_keeps_its_checkpoint_dir_and_resume_reuses_it(org):
    from jobs.models import Job
    from jobs.services import job_cancel

    _pvc(org, "ckpt-pvc")
    _volume(
        org,
        name="ckpt",
        claim_name="ckpt-pvc",
        mount_path="/ckpt",
        read_only=False,
        is_checkpoint=True,
    )
    low = submit(
        org,
        name="long-run",
        kind="gang",
        gpus=8,
        replicas=2,
        priority="low",
        termination_grace_seconds=120,
        command=["sleep", "36000"],
    )
    expected = f"/checkpoints/{org['project'].slug}/long-run"
    reconcile_until(low, {"running"})
    before = _pods(low)
    assert before
    assert {_env(p)["CHECKPOINT_DIR"] for p in before} == {expected}
    assert {p["spec"]["terminationGracePeriodSeconds"] for p in before} == {120}
    first_uids = {p["metadata"]["uid"] for p in before}

    high = submit(org, kind="gang", gpus=8, replicas=2, priority="high")
    reconcile_until(high, {"admitted", "running", "succeeded"})
    reconcile_until(low, {"preempted", "queued"})
    reconcile_until(high, {"succeeded"})
    seen = reconcile_until(low, {"running", "failed"})
    assert seen[-1] == "running", (seen, Job.objects.get(pk=low.pk).state_message)
    after = [p for p in _pods(low) if p["metadata"]["uid"] not in first_uids]
    assert after, "the requeued job runs in new pods"
    for pod in after:
        assert _env(pod)["CHECKPOINT_DIR"] == expected
        (mount,) = [
            m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "checkpoints"
        ]
        assert (mount["mountPath"], mount["subPath"]) == (
            expected,
            f"{org['project'].slug}/long-run",
        )

    # Submitted again with resume under another name: the same directory.
    job_cancel(actor=org["user"], job=Job.objects.get(pk=low.pk))
    again = submit(
        org, name="long-run-2", kind="single", gpus=1, resume_from=low.pk, command=["true"]
    )
    assert again.checkpoint_dir == expected
    reconcile_until(again, {"running", "succeeded"})
    pods = _pods(again)
    assert pods
    assert {_env(p)["CHECKPOINT_DIR"] for p in pods} == {expected}
