"""Cluster text → sentences a researcher can act on. Pure functions, no database, no cluster.

Two jobs:
- `explain_pending`: why a job waits, from the Kueue Workload / Volcano PodGroup reason and
  message plus the project's quota use and the queue position ("Waiting for 2 × H100 GPUs in
  pool h100: project vision uses 6 of its 8 guaranteed GPUs and department research has none to
  lend. Position 3 of 5 in the queue.").
- `event_sentence`: one plain sentence for a Kubernetes Event worth showing in the timeline, or
  None for the noise (image pulled, container created ...).
"""

import re
from dataclasses import dataclass

GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"


@dataclass(frozen=True)
class Standing:
    """The project's quota position in the pool and resource the job asks for (None =
    unknown). `department_spare` is what the other projects of the department leave unused."""

    project: str
    department: str
    pool: str
    in_use: int | None = None
    guaranteed: int | None = None
    maximum: int | None = None
    department_spare: int | None = None


@dataclass(frozen=True)
class Request:
    """What the job asks for: `count` units of `unit` (e.g. 2 × "H100 GPUs")."""

    count: int
    unit: str  # "H100 GPUs", "MIG 1g.10gb slices"
    text: str = ""  # said instead of "count × unit" (a fraction: "0.5 of an H100 GPU")


def gpu_short_name(gpu_model: str) -> str:
    """'NVIDIA-H100-80GB-HBM3' → 'H100'; unknown shapes come back unchanged."""
    match = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", gpu_model.replace("-", " "))
    return match.group(1) if match else gpu_model


def request_for(
    *, gpus: int, replicas: int, mig_profile: str, gpu_model: str, share: float | None = None
) -> Request:
    if share is not None:
        name = gpu_short_name(gpu_model) if gpu_model else ""
        amount = format(round(share, 2), "g")
        article = "an" if name[:1] in ("A", "H") else "a"
        what = f"{article} {name} GPU" if name else "a GPU"
        return Request(1, f"{name} GPUs".strip(), text=f"{amount} of {what}")
    if mig_profile:
        return Request(replicas or 1, f"MIG {mig_profile} slices")
    name = gpu_short_name(gpu_model) if gpu_model else ""
    return Request(max(1, gpus * max(1, replicas)), f"{name} GPUs".strip())


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _resource_words(resource: str) -> str:
    if resource == GPU_RESOURCE:
        return "GPUs"
    if resource.startswith(MIG_PREFIX):
        return f"MIG {resource[len(MIG_PREFIX) :]} slices"
    if resource == "cpu":
        return "CPU cores"
    if resource == "memory":
        return "memory"
    return resource


def _flavor_pool(flavor: str) -> str:
    return flavor.removeprefix("gp-pool-")


def _standing_clause(request: Request, standing: Standing | None) -> str:
    if standing is None or standing.in_use is None or standing.guaranteed is None:
        return ""
    unit = "GPUs" if "GPU" in request.unit else request.unit.split(" ", 1)[-1]
    clause = (
        f"project {standing.project} uses {standing.in_use} of its {standing.guaranteed} "
        f"guaranteed {unit}"
    )
    if standing.department_spare is not None:
        if standing.department_spare <= 0:
            clause += f" and department {standing.department} has none to lend"
        else:
            clause += (
                f" and department {standing.department} has {standing.department_spare} "
                f"to lend, not yet enough"
            )
    return clause


def _position(position: int | None, length: int | None) -> str:
    if position is None:
        return ""
    if length:
        return f"Position {position} of {length} in the queue."
    return f"Position {position} in the queue."


def _waiting_head(request: Request, pool: str) -> str:
    where = f" in pool {pool}" if pool else ""
    what = request.text or f"{request.count} × {request.unit}"
    return f"Waiting for {what}{where}"


