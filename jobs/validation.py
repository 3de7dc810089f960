"""Job request validation: pure, before anything reaches the database or the cluster.

Every rule answers with the field and a specific reason. Quota feasibility is checked only for
requests that can *never* be admitted (more than the project's maximum usable amount in every
eligible pool); whether there is room right now is Kueue's, Volcano's and KAI's decision, not ours.

Issue 25: a pool's scheduler (kueue, volcano or kai) decides where a job goes; a job on a KAI
pool that allows it may ask for a fraction of one GPU (gpu_fraction, or gpu_memory in MiB),
refused with the reason wherever KAI's admission would refuse it.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from jobs import mounts as job_mounts
from jobs import secret_refs
from quotas import arithmetic, mig

FULL_GPU = "gpu"
KINDS = ("single", "mig", "gang")
BACKENDS = ("kueue", "volcano", "kai")
KAI = "kai"
PRIORITIES = ("high", "normal", "low")

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX = 40
MAX_GPUS_PER_POD = 8
GANG_MIN, GANG_MAX = 2, 64
MAX_RUNTIME_MINUTES = 7 * 24 * 60
DEFAULT_RUNTIME_MINUTES = 24 * 60
COMMAND_MAX_ITEMS = 256
COMMAND_MAX_BYTES = 32 * 1024
ENV_MAX_VARS = 128
ENV_MAX_BYTES = 32 * 1024
IMAGE_MAX = 512

# Docker image reference: [registry[:port]/]path[:tag][@sha256:digest], path components lower
# case (the distribution/reference grammar).
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
# A first component is a registry only if it looks like a host: has a dot or a port, or is
# localhost (otherwise "team/image" is a Docker Hub path).
_REGISTRY = rf"(?:localhost(?::[0-9]+)?|{_LABEL}(?:\.{_LABEL})+(?::[0-9]+)?|{_LABEL}:[0-9]+)"
IMAGE_RE = re.compile(
    rf"^(?:{_REGISTRY}/)?"
    rf"{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@sha256:[a-f0-9]{64})?$"
)
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Names that would bypass the device plugin's isolation (the container would see other GPUs).
FORBIDDEN_ENV_EXACT = frozenset({"CUDA_VISIBLE_DEVICES"})
FORBIDDEN_ENV_PREFIX = "NVIDIA_"
# Set by the portal for gang jobs; a user value would break the rendezvous.
GANG_RESERVED_ENV = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NNODES", "NPROC_PER_NODE"}
)
MIN_CPU = Decimal("0.001")
MIN_MEMORY = 16 * 2**20
MIN_MEMORY_TEXT = "16Mi"
QUANTITY_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


@dataclass(frozen=True)
class PoolFacts:
    """A pool as the project sees it: hardware and the project's maximum per resource."""

    slug: str
    gpu_model: str
    gpus_per_node: int
    node_count: int
    mig_profiles: tuple[str, ...]
    default_cpu: str
    default_memory: str
    maximum: dict[str, int] = field(default_factory=dict)  # resource ("gpu"/profile) → maximum
    guaranteed: dict[str, int] = field(default_factory=dict)  # resource → nominal (guaranteed)
    max_shm_size: str = "64Gi"
    max_termination_grace_seconds: int = 600
    scheduler: str = "kueue"  # kueue | volcano | kai
    fractions_allowed: bool = False  # KAI pools only
    fraction_step: Decimal = Decimal("0.25")
    gpu_memory_mib: int | None = None  # one GPU's memory (the most a gpu_memory request asks)


@dataclass(frozen=True)
class JobRequest:
    project_slug: str
    kind: str
    image: str
    name: str = ""
    command: object = ()
    env: object = None
    gpus: int | None = None
    mig_profile: str = ""
    replicas: int | None = None
    pool: str = ""
    cpu: str = ""
    memory: str = ""
    priority: str = "normal"
    max_runtime_minutes: int | None = None
    backend: str = ""
    # Issue 12: data volumes, /dev/shm and the grace period before the kill (jobs.mounts).
    mounts: object = None
    shm_size: str = ""
    termination_grace_seconds: int | None = None
    # [{"secret": credential, "path": "/mount/path"}, ...] (jobs.secret_refs checks them)
    secret_files: object = ()
    # Issue 25: a fraction of one GPU (0 < f < 1) or GPU memory in MiB, KAI pools only; and the
    # project's gang backend, used when neither the request nor the pool decides.
    gpu_fraction: object = None
    gpu_memory: object = None
    default_gang_backend: str = ""


