"""Reading a job's container logs (the API view and the failure message use this).

Pods are found through the JobPod rows the watcher keeps (so a pod that no longer exists can be
named plainly) and read through portal.kube.watch.pod_log.
"""

from collections.abc import Iterator

from jobs.manifests import CONTAINER_NAME
from jobs.models import Job, JobPod
from portal.kube.apply import KubeError, PermanentKubeError
from portal.kube.watch import pod_log


class LogsUnavailable(Exception):
    """A plain sentence for the reader: no such pod, pod gone, no previous container."""


def tail_text(namespace: str, pod: str, container: str = CONTAINER_NAME, lines: int = 20) -> str:
    """The last `lines` lines of a container's log, or "" when they cannot be read."""
    try:
        data = b"".join(pod_log(namespace, pod, container=container, tail_lines=lines))
    except KubeError:
        return ""
    return data.decode("utf-8", "replace").rstrip("\n")


def choose_pod(job: Job, *, pod: str = "", rank: int | None = None) -> JobPod:
    """The pod asked for: by name, by rank, else rank 0 / the only pod (newest attempt)."""
    pods = list(JobPod.objects.filter(job=job).order_by("-started_at", "-id"))
    if pod:
        found = next((p for p in pods if p.name == pod), None)
        if found is None:
            raise LogsUnavailable(f"Job {job.pk} has no pod named {pod!r}.")
        return found
    if rank is not None:
        found = next((p for p in pods if p.rank == rank), None)
        if found is None:
            raise LogsUnavailable(f"Job {job.pk} has no pod of rank {rank}.")
        return found
    if not pods:
        raise LogsUnavailable(f"Job {job.pk} has not started a pod yet; there are no logs.")
    live = [p for p in pods if not p.deleted]
    ranked = [p for p in (live or pods) if p.rank in (0, None)]
    return (ranked or live or pods)[0]


def stream(
    job: Job,
    record: JobPod,
    *,
    tail: int | None = None,
    since_seconds: int | None = None,
    previous: bool = False,
    follow: bool = False,
) -> Iterator[bytes]:
    """The log bytes; LogsUnavailable (with a sentence) when the cluster cannot give them."""
    gone = f"Pod {record.name} no longer exists, so its logs are gone" + (
        f" (it ran on {record.node})." if record.node else "."
    )
    if record.deleted:
        raise LogsUnavailable(gone)
    try:
        chunks = pod_log(
            job.project.namespace,
            record.name,
            container=CONTAINER_NAME,
            tail_lines=tail,
            since_seconds=since_seconds,
            previous=previous,
            follow=follow,
        )
    except PermanentKubeError as exc:
        if exc.status == 404:
            raise LogsUnavailable(gone) from exc
        raise LogsUnavailable(f"The cluster cannot give these logs: {exc.message}") from exc
    return chunks