_UNUSED = re.compile(
    r"insufficient unused quota for (?P<res>\S+) in flavor (?P<flavor>[^,]+), (?P<more>\S+) more "
    r"needed"
)
_MAX = re.compile(
    r"insufficient quota for (?P<res>\S+) in flavor (?P<flavor>\S+),.*(?:maximum capacity|>)"
    r" \(?(?P<max>[^)\s]+)\)?"
)
_TAINT = re.compile(r"untolerated taint (?P<taint>\S+) in flavor (?P<flavor>\S+)")
_MISSING_FLAVOR = re.compile(r"flavor (?P<flavor>\S+) not found")
_AFFINITY = re.compile(r"flavor (?P<flavor>\S+) doesn't match node affinity")
_NODES = re.compile(r"(?P<free>\d+)/(?P<total>\d+) nodes are available")
_GANG = re.compile(r"(?P<missing>\d+)/(?P<tasks>\d+) tasks in gang unschedulable")
_VOLCANO_QUEUE = re.compile(r"queue resource quota insufficient: (?P<what>.*)")
_VOLCANO_OVERUSED = re.compile(r"resource in cluster is overused: (?P<what>.*)")
# KAI Scheduler (PodGroup schedulingConditions reasons[]; KAI v0.17 message templates)
_KAI_LIMIT = re.compile(
    r"(?P<queue>.+?) quota has reached the allowable limit of (?P<what>GPUs|CPU cores|GB memory)"
    r"\. Limit is (?P<limit>\S+) \S+(?: \S+)?, currently (?P<used>\S+)"
)
_KAI_NP_QUOTA = re.compile(r"but (?P<queue>.+?) quota is (?P<quota>\S+) GPUs")
_KAI_GANG = re.compile(
    r"Resources were found for (?P<found>\d+) pods while (?P<needed>\d+) are required"
)
_KAI_NO_NODE = re.compile(r"no nodes with enough resources were found: (?P<why>.*)")
_KAI_QUEUE_MISSING = re.compile(r"Queue '(?P<queue>[^']+)' does not exist")


def _kai_sentence(reason: str, text: str, request: Request, standing: Standing | None) -> str:
    """Why a KAI job waits, in the portal's words ("" when KAI's reason is not one of these)."""
    pool = standing.pool if standing else ""
    head = _waiting_head(request, pool)
    match = _KAI_LIMIT.search(text)
    if reason == "OverLimit" or match:
        if match and match.group("queue").startswith("department "):
            who = match.group("queue")
            return (
                f"{head}: {who} has reached the most its projects may use in this pool "
                f"(limit {match.group('limit')} {match.group('what')}); it starts when its "
                "other jobs finish."
            )
        limit = f" (limit {match.group('limit')} {match.group('what')})" if match else ""
        return (
            f"{head}: the project has reached the most it may use in this pool{limit}; it "
            "starts when the project's other jobs finish, or if the quota is raised."
        )
    if reason == "NonPreemptibleOverQuota":
        match = _KAI_NP_QUOTA.search(text)
        quota = f" ({match.group('quota')} GPUs)" if match else ""
        return (
            f"{head}: its priority is never preempted, so it may only use the project's "
            f"guaranteed quota{quota}, which its other such jobs hold. A preemptible priority "
            "(normal or low) may borrow idle GPUs."
        )
    if reason == "QueueDoesNotExist" or _KAI_QUEUE_MISSING.search(text):
        return (
            f"The project's queue is not set up in the cluster yet ({text}); an administrator "
            "needs to sync the quotas."
        )
    if match := _KAI_GANG.search(text):
        return (
            f"Waiting until all {match.group('needed')} pods can start together: only "
            f"{match.group('found')} fit on the free GPUs now."
        )
    if match := _KAI_NO_NODE.search(text):
        why = match.group("why")
        if "GPU memory" in why:
            return f"{head}: no GPU has that much memory free right now."
        if "GPUs" in why:
            return f"{head}: no node has enough free GPUs right now."
        return f"{head}: no node has room right now ({why.rstrip('.')})."
    if reason in ("Not enough resources for the workload", "Unable to schedule podgroup"):
        return f"{head}: the pool has no room for it right now."
    return ""