@dataclass
class Resolved:
    """The request with defaults filled in; only meaningful when there are no errors."""

    gpus: int = 0
    replicas: int = 1
    cpu: str = ""
    memory: str = ""
    backend: str = "kueue"
    max_runtime_minutes: int = DEFAULT_RUNTIME_MINUTES
    mig_resource: str = ""
    eligible_pools: list[str] = field(default_factory=list)
    mounts: list[job_mounts.ResolvedMount] = field(default_factory=list)
    shm_size: str = ""
    termination_grace_seconds: int = job_mounts.DEFAULT_GRACE_SECONDS
    gpu_fraction: Decimal | None = None
    gpu_memory: int | None = None

    @property
    def fractional(self) -> bool:
        return self.gpu_fraction is not None or self.gpu_memory is not None


@dataclass
class ValidationResult:
    errors: dict[str, list[str]] = field(default_factory=dict)
    resolved: Resolved = field(default_factory=Resolved)

    @property
    def ok(self) -> bool:
        return not self.errors

    def add(self, name: str, message: str) -> None:
        self.errors.setdefault(name, []).append(message)


def parse_quantity(text: str) -> Decimal | None:
    match = QUANTITY_RE.match(text.strip()) if isinstance(text, str) else None
    if not match:
        return None
    try:
        number = Decimal(match.group(1))
    except InvalidOperation:
        return None
    scale = {
        None: 1,
        "m": Decimal("0.001"),
        "k": 10**3,
        "M": 10**6,
        "G": 10**9,
        "T": 10**12,
        "P": 10**15,
        "E": 10**18,
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
        "Pi": 2**50,
        "Ei": 2**60,
    }[match.group(2)]
    return number * scale


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _validate_image(req: JobRequest, result: ValidationResult) -> None:
    image = req.image or ""
    if not image:
        result.add("image", "An image is required, e.g. nvcr.io/nvidia/pytorch:24.08-py3.")
    elif len(image) > IMAGE_MAX:
        result.add("image", f"The image reference is {len(image)} characters; at most {IMAGE_MAX}.")
    elif not IMAGE_RE.match(image):
        result.add(
            "image",
            f"{image!r} is not a valid image reference "
            "(expected [registry[:port]/]name[:tag][@sha256:digest], name in lower case).",
        )


def _validate_command(req: JobRequest, result: ValidationResult) -> None:
    command = req.command
    if command is None:
        return
    if not isinstance(command, list | tuple) or not all(isinstance(c, str) for c in command):
        result.add("command", "The command must be a list of strings.")
        return
    if len(command) > COMMAND_MAX_ITEMS:
        result.add("command", f"The command has {len(command)} items; at most {COMMAND_MAX_ITEMS}.")
    size = sum(len(c.encode()) for c in command)
    if size > COMMAND_MAX_BYTES:
        result.add("command", f"The command is {size} bytes; at most {COMMAND_MAX_BYTES}.")


def _validate_env(req: JobRequest, result: ValidationResult) -> None:
    env = req.env
    if env is None:
        return
    if not isinstance(env, dict):
        result.add(
            "env",
            'env must be an object of NAME: value strings or {"secret": ..., "key": ...} '
            "references.",
        )
        return
    if len(env) > ENV_MAX_VARS:
        result.add("env", f"{len(env)} environment variables; at most {ENV_MAX_VARS}.")
    size = 0
    for name, value in env.items():
        if isinstance(value, dict):
            value = ""  # a secret reference: jobs.secret_refs checks it, its name is checked here
        elif not isinstance(value, str):
            result.add("env", f"The value of {name} must be a string.")
            continue
        size += len(str(name).encode()) + len(value.encode())
        if not ENV_NAME_RE.match(str(name)):
            result.add(
                "env",
                f"{name!r} is not a valid variable name (letters, digits and '_', "
                "not starting with a digit).",
            )
        elif name in FORBIDDEN_ENV_EXACT or name.startswith(FORBIDDEN_ENV_PREFIX):
            result.add(
                "env",
                f"{name} cannot be set: the GPU device plugin assigns devices and their "
                "visibility (no CUDA_VISIBLE_DEVICES or NVIDIA_* variables).",
            )
        elif req.kind == "gang" and name in GANG_RESERVED_ENV:
            result.add(
                "env", f"{name} is set by the portal for gang jobs and cannot be overridden."
            )
    if size > ENV_MAX_BYTES:
        result.add("env", f"The environment is {size} bytes; at most {ENV_MAX_BYTES}.")


