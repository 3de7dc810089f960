"""Reading a job's container logs (the API view and the failure message use this).

Pods are found through the JobPod rows the watcher keeps (so a pod that no longer exists can be
named plainly) and read through portal.kube.watch.pod_log.
"""

import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from jobs.manifests import CONTAINER_NAME, job_selector
from jobs.models import Job, JobPod
from jobs.status import pod_record
from portal.kube import apply as kube
from portal.kube.apply import KubeError, PermanentKubeError
from portal.kube.watch import pod_log

log = logging.getLogger(__name__)


class LogsUnavailable(Exception):
    """A plain sentence for the reader: no such pod, pod gone, no previous container.
    `status` is the HTTP status the API answers with (404 no such pod, 409 no pod yet, 410 pod
    gone)."""

    def __init__(self, message: str, status: int = 404):
        super().__init__(message)
        self.status = status


def tail_text(namespace: str, pod: str, container: str = CONTAINER_NAME, lines: int = 20) -> str:
    """The last `lines` lines of a container's log, or "" when they cannot be read."""
    try:
        data = b"".join(pod_log(namespace, pod, container=container, tail_lines=lines))
    except KubeError:
        return ""
    return data.decode("utf-8", "replace").rstrip("\n")


def _cluster_pods(job: Job) -> list[JobPod]:
    """Unsaved JobPod rows read from the cluster, for when the watcher has not recorded any."""
    try:
        found = kube.list_objects(
            "v1", "Pod", namespace=job.project.namespace, label_selector=job_selector(job.pk)
        )
    except Exception:  # no cluster configured or reachable: there is nothing to show
        log.info("cannot list the pods of job %s", job.pk, exc_info=True)
        return []
    rows = []
    for pod in found:
        record = pod_record(pod)
        rows.append(
            JobPod(job=job, uid=record.uid, name=record.name, rank=record.rank, node=record.node)
        )
    return sorted(rows, key=lambda p: (p.rank is None, p.rank or 0, p.name))


def choose_pod(job: Job, *, pod: str = "", rank: int | None = None) -> JobPod:
    """The pod asked for: by name, by rank, else rank 0 / the only pod (newest attempt)."""
    pods = list(JobPod.objects.filter(job=job).order_by("-started_at", "-id"))
    if not pods:
        pods = _cluster_pods(job)
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
        raise LogsUnavailable(f"Job {job.pk} has not started a pod yet; there are no logs.", 409)
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
        raise LogsUnavailable(gone, 410)
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
            raise LogsUnavailable(gone, 410) from exc
        raise LogsUnavailable(f"The cluster cannot give these logs: {exc.message}", 400) from exc
    return chunks


_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class LogQuery:
    pod: str = ""
    rank: int | None = None
    tail: int | None = None
    since_seconds: int | None = None
    previous: bool = False
    follow: bool = False


def parse_log_query(params: Mapping[str, str]) -> tuple[LogQuery, dict[str, list[str]]]:
    """The query string as a LogQuery, or field errors that say what is wrong."""
    errors: dict[str, list[str]] = {}

    def number(name: str, maximum: int) -> int | None:
        raw = params.get(name)
        if raw in (None, ""):
            return None
        if not str(raw).isdigit() or int(raw) > maximum:
            errors[name] = [f"Must be a whole number from 0 to {maximum}; got {raw!r}."]
            return None
        return int(raw)

    def flag(name: str) -> bool:
        raw = str(params.get(name) or "").lower()
        if raw in ("", "0", "false", "no"):
            return False
        if raw in ("1", "true", "yes"):
            return True
        errors[name] = [f"Must be true or false; got {params.get(name)!r}."]
        return False

    since = None
    raw_since = params.get("since")
    if raw_since:
        match = _DURATION.match(str(raw_since).strip())
        if match is None:
            errors["since"] = [f"Must be a duration such as 90s, 10m, 2h or 1d; got {raw_since!r}."]
        else:
            since = int(match.group(1)) * _UNITS[match.group(2)]
    query = LogQuery(
        pod=str(params.get("pod") or ""),
        rank=number("rank", 10_000),
        tail=number("tail", 100_000),
        since_seconds=since,
        previous=flag("previous"),
        follow=flag("follow"),
    )
    if query.pod and query.rank is not None:
        errors["rank"] = ["Give either pod or rank, not both."]
    return query, errors


def safe_chunks(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Stream the chunks; a connection lost midway ends the text with a plain note instead of a
    broken response."""
    try:
        yield from chunks
    except KubeError as exc:
        yield f"\n[log stream interrupted: {exc.message}]\n".encode()