def explain_pending(
    *,
    reason: str,
    message: str,
    request: Request,
    standing: Standing | None = None,
    position: int | None = None,
    queue_length: int | None = None,
) -> str:
    """One or two sentences saying why the job waits and what it waits for."""
    pool = standing.pool if standing else ""
    pos = _position(position, queue_length)
    text = message or ""

    def done(sentence: str) -> str:
        return " ".join(part for part in (sentence, pos) if part)

    if reason == "WaitingForWorkload":
        return done("Submitted to the cluster; the queue has not picked it up yet.")
    if reason == "AwaitingAdmissionChecks":
        return done("Quota is reserved; waiting for the remaining admission checks.")
    if reason in ("GangAdmitted", "PodsStarting"):
        return done("Admitted; the pods are being placed and started.")
    if "doesn't exist" in text and ("LocalQueue" in text or "ClusterQueue" in text):
        return done(
            f"The project's queue is not set up in the cluster yet ({text}); an administrator "
            "needs to sync the quotas."
        )
    if "is inactive" in text or "is stopped" in text or reason == "Inactive":
        return done(f"The project's queue is switched off ({text}); ask an administrator.")
    if "namespace doesn't match" in text:
        return done(
            "The project's namespace is not allowed in its queue; an administrator needs to sync "
            "the quotas."
        )
    if match := _MAX.search(text):
        pool_name = _flavor_pool(match.group("flavor"))
        return done(
            f"The job asks for more {_resource_words(match.group('res'))} than project "
            f"{standing.project if standing else ''} may ever use in pool {pool_name} "
            f"(maximum {match.group('max')}); it can only run if the quota is raised or the job "
            "made smaller.".replace("project  ", "the project ")
        )
    if match := _UNUSED.search(text):
        resource = match.group("res")
        if resource != GPU_RESOURCE and not resource.startswith(MIG_PREFIX):
            # CPU or memory: the portal does not ration them, so no quota story to tell.
            return done(
                f"Waiting for {match.group('more')} more {_resource_words(resource)} in pool "
                f"{_flavor_pool(match.group('flavor'))}."
            )
        head = _waiting_head(request, pool or _flavor_pool(match.group("flavor")))
        clause = _standing_clause(request, standing)
        return done(head + (f": {clause}." if clause else "."))
    if match := _TAINT.search(text):
        return done(
            f"Pool {_flavor_pool(match.group('flavor'))} is reserved (taint "
            f"{match.group('taint')}); this job cannot use it."
        )
    if match := _AFFINITY.search(text):
        return done(
            f"Pool {_flavor_pool(match.group('flavor'))} does not match the pool this job asked "
            "for; it waits for a pool that does."
        )
    if match := _MISSING_FLAVOR.search(text):
        return done(
            f"The pool {_flavor_pool(match.group('flavor'))} is not set up in the cluster yet; "
            "an administrator needs to sync the quotas."
        )
    if reason in ("ExceedsMaxQuota",):
        return done(
            "The job asks for more than the project may ever use; raise the quota or make the "
            "job smaller."
        )
    if reason in ("NoMatchingFlavor",):
        return done("No pool the project has quota in can run this job.")
    if reason in ("WaitingForPreemptedWorkloads",):
        return done(
            _waiting_head(request, pool) + ": lower-priority jobs are being stopped to make room."
        )
    if reason in ("WaitingForQuota",):
        clause = _standing_clause(request, standing)
        return done(_waiting_head(request, pool) + (f": {clause}." if clause else "."))
    if kai := _kai_sentence(reason, text, request, standing):
        return done(kai)
    # Volcano
    if match := _VOLCANO_QUEUE.search(text):
        clause = _standing_clause(request, standing)
        return done(
            _waiting_head(request, pool)
            + (f": {clause}." if clause else ": the project's queue is full.")
        )
    if _VOLCANO_OVERUSED.search(text):
        return done(
            _waiting_head(request, pool)
            + ": the cluster's free GPUs are already promised to jobs ahead of this one."
        )
    if match := _GANG.search(text):
        missing, tasks = int(match.group("missing")), int(match.group("tasks"))
        nodes = _NODES.search(text)
        extra = ""
        if nodes:
            extra = f" ({nodes.group('free')} of {nodes.group('total')} nodes have room)"
        return done(
            f"Waiting until all {tasks} pods can start together: {missing} of them have no "
            f"node with enough free GPUs yet{extra}."
        )
    if match := _NODES.search(text):
        return done(
            f"Waiting for a node with enough free resources: {match.group('free')} of "
            f"{match.group('total')} nodes can take it right now."
        )
    if reason in ("Pending", "NotEnoughResources", "Unschedulable", "") and not text:
        return done(_waiting_head(request, pool) + ".")
    if text:
        return done(f"Waiting: {text}")
    return done(_waiting_head(request, pool) + ".")