def _validate_secret_refs(
    req: JobRequest,
    credentials: Mapping[str, secret_refs.CredentialFacts],
    result: ValidationResult,
) -> None:
    errors = secret_refs.check_secret_files(req.secret_files, credentials, req.project_slug)
    if isinstance(req.env, dict):
        errors.update(secret_refs.check_env_refs(req.env, credentials, req.project_slug))
    for name, messages in errors.items():
        for message in messages:
            result.add(name, message)


def _validate_scalars(req: JobRequest, result: ValidationResult) -> None:
    r = result.resolved
    if req.name and (len(req.name) > NAME_MAX or not NAME_RE.match(req.name)):
        result.add(
            "name",
            f"{req.name!r} is not a valid name: lower-case letters, digits and '-', starting and "
            f"ending with a letter or digit, at most {NAME_MAX} characters.",
        )
    if req.priority not in PRIORITIES:
        result.add("priority", f"Unknown priority {req.priority!r}; choose high, normal or low.")
    minutes = req.max_runtime_minutes
    if minutes is None:
        r.max_runtime_minutes = DEFAULT_RUNTIME_MINUTES
    elif not isinstance(minutes, int) or not 1 <= minutes <= MAX_RUNTIME_MINUTES:
        result.add(
            "max_runtime_minutes",
            f"The maximum runtime must be 1 to {MAX_RUNTIME_MINUTES} minutes (7 days).",
        )
    else:
        r.max_runtime_minutes = minutes
    for name, value in (("cpu", req.cpu), ("memory", req.memory)):
        if not value:
            continue
        amount = parse_quantity(value)
        if amount is None or amount <= 0:
            example = "4 or 500m" if name == "cpu" else "64Gi"
            result.add(name, f"{value!r} is not a valid {name} quantity (e.g. {example}).")
        elif name == "cpu" and (amount < MIN_CPU or not _whole(amount / MIN_CPU)):
            result.add(
                "cpu",
                f"{value!r} is finer than 1m (0.001 CPU), the smallest CPU unit Kubernetes "
                "schedules; use e.g. 500m or 2.",
            )
        elif name == "memory" and not _whole(amount):
            result.add("memory", f"{value!r} is not a whole number of bytes; use e.g. 512Mi.")
        elif name == "memory" and amount < MIN_MEMORY:
            result.add(
                "memory",
                f"{value!r} is below {MIN_MEMORY_TEXT}, the least a container can start with.",
            )


def _parse_fraction(value: object) -> Decimal | None:
    """A number (or its text) as a Decimal; None when it is not one (booleans are not)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        return None
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _validate_fraction(req: JobRequest, result: ValidationResult) -> None:
    """gpu_fraction / gpu_memory on their own: KAI's admission rules (gpu-request validator)."""
    r = result.resolved
    if req.gpu_fraction is None and req.gpu_memory is None:
        return
    field_name = "gpu_fraction" if req.gpu_fraction is not None else "gpu_memory"
    if req.kind != "single":
        result.add(
            field_name, "Only single-pod jobs can take a fraction of a GPU; use kind 'single'."
        )
        return
    if req.gpu_fraction is not None and req.gpu_memory is not None:
        result.add("gpu_memory", "Ask for either gpu_fraction or gpu_memory, not both.")
        return
    if req.gpus not in (None, 0):
        result.add(
            field_name,
            "A fraction of a GPU cannot be combined with whole GPUs: leave gpus out (or 0), "
            "or ask for whole GPUs without a fraction.",
        )
        return
    if req.backend not in ("", KAI):
        result.add("backend", "GPU fractions run on KAI Scheduler only: leave backend out.")
        return
    if req.gpu_fraction is not None:
        fraction = _parse_fraction(req.gpu_fraction)
        if fraction is None or not 0 < fraction < 1:
            result.add(
                "gpu_fraction",
                f"{req.gpu_fraction!r} is not a fraction of a GPU: it must be a number greater "
                "than 0 and less than 1, e.g. 0.25 or 0.5.",
            )
            return
        r.gpu_fraction = fraction
    else:
        memory = req.gpu_memory
        if isinstance(memory, bool) or not isinstance(memory, int) or memory <= 0:
            result.add(
                "gpu_memory",
                f"{memory!r} is not a GPU memory request: a whole number of MiB above 0, "
                "e.g. 20000.",
            )
            return
        r.gpu_memory = memory


