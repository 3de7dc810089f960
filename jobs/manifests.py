"""Kubernetes objects for a job, as plain dicts. Pure functions: no database, no cluster.

The same input always gives the same objects, and every name is derived from the job id, so a
second apply addresses the same objects. Users never supply pod specs: everything that could
weaken isolation (privilege, host paths, host network, capabilities, device env) is fixed here.

Backends:
- single / mig on Kueue: one batch/v1 Job, suspended, labelled with the project's LocalQueue.
- gang on Kueue: an Indexed batch/v1 Job (parallelism = completions = replicas) plus a headless
  Service so pods reach each other as <job>-<index>.<job>; torchrun env from the index.
- gang on Volcano: a batch.volcano.sh/v1alpha1 Job with a master and a worker task and the
  pytorch plugin, which provides the same env (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK).
- on KAI Scheduler (issue 25): the same batch/v1 Jobs, not suspended (KAI holds the pods, not the
  Job), with schedulerName kai-scheduler and the project's queue label; a gang is the Indexed Job
  with kai.scheduler/batch-min-member = replicas (KAI's podgrouper makes it all-or-nothing); a
  fraction of a GPU is the pod annotation gpu-fraction or gpu-memory instead of nvidia.com/gpu.
"""

from dataclasses import dataclass, field
from typing import Any

from jobs.mounts import CHECKPOINT_ENV, SHM_PATH, checkpoint_sub_path
from jobs.secret_refs import SecretEnv, SecretFile
from portal.kube import labels as L
from quotas.manifests import (
    KAI_NODE_POOL_LABEL,
    kai_project_queue_name,
    local_queue_name,
    priority_class_name,
    volcano_project_queue_name,
    workload_priority_class_name,
)

CONTAINER_NAME = "trainer"
MASTER_PORT = 29500
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
VOLCANO_MASTER_TASK = "master"
VOLCANO_WORKER_TASK = "worker"
KAI_SCHEDULER_NAME = "kai-scheduler"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
KAI_PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
KAI_BATCH_MIN_MEMBER = "kai.scheduler/batch-min-member"
KAI_FRACTION_ANNOTATION = "gpu-fraction"
KAI_MEMORY_ANNOTATION = "gpu-memory"