# ---------------------------------------------------------------------------------------------
# Kubernetes Events → timeline sentences

_ASSIGNED = re.compile(r"Successfully assigned (?P<pod>\S+) to (?P<node>\S+)")
_PREEMPT_WHY = re.compile(r"due to (?P<why>[^;]+)")
_IMAGE = re.compile(r'image "(?P<image>[^"]+)"')

# Routine events that would drown the timeline.
_NOISE = frozenset(
    {
        "Pulling",
        "Pulled",
        "Created",
        "Started",
        "Killing",
        "SuccessfulCreate",
        "SuccessfulDelete",
        "Pending",  # Kueue's pending text: shown as the explanation instead
        "Unschedulable",  # Volcano's: likewise
        "PodGroupPending",
        "QuotaReserved",
        "Resumed",
        "Suspended",
        "Completed",
        "Stopped",
        "CreatedWorkload",
        "Scheduled-Volcano",
    }
)


def event_sentence(reason: str, message: str, *, kind: str = "", name: str = "") -> str | None:
    """A plain sentence for a Kubernetes Event, or None when it is not worth a timeline line."""
    text = (message or "").strip()
    if reason in _NOISE:
        return None
    if reason == "Scheduled":
        match = _ASSIGNED.search(text)
        if match:
            pod = match.group("pod").split("/")[-1]
            return f"Pod {pod} was placed on node {match.group('node')}."
        return f"Pod {name} was placed on a node."
    if reason == "FailedScheduling":
        return f"No node can take pod {name} yet: {text}"
    if reason in ("ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"):
        return f"The container image could not be pulled: {text}"
    if reason == "Failed" and ("image" in text.lower() or "pull" in text.lower()):
        image = _IMAGE.search(text)
        what = f" {image.group('image')}" if image else ""
        return f"The container image{what} could not be pulled: {text}"
    if reason == "BackOff":
        if "image" in text.lower():
            return f"Kubernetes keeps failing to pull the image and is backing off: {text}"
        return "The container keeps failing; Kubernetes waits before restarting it."
    if reason == "Preempted":
        why = _PREEMPT_WHY.search(text)
        cause = why.group("why").strip() if why else "a higher-priority job"
        if "reclamation" in cause:
            cause = "another project reclaiming the GPUs it had lent"
        elif "prioritization" in cause:
            cause = "a higher-priority job of the same project"
        return f"The job was preempted to make room for {cause}; it goes back to the queue."
    if reason == "Evict":
        return "The job was preempted by the gang scheduler; it restarts when there is room."
    if reason in ("Evicted", "EvictedDueToPodsReadyTimeout", "PodsReadyTimeout"):
        return f"The job was evicted: {text}" if text else "The job was evicted."
    if reason in ("OOMKilled", "OOMKilling"):
        return "The container ran out of memory and was killed."
    if reason == "DeadlineExceeded":
        return "The job reached its maximum runtime and was stopped."
    if reason == "BackoffLimitExceeded":
        return "The job failed: its pod failed and no retries are left."
    if reason == "PodFailurePolicy":
        return f"The job failed: {text}"
    if reason == "Admitted":
        return "The queue admitted the job; its pods are being created."
    if reason == "NodeNotReady" or reason == "TaintManagerEviction":
        return f"The node running pod {name} became unavailable: {text}"
    if reason == "UnexpectedAdmissionError":
        return f"The node refused pod {name}: {text}"
    return None


def event_is_warning_worthy(event_type: str, reason: str) -> bool:
    """Warning events without a dedicated sentence still get a generic line."""
    return event_type == "Warning" and reason not in _NOISE


def generic_sentence(reason: str, message: str) -> str:
    return f"{reason}: {message}".strip().rstrip(":") + ("" if message.endswith(".") else ".")