def _validate_shape(req: JobRequest, result: ValidationResult) -> None:
    """GPUs, MIG profile, replicas and backend against the job kind."""
    r = result.resolved
    _validate_fraction(req, result)
    if req.kind == "mig":
        if req.gpus not in (None, 0, 1):
            result.add("gpus", "A MIG job gets exactly one MIG slice; do not ask for whole GPUs.")
        if not req.mig_profile:
            result.add("mig_profile", "A MIG job needs a MIG profile, e.g. 1g.10gb.")
        r.gpus = 0
    elif r.fractional:
        if req.mig_profile:
            result.add("mig_profile", "Only MIG jobs take a MIG profile; use kind 'mig'.")
        r.gpus = 0
    else:
        if req.mig_profile:
            result.add("mig_profile", "Only MIG jobs take a MIG profile; use kind 'mig'.")
        gpus = 1 if req.gpus is None else req.gpus
        if not isinstance(gpus, int) or not 1 <= gpus <= MAX_GPUS_PER_POD:
            result.add("gpus", f"GPUs per pod must be 1 to {MAX_GPUS_PER_POD} whole GPUs.")
        r.gpus = gpus if isinstance(gpus, int) else 0
    if req.kind == "gang":
        replicas = req.replicas
        if not isinstance(replicas, int) or not GANG_MIN <= replicas <= GANG_MAX:
            result.add(
                "replicas", f"A gang job has {GANG_MIN} to {GANG_MAX} pods that start together."
            )
        else:
            r.replicas = replicas
        if req.backend and req.backend not in BACKENDS:
            result.add("backend", f"Unknown backend {req.backend!r}; choose kueue, volcano or kai.")
    else:
        if req.replicas not in (None, 1):
            result.add("replicas", "Only gang jobs have several pods; use kind 'gang'.")
        if req.backend not in ("", "kueue", KAI):
            result.add(
                "backend",
                "Single and MIG jobs run on Kueue or KAI; the Volcano backend applies to gang "
                "jobs.",
            )
        r.replicas = 1
    r.backend = req.backend or ""


def _allowed_fractions(step: Decimal) -> str:
    values = [step * k for k in range(1, int(1 / step)) if step * k < 1]
    return ", ".join(format(v.normalize(), "f") for v in values)


def _choose_backend(
    req: JobRequest, candidates: list[PoolFacts], result: ValidationResult
) -> list[PoolFacts]:
    """Which scheduler runs the job, and the candidate pools that use it. KAI pools take only
    KAI jobs and KAI jobs only KAI pools; a request that names no backend follows its pools."""
    r = result.resolved
    kai = [p for p in candidates if p.scheduler == KAI]
    other = [p for p in candidates if p.scheduler != KAI]
    where = f"pool {req.pool}" if req.pool else f"the pools of project {req.project_slug}"
    if r.fractional:
        field_name = "gpu_fraction" if r.gpu_fraction is not None else "gpu_memory"
        offering = [p for p in kai if p.fractions_allowed]
        if not offering:
            schedulers = ", ".join(f"{p.slug} ({p.scheduler})" for p in candidates)
            result.add(
                field_name,
                "A fraction of a GPU is offered only in KAI Scheduler pools that allow "
                f"fractions; {where} do not ({schedulers}). Ask for whole GPUs instead.",
            )
            return []
        if r.gpu_fraction is not None:
            fitting = [p for p in offering if not (r.gpu_fraction / p.fraction_step) % 1]
            if not fitting:
                for pool in offering:
                    result.add(
                        "gpu_fraction",
                        f"{format(r.gpu_fraction.normalize(), 'f')} is not a multiple of pool "
                        f"{pool.slug}'s step of {format(pool.fraction_step.normalize(), 'f')}; "
                        f"allowed values: {_allowed_fractions(pool.fraction_step)}.",
                    )
                return []
        else:
            fitting = [p for p in offering if p.gpu_memory_mib and r.gpu_memory <= p.gpu_memory_mib]
            if not fitting:
                for pool in offering:
                    result.add(
                        "gpu_memory",
                        f"{r.gpu_memory} MiB is more than one GPU of pool {pool.slug} has: "
                        f"allowed values are 1 to {pool.gpu_memory_mib or 0} MiB.",
                    )
                return []
        r.backend = KAI
        return fitting
    if r.backend == KAI:
        if not kai:
            result.add(
                "backend",
                f"The KAI backend needs a KAI Scheduler pool; {where} run "
                f"{', '.join(sorted({p.scheduler for p in candidates}))}.",
            )
        return kai
    if r.backend:
        if not other:
            result.add(
                "backend",
                f"{where.capitalize()} run KAI Scheduler, not {r.backend}: leave backend out "
                "or choose kai.",
            )
        return other
    if other:
        if req.kind == "gang":
            volcano_pools = all(p.scheduler == "volcano" for p in other)
            r.backend = "volcano" if volcano_pools else (req.default_gang_backend or "kueue")
        else:
            r.backend = "kueue"
        return other
    r.backend = KAI
    return kai