@dataclass(frozen=True)
class JobManifestInput:
    """Everything the manifests depend on, resolved from the job, its project and its pool."""

    job_id: int
    name: str
    project_slug: str
    namespace: str
    kind: str  # single | mig | gang
    backend: str  # kueue | volcano (gangs only) | kai
    image: str
    command: tuple[str, ...]
    env: dict[str, str]
    gpus: int
    mig_resource: str  # e.g. nvidia.com/mig-1g.10gb, for kind mig
    replicas: int
    cpu: str
    memory: str
    priority: str  # high | normal | low
    max_runtime_seconds: int
    node_selector: dict[str, str] = field(default_factory=dict)  # the pool's labels, if chosen
    runtime_class: str = ""
    # Pod Security "restricted": pods run as this uid/gid (the project's); None = "baseline",
    # where the image's own user (root allowed) runs.
    run_as_uid: int | None = None
    # The pools validation found able to hold the job (a Volcano gang: exactly one), their node
    # labels in the same order, and the node labels of the project's other pools, which the
    # affinity must exclude (see pool_affinity).
    eligible_pools: tuple[str, ...] = ()
    eligible_pool_labels: tuple[dict[str, str], ...] = ()
    other_pool_labels: tuple[dict[str, str], ...] = ()
    # Issue 12: data volumes ({"volume", "claim", "path", "read_only"}), the memory-backed
    # /dev/shm size, SIGTERM-to-kill seconds, and the checkpoint directory and its claim.
    mounts: tuple[dict[str, Any], ...] = ()
    shm_size: str = ""
    termination_grace_seconds: int = 60
    checkpoint_dir: str = ""
    checkpoint_claim: str = ""
    # Credentials (jobs.secret_refs, names resolved): env from Secret keys, Secrets mounted
    # read-only, and the registry logins for the image. The manifests never hold a value.
    secret_env: tuple[SecretEnv, ...] = ()
    secret_files: tuple[SecretFile, ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    # Issue 25, KAI: a fraction of one GPU ("0.5") or GPU memory in MiB instead of whole GPUs;
    # whether the priority class may be preempted (KAI's preemptibility label); the KAI shard
    # (kai.scheduler/node-pool) of the pool.
    gpu_fraction: str = ""
    gpu_memory: int = 0
    preemptible: bool | None = None
    kai_node_pool: str = ""

    @property
    def fractional(self) -> bool:
        return bool(self.gpu_fraction or self.gpu_memory)


SHM_VOLUME = "dshm"
CHECKPOINT_VOLUME = "checkpoints"


def object_name(job_id: int) -> str:
    """The name of every object of a job (Job, Service, vcjob): short, DNS-1123, from the id."""
    return f"gp-job-{job_id}"


def job_labels(spec: JobManifestInput) -> dict[str, str]:
    return L.managed_labels(
        **{
            L.JOB_ID_KEY: str(spec.job_id),
            L.PROJECT_KEY: spec.project_slug,
            L.OWNER_KIND_KEY: "job",
            "gpu-portal.io/job-name": spec.name,
        }
    )


def job_selector(job_id: int) -> str:
    """Label selector for every object (and pod) of one job."""
    return f"{L.MANAGED_SELECTOR},{L.JOB_ID_KEY}={job_id}"


def _accelerator_limits(spec: JobManifestInput) -> dict[str, str]:
    if spec.fractional:
        return {}  # KAI refuses a fraction together with an nvidia.com/gpu limit
    if spec.kind == "mig":
        return {spec.mig_resource: "1"}
    return {GPU_RESOURCE: str(spec.gpus)}


def _env_list(spec: JobManifestInput, extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if spec.checkpoint_dir:
        extra = [*extra, {"name": CHECKPOINT_ENV, "value": spec.checkpoint_dir}]
    user: list[dict[str, Any]] = [{"name": k, "value": str(v)} for k, v in spec.env.items()]
    user += [
        {"name": ref.name, "valueFrom": {"secretKeyRef": {"name": ref.secret_name, "key": ref.key}}}
        for ref in spec.secret_env
    ]
    return sorted(user, key=lambda e: e["name"]) + extra


def _data_volume_name(volume: str) -> str:
    return f"vol-{volume}"


def pod_volumes(spec: JobManifestInput) -> list[dict[str, Any]]:
    """The memory-backed emptyDir at /dev/shm, one claim per data volume, the checkpoint claim.
    Only emptyDir and persistentVolumeClaim: never a hostPath."""
    volumes: list[dict[str, Any]] = []
    if spec.shm_size:
        volumes.append(
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}}
        )
    claims: dict[str, dict[str, Any]] = {}
    for mount in spec.mounts:
        name = _data_volume_name(mount["volume"])
        entry = claims.setdefault(
            name,
            {
                "name": name,
                "persistentVolumeClaim": {"claimName": mount["claim"], "readOnly": True},
            },
        )
        # The claim is attached read-only only when every mount of it is.
        if not mount["read_only"]:
            entry["persistentVolumeClaim"]["readOnly"] = False
    volumes.extend(claims[name] for name in sorted(claims))
    if spec.checkpoint_dir and spec.checkpoint_claim:
        volumes.append(
            {
                "name": CHECKPOINT_VOLUME,
                "persistentVolumeClaim": {"claimName": spec.checkpoint_claim},
            }
        )
    return volumes


def container_volume_mounts(spec: JobManifestInput) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = []
    if spec.shm_size:
        mounts.append({"name": SHM_VOLUME, "mountPath": SHM_PATH})
    for mount in spec.mounts:
        mounts.append(
            {
                "name": _data_volume_name(mount["volume"]),
                "mountPath": mount["path"],
                "readOnly": bool(mount["read_only"]),
            }
        )
    if spec.checkpoint_dir and spec.checkpoint_claim:
        # Only the job's own directory of the volume (the kubelet creates it): the same path
        # for every run of the job, and other jobs' checkpoints stay out of reach.
        mounts.append(
            {
                "name": CHECKPOINT_VOLUME,
                "mountPath": spec.checkpoint_dir,
                "subPath": checkpoint_sub_path(spec.checkpoint_dir),
            }
        )
    return mounts