def _pools_listing(pools: list[PoolFacts]) -> str:
    return ", ".join(p.slug for p in pools) or "none"


def _resolve_pools(
    req: JobRequest, pools: list[PoolFacts], result: ValidationResult
) -> list[PoolFacts]:
    """The pools this job could run in: chosen one (or all of the project's) that fit its shape."""
    r = result.resolved
    if not pools:
        result.add("project", f"Project {req.project_slug} has no GPU quota in any pool.")
        return []
    candidates = pools
    if req.pool:
        candidates = [p for p in pools if p.slug == req.pool]
        if not candidates:
            result.add(
                "pool",
                f"Project {req.project_slug} has no quota in pool {req.pool!r}; "
                f"its pools: {_pools_listing(pools)}.",
            )
            return []
    candidates = _choose_backend(req, candidates, result)
    if not candidates:
        return []
    if req.kind == "mig" and req.mig_profile:
        offered = []
        reasons = []
        for pool in candidates:
            try:
                mig.validate_profile(pool.gpu_model, req.mig_profile)
            except ValueError as exc:
                reasons.append(f"pool {pool.slug}: {exc}")
                continue
            if req.mig_profile not in pool.mig_profiles:
                offers = ", ".join(pool.mig_profiles) or "none"
                reasons.append(
                    f"pool {pool.slug} does not offer {req.mig_profile} (it offers: {offers})."
                )
                continue
            offered.append(pool)
        if not offered:
            for reason in reasons:
                result.add("mig_profile", reason)
            return []
        r.mig_resource = mig.resource_name(req.mig_profile)
        candidates = offered
    elif req.kind in ("single", "gang") and r.gpus:
        fitting = [p for p in candidates if p.gpus_per_node >= r.gpus]
        if not fitting:
            largest = max(p.gpus_per_node for p in candidates)
            where = f"pool {req.pool}" if req.pool else "any pool of the project"
            result.add(
                "gpus",
                f"{_plural(r.gpus, 'GPU')} per pod will not fit: the largest node in {where} "
                f"has {largest} GPUs.",
            )
            return []
        candidates = fitting
    return candidates


def _check_admissible(
    req: JobRequest, candidates: list[PoolFacts], result: ValidationResult
) -> list[PoolFacts]:
    r = result.resolved
    resource = req.mig_profile if req.kind == "mig" else FULL_GPU
    per_pod: int | Decimal = 1 if req.kind == "mig" else r.gpus
    if r.gpu_fraction is not None:
        per_pod = r.gpu_fraction
    elif r.gpu_memory is not None:
        per_pod = Decimal("0.01")  # some of one GPU: any GPU quota at all can hold it
    needed = per_pod * r.replicas
    unit = f"{req.mig_profile} MIG slice" if req.kind == "mig" else "GPU"
    admissible = []
    limits = []
    for pool in candidates:
        maximum = pool.maximum.get(resource, 0)
        capacity = pool.gpus_per_node * pool.node_count if resource == FULL_GPU else None
        if needed <= maximum and (capacity is None or needed <= capacity):
            admissible.append(pool)
        else:
            limits.append(f"{maximum} in pool {pool.slug}")
    if not admissible:
        shape = f" ({r.replicas} pods × {_plural(per_pod, unit)})" if r.replicas > 1 else ""
        result.add(
            "mig_profile" if req.kind == "mig" else "gpus",
            f"This job needs {_plural(needed, unit)}{shape} at once, but project "
            f"{req.project_slug} may never use more than {'; '.join(limits)}, "
            "so it could never be admitted.",
        )
    return admissible


def _whole(number: Decimal) -> bool:
    # Not `number % 1`: modulo raises DivisionImpossible on numbers past 28 digits.
    return number == number.to_integral_value()


def format_quantity(amount: Decimal, name: str) -> str:
    """Cores as '64' or '0.5'; bytes in the largest binary unit that keeps them whole."""
    if name == "cpu":
        return format(amount.normalize(), "f")
    for unit, size in (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20)):
        if amount >= size and _whole(amount / size):
            return f"{(amount / size).to_integral_value()}{unit}"
    return f"{format(amount.normalize(), 'f')} bytes"


def _check_cpu_memory(
    req: JobRequest, candidates: list[PoolFacts], result: ValidationResult
) -> list[PoolFacts]:
    """The pools whose ClusterQueue CPU and memory could ever admit the requested amounts."""
    pods = result.resolved.replicas
    fitting = list(candidates)
    for name, value, attr in (
        ("cpu", req.cpu, "default_cpu"),
        ("memory", req.memory, "default_memory"),
    ):
        per_pod = parse_quantity(value) if value else None
        if per_pod is None:
            continue  # the pool's default, which always fits
        limits = []
        still = []
        for pool in fitting:
            share = arithmetic.cpu_memory_share(
                per_gpu=parse_quantity(getattr(pool, attr)) or Decimal(0),
                gpus_per_node=pool.gpus_per_node,
                node_count=pool.node_count,
            )
            shortfall = arithmetic.cpu_memory_shortfall(per_pod=per_pod, pods=pods, share=share)
            if shortfall is None:
                still.append(pool)
                continue
            needed, available = shortfall
            scope = "per pod (one node's share)" if needed == per_pod else "for the whole job"
            limits.append(f"{format_quantity(available, name)} {scope} in pool {pool.slug}")
        if not still:
            unit = " CPU" if name == "cpu" else ""
            total = format_quantity(per_pod * pods, name)
            shape = f" ({pods} pods × {value})" if pods > 1 else ""
            result.add(
                name,
                f"This job needs {total}{unit}{shape}, but project {req.project_slug} has "
                f"available at most {'; '.join(limits)}, so it could never be admitted.",
            )
            return []
        fitting = still
    return fitting


def choose_gang_pool(pools: list[PoolFacts], resource: str = FULL_GPU) -> PoolFacts:
    """The one pool a Volcano gang is pinned to when the user named none.

    Volcano queues count resources by name, not by pool, so the portal keeps one queue per pool
    (quotas.manifests) and a gang must run in exactly one: the eligible pool where the project
    is guaranteed the most GPUs (where it is least likely to wait), then the one with the highest
    maximum, then the first slug, so the same request always lands in the same pool.
    """
    return min(
        pools,
        key=lambda p: (-p.guaranteed.get(resource, 0), -p.maximum.get(resource, 0), p.slug),
    )


def _min_default(pools: list[PoolFacts], attr: str) -> str:
    values = [getattr(p, attr) for p in pools]
    return min(values, key=lambda v: parse_quantity(v) or Decimal(0))


def _validate_mounts(
    req: JobRequest, volumes: dict[str, job_mounts.VolumeFacts], result: ValidationResult
) -> None:
    resolved, errors = job_mounts.resolve_mounts(req.mounts, volumes, project_slug=req.project_slug)
    for name, messages in errors.items():
        for message in messages:
            result.add(name, message)
    result.resolved.mounts = resolved