def _container(spec: JobManifestInput, extra_env: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {
            "requests": {"cpu": spec.cpu, "memory": spec.memory},
            # Extended resources in limits only; Kueue and the scheduler take limits as requests.
            "limits": {"memory": spec.memory, **_accelerator_limits(spec)},
        },
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if spec.command:
        container["command"] = list(spec.command)
    env = _env_list(spec, extra_env)
    if env:
        container["env"] = env
    volume_mounts = container_volume_mounts(spec)
    if volume_mounts:
        container["volumeMounts"] = volume_mounts
    if spec.secret_files:
        container.setdefault("volumeMounts", []).extend(
            {"name": f.volume_name, "mountPath": f.path, "readOnly": True}
            for f in spec.secret_files
        )
    return container


def _pod_security_context(spec: JobManifestInput) -> dict[str, Any]:
    """Restricted: non-root as the project's uid/gid (OpenShift-style, so arbitrary images run
    without root); baseline: the image's user. The container part (no escalation, no
    capabilities, RuntimeDefault seccomp) is the same for both and meets restricted."""
    context: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if spec.run_as_uid is not None:
        context.update(
            runAsNonRoot=True,
            runAsUser=spec.run_as_uid,
            runAsGroup=spec.run_as_uid,
            fsGroup=spec.run_as_uid,
        )
    return context


def _pod_spec(spec: JobManifestInput, extra_env: list[dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": _pod_security_context(spec),
        "tolerations": [dict(GPU_TOLERATION)],
        # SIGTERM, then this long to write a checkpoint before the kill (preemption, cancel).
        "terminationGracePeriodSeconds": spec.termination_grace_seconds,
        "containers": [_container(spec, extra_env)],
    }
    volumes = pod_volumes(spec)
    if volumes:
        pod["volumes"] = volumes
    if spec.node_selector:
        # A chosen pool: Kueue only considers the flavor whose nodeLabels match.
        pod["nodeSelector"] = dict(sorted(spec.node_selector.items()))
    affinity = pool_affinity(spec.eligible_pool_labels, spec.other_pool_labels)
    if affinity:
        pod["affinity"] = affinity
    if spec.runtime_class:
        pod["runtimeClassName"] = spec.runtime_class
    if spec.secret_files:
        # 0440: readable by the pod's user and group (fsGroup under restricted), nobody else.
        pod.setdefault("volumes", []).extend(
            {"name": f.volume_name, "secret": {"secretName": f.secret_name, "defaultMode": 0o440}}
            for f in spec.secret_files
        )
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in spec.image_pull_secrets]
    return pod


def pool_affinity(
    eligible: tuple[dict[str, str], ...], others: tuple[dict[str, str], ...] = ()
) -> dict[str, Any] | None:
    """A required node affinity that matches the nodes of the eligible pools and no other pool.

    One nodeSelectorTerm per eligible pool (terms are ORed): `key In [value]` for each of the
    pool's node labels, the labels its ResourceFlavor selects nodes by. Kueue checks a flavor
    against only the expressions whose keys that flavor's nodeLabels use (a term left empty
    matches every flavor), so a pool selected by other keys than an eligible one would slip
    through; for such a pool the term also says `key NotIn [value]` on its labels, which the
    eligible pool's nodes (not carrying that pool's labels) satisfy and its flavor does not.
    None when there is nothing to restrict (no eligible pools, or one selecting every node).
    """
    if not eligible or any(not labels for labels in eligible):
        return None
    terms = []
    for labels in eligible:
        excluded: dict[str, set[str]] = {}
        for other in others:
            if not other or other == labels:
                continue
            if any(k in labels and labels[k] != v for k, v in other.items()):
                continue  # an In expression of this term already contradicts that pool
            for key, value in other.items():
                if key not in labels:
                    excluded.setdefault(key, set()).add(value)
        expressions = [
            {"key": key, "operator": "In", "values": [value]}
            for key, value in sorted(labels.items())
        ]
        expressions += [
            {"key": key, "operator": "NotIn", "values": sorted(values)}
            for key, values in sorted(excluded.items())
        ]
        term = {"matchExpressions": expressions}
        if term not in terms:
            terms.append(term)
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }


def _metadata(spec: JobManifestInput, **extra_labels: str) -> dict[str, Any]:
    return {
        "name": object_name(spec.job_id),
        "namespace": spec.namespace,
        "labels": {**job_labels(spec), **extra_labels},
    }