def _check_shm_and_grace(
    req: JobRequest, pools: list[PoolFacts], result: ValidationResult
) -> list[PoolFacts]:
    """The pools whose caps allow the requested /dev/shm size and grace period."""
    fitting = list(pools)
    if req.shm_size:
        wanted = parse_quantity(req.shm_size)
        if wanted is None or wanted <= 0 or not _whole(wanted):
            result.add("shm_size", f"{req.shm_size!r} is not a valid size (e.g. 8Gi or 512Mi).")
            return []
        if wanted < MIN_MEMORY:
            result.add("shm_size", f"{req.shm_size!r} is below {MIN_MEMORY_TEXT}.")
            return []
        caps = {p.slug: parse_quantity(p.max_shm_size) or Decimal(0) for p in fitting}
        still = [p for p in fitting if wanted <= caps[p.slug]]
        if not still:
            largest = max(fitting, key=lambda p: caps[p.slug])
            result.add(
                "shm_size",
                f"A /dev/shm of {req.shm_size} is more than the pool allows: at most "
                f"{largest.max_shm_size} (pool {largest.slug}).",
            )
            return []
        fitting = still
    grace = req.termination_grace_seconds
    if grace is not None:
        if not isinstance(grace, int) or isinstance(grace, bool) or grace < 0:
            result.add(
                "termination_grace_seconds", "The grace period is a whole number of seconds."
            )
            return []
        still = [p for p in fitting if grace <= p.max_termination_grace_seconds]
        if not still:
            largest = max(fitting, key=lambda p: p.max_termination_grace_seconds)
            result.add(
                "termination_grace_seconds",
                f"A grace period of {grace} s is more than the pool allows: at most "
                f"{largest.max_termination_grace_seconds} s (pool {largest.slug}).",
            )
            return []
        fitting = still
    return fitting


def _resolve_shm_and_grace(
    req: JobRequest, pools: list[PoolFacts], result: ValidationResult
) -> None:
    """The /dev/shm size (asked for, or half the memory request capped by the pools) and the
    grace period (asked for, or the default capped by the pools)."""
    r = result.resolved
    memory = parse_quantity(r.memory) or Decimal(0)
    if req.shm_size:
        wanted = parse_quantity(req.shm_size) or Decimal(0)
        if wanted > memory:
            # A memory-backed /dev/shm is charged to the pod's memory: more could never be used.
            result.add(
                "shm_size",
                f"A /dev/shm of {req.shm_size} is more than the pod's memory ({r.memory}); "
                "it is memory-backed and counts against it.",
            )
            return
        r.shm_size = req.shm_size
    else:
        cap = min(parse_quantity(p.max_shm_size) or Decimal(0) for p in pools)
        r.shm_size = format_quantity(job_mounts.default_shm_bytes(memory, cap), "memory")
    if req.termination_grace_seconds is not None:
        r.termination_grace_seconds = req.termination_grace_seconds
    else:
        cap_seconds = min(p.max_termination_grace_seconds for p in pools)
        r.termination_grace_seconds = min(job_mounts.DEFAULT_GRACE_SECONDS, cap_seconds)


def validate_job_request(
    req: JobRequest,
    pools: list[PoolFacts],
    credentials: Mapping[str, secret_refs.CredentialFacts] | None = None,
    *,
    volumes: dict[str, job_mounts.VolumeFacts] | None = None,
) -> ValidationResult:
    """All rules for a job request against the project's pools (pools with any quota), its
    credentials (by name; the references in env and secret_files must name them) and its data
    volumes (by name)."""
    result = ValidationResult()
    if req.kind not in KINDS:
        result.add("kind", f"Unknown kind {req.kind!r}; choose single, mig or gang.")
        return result
    _validate_scalars(req, result)
    _validate_image(req, result)
    _validate_command(req, result)
    _validate_env(req, result)
    _validate_secret_refs(req, credentials or {}, result)
    _validate_shape(req, result)
    _validate_mounts(req, volumes or {}, result)
    if result.errors:
        return result
    candidates = _resolve_pools(req, pools, result)
    if not candidates:
        return result
    admissible = _check_admissible(req, candidates, result)
    if not admissible:
        return result
    admissible = _check_cpu_memory(req, admissible, result)
    if not admissible:
        return result
    admissible = _check_shm_and_grace(req, admissible, result)
    if not admissible:
        return result
    r = result.resolved
    if r.backend in ("volcano", KAI):
        # One queue per pool in both: the job names the queue of exactly one pool.
        admissible = [choose_gang_pool(admissible)]
    # Written into the pods as a required node affinity: Kueue may only pick these pools' flavors.
    r.eligible_pools = [p.slug for p in admissible]
    # Defaults per pool; with several eligible pools, the smallest default fits any of them.
    r.cpu = req.cpu or _min_default(admissible, "default_cpu")
    r.memory = req.memory or _min_default(admissible, "default_memory")
    _resolve_shm_and_grace(req, admissible, result)
    return result