# Kueue evicts (preemption, reclaim) by suspending the Job; the Job controller then deletes the
# pods, and a deleted pod counts against backoffLimit. With backoffLimit 0 the first preemption
# would fail the job instead of requeueing it, so pods ended by a disruption or by the kill of a
# suspension (SIGTERM 143, or SIGKILL 137 after the grace period: a PID 1 without a handler ignores
# SIGTERM) are not counted. An out-of-memory kill is also 137 and a suspension gives the pod no
# DisruptionTarget condition, so no rule here can tell the two apart (a FailJob rule on 137 would
# fail preempted jobs); the cluster watcher fails an OOMKilled job at once from the kubelet's
# container reason instead (jobs.status.oom_killed; README, "Known limits").
POD_FAILURE_POLICY: dict[str, Any] = {
    "rules": [
        {
            "action": "Ignore",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
        },
        {
            "action": "Ignore",
            "onExitCodes": {
                "containerName": CONTAINER_NAME,
                "operator": "In",
                "values": [137, 143],
            },
        },
    ]
}


def _kueue_labels(spec: JobManifestInput) -> dict[str, str]:
    return {
        KUEUE_QUEUE_LABEL: local_queue_name(spec.project_slug),
        KUEUE_PRIORITY_LABEL: workload_priority_class_name(spec.priority),
    }


def kueue_batch_job(spec: JobManifestInput) -> dict[str, Any]:
    """A single-pod batch/v1 Job (kind single or mig) under Kueue."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(spec, **_kueue_labels(spec)),
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "podFailurePolicy": POD_FAILURE_POLICY,
            "parallelism": 1,
            "completions": 1,
            "activeDeadlineSeconds": spec.max_runtime_seconds,
            "template": {
                "metadata": {"labels": job_labels(spec)},
                "spec": {
                    **_pod_spec(spec, []),
                    "priorityClassName": priority_class_name(spec.priority),
                },
            },
        },
    }


def _torch_env(spec: JobManifestInput, master_addr: str) -> list[dict[str, Any]]:
    return [
        {"name": "MASTER_ADDR", "value": master_addr},
        {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
        {"name": "WORLD_SIZE", "value": str(spec.replicas)},
        {
            "name": "RANK",
            "valueFrom": {
                "fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}
            },
        },
        {"name": "NNODES", "value": str(spec.replicas)},
        {"name": "NPROC_PER_NODE", "value": str(spec.gpus)},
    ]


def kueue_gang_job(spec: JobManifestInput) -> dict[str, Any]:
    """An Indexed batch/v1 Job: Kueue admits all replicas at once (one podSet, count N)."""
    name = object_name(spec.job_id)
    pod = _pod_spec(spec, _torch_env(spec, f"{name}-0.{name}"))
    pod["subdomain"] = name  # hostname <job>-<index> is set by the Job controller
    pod["priorityClassName"] = priority_class_name(spec.priority)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(spec, **_kueue_labels(spec)),
        "spec": {
            "suspend": True,
            "completionMode": "Indexed",
            "parallelism": spec.replicas,
            "completions": spec.replicas,
            "backoffLimit": 0,
            "podFailurePolicy": POD_FAILURE_POLICY,
            "activeDeadlineSeconds": spec.max_runtime_seconds,
            "template": {"metadata": {"labels": job_labels(spec)}, "spec": pod},
        },
    }


def gang_service(spec: JobManifestInput) -> dict[str, Any]:
    """The headless Service that gives each gang pod a stable DNS name."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {L.JOB_ID_KEY: str(spec.job_id)},
            "ports": [{"name": "torch", "port": MASTER_PORT, "targetPort": MASTER_PORT}],
        },
    }


def _volcano_task(spec: JobManifestInput, name: str, replicas: int) -> dict[str, Any]:
    pod = _pod_spec(spec, [{"name": "NPROC_PER_NODE", "value": str(spec.gpus)}])
    pod["activeDeadlineSeconds"] = spec.max_runtime_seconds
    task: dict[str, Any] = {
        "name": name,
        "replicas": replicas,
        "minAvailable": replicas,
        "template": {"metadata": {"labels": job_labels(spec)}, "spec": pod},
    }
    return task


def volcano_queue_for(spec: JobManifestInput) -> str:
    """The project's leaf queue of the one pool a Volcano gang is pinned to.

    A job stored before pools were recorded has none: it names the old project-wide queue,
    which no longer exists, so Volcano refuses it with a message naming the queue.
    """
    if not spec.eligible_pools:
        return f"gp-{spec.project_slug}"
    return volcano_project_queue_name(spec.project_slug, spec.eligible_pools[0])


def volcano_gang_job(spec: JobManifestInput) -> dict[str, Any]:
    """A Volcano Job: gang of `replicas` pods (1 master + N-1 workers), pytorch plugin env."""
    tasks = [_volcano_task(spec, VOLCANO_MASTER_TASK, 1)]
    if spec.replicas > 1:
        tasks.append(_volcano_task(spec, VOLCANO_WORKER_TASK, spec.replicas - 1))
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": _metadata(spec),
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": spec.replicas,
            "queue": volcano_queue_for(spec),
            "priorityClassName": priority_class_name(spec.priority),
            "maxRetry": 3,  # an evicted gang restarts whole up to 3 times
            "policies": [
                {"event": "PodEvicted", "action": "RestartJob"},
                {"event": "PodFailed", "action": "TerminateJob"},
            ],
            "plugins": {
                "pytorch": [
                    f"--master={VOLCANO_MASTER_TASK}",
                    f"--worker={VOLCANO_WORKER_TASK}",
                    f"--port={MASTER_PORT}",
                ],
                "svc": [],
                "env": [],
            },
            "tasks": tasks,
        },
    }


def kai_queue_for(spec: JobManifestInput) -> str:
    """The project's leaf KAI queue of the one pool the job is pinned to (as for Volcano)."""
    pool = spec.eligible_pools[0] if spec.eligible_pools else "none"
    return kai_project_queue_name(spec.project_slug, pool)


def kai_annotations(spec: JobManifestInput) -> dict[str, str]:
    """The GPU-sharing annotations KAI reads on a fraction pod."""
    if spec.gpu_fraction:
        return {KAI_FRACTION_ANNOTATION: spec.gpu_fraction}
    if spec.gpu_memory:
        return {KAI_MEMORY_ANNOTATION: str(spec.gpu_memory)}
    return {}


def _kai_labels(spec: JobManifestInput) -> dict[str, str]:
    labels = {KAI_QUEUE_LABEL: kai_queue_for(spec)}
    if spec.preemptible is not None:
        labels[KAI_PREEMPTIBILITY_LABEL] = "preemptible" if spec.preemptible else "non-preemptible"
    if spec.kai_node_pool:
        labels[KAI_NODE_POOL_LABEL] = spec.kai_node_pool
    return labels


def kai_batch_job(spec: JobManifestInput) -> dict[str, Any]:
    """A batch/v1 Job for KAI Scheduler: one pod (single, MIG or a fraction) or an Indexed gang.

    Not suspended: KAI schedules the pods themselves. The deadline is the pods' own (from when
    they start), so time spent waiting in the queue does not count against the runtime."""
    name = object_name(spec.job_id)
    labels = _kai_labels(spec)
    gang = spec.kind == "gang"
    pod = _pod_spec(spec, _torch_env(spec, f"{name}-0.{name}") if gang else [])
    pod["schedulerName"] = KAI_SCHEDULER_NAME
    pod["priorityClassName"] = priority_class_name(spec.priority)
    pod["activeDeadlineSeconds"] = spec.max_runtime_seconds
    if gang:
        pod["subdomain"] = name
    template_meta: dict[str, Any] = {"labels": {**job_labels(spec), **labels}}
    annotations = kai_annotations(spec)
    if annotations:
        template_meta["annotations"] = annotations
    metadata = _metadata(spec, **labels)
    job_spec: dict[str, Any] = {
        "backoffLimit": 0,
        "podFailurePolicy": POD_FAILURE_POLICY,
        "parallelism": spec.replicas if gang else 1,
        "completions": spec.replicas if gang else 1,
        "template": {"metadata": template_meta, "spec": pod},
    }
    if gang:
        job_spec["completionMode"] = "Indexed"
        metadata["annotations"] = {KAI_BATCH_MIN_MEMBER: str(spec.replicas)}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}


def build_job_manifests(spec: JobManifestInput) -> list[dict[str, Any]]:
    """All objects of a job, in apply order (the Service before the pods that need it)."""
    if spec.backend == "kai":
        if spec.kind == "gang":
            return [gang_service(spec), kai_batch_job(spec)]
        return [kai_batch_job(spec)]
    if spec.kind == "gang":
        if spec.backend == "volcano":
            return [volcano_gang_job(spec)]
        return [gang_service(spec), kueue_gang_job(spec)]
    return [kueue_batch_job(spec)]


def primary_manifest(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    """The object whose status carries the job's state (the Job or the vcjob)."""
    return manifests[-1]
