"""Training jobs and their state history. Rules live in jobs/services.py and jobs/states.py."""

from django.conf import settings
from django.db import models

from jobs.states import ACTIVE, TERMINAL, JobState
from quotas.models import GpuPool, PoolScheduler, PriorityName
from tenants.models import Project


class JobKind(models.TextChoices):
    SINGLE = "single", "Single pod"  # 1 to 8 whole GPUs, one pod
    MIG = "mig", "MIG slice"
    GANG = "gang", "Gang (multi-pod)"


class JobQuerySet(models.QuerySet):
    def visible_to(self, user) -> "JobQuerySet":
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self
        return self.filter(project__memberships__user=user)

    def active(self) -> "JobQuerySet":
        return self.filter(state__in=ACTIVE)


class JobArray(models.Model):
    """One submission of many similar jobs (an array or a parameter sweep): each element is a
    Job row (Job.array, Job.array_index, Job.params). See jobs/arrays.py for the shape."""

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="job_arrays")
    submitter = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="job_arrays"
    )
    name = models.CharField(max_length=40)
    count = models.PositiveIntegerField()
    # At most this many elements are in the cluster at once; the rest wait in the portal.
    parallelism = models.PositiveIntegerField()
    # The parameter grid ({name: [values]}); empty for a plain array.
    sweep = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.project.slug}/{self.name}[{self.count}]"


class Job(models.Model):
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="jobs")
    submitter = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs"
    )
    name = models.CharField(max_length=40)
    kind = models.CharField(max_length=16, choices=JobKind.choices)
    image = models.CharField(max_length=512)
    command = models.JSONField(default=list, blank=True)
    # NAME → a plain string, or {"secret": credential, "key": key} (a value kept in the Secret).
    env = models.JSONField(default=dict, blank=True)
    # [{"secret": credential, "path": "/mount/path"}]: credentials mounted read-only as files.
    secret_files = models.JSONField(default=list, blank=True)
    gpus = models.PositiveSmallIntegerField(default=0, help_text="Whole GPUs per pod.")
    mig_profile = models.CharField(max_length=32, blank=True)
    replicas = models.PositiveSmallIntegerField(default=1)
    pool = models.ForeignKey(
        GpuPool, on_delete=models.PROTECT, null=True, blank=True, related_name="jobs"
    )
    # Pools (slugs) the job may run in, decided at submission; the pods' node affinity.
    eligible_pools = models.JSONField(default=list, blank=True)
    cpu = models.CharField(max_length=16)
    memory = models.CharField(max_length=16)
    priority = models.CharField(
        max_length=16, choices=PriorityName.choices, default=PriorityName.NORMAL
    )
    max_runtime_minutes = models.PositiveIntegerField()
    backend = models.CharField(max_length=16, choices=PoolScheduler.choices)
    # Issue 25 (KAI pools): a fraction of one GPU, or GPU memory in MiB, instead of whole GPUs.
    gpu_fraction = models.DecimalField(max_digits=4, decimal_places=3, null=True, blank=True)
    gpu_memory = models.PositiveIntegerField(
        null=True, blank=True, help_text="MiB of one GPU (KAI gpu-memory)."
    )

    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.SUBMITTED)
    state_reason = models.CharField(max_length=64, blank=True)
    state_message = models.TextField(blank=True)
    state_changed_at = models.DateTimeField(auto_now_add=True)
    # When the manifests were last applied; null until the first successful apply.
    applied_at = models.DateTimeField(null=True, blank=True)
    # Set by cancel until the cluster objects are confirmed gone (the resync retries it).
    cleanup_pending = models.BooleanField(default=False)
    last_reconciled_at = models.DateTimeField(null=True, blank=True)
    # The last log lines of the job's pods, kept when its finished cluster objects are removed.
    logs_tail = models.TextField(blank=True)
    # While waiting: place in the queue (Kueue visibility API) and a sentence for the researcher
    # (jobs.explain), kept current by the cluster watcher.
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    queue_length = models.PositiveIntegerField(null=True, blank=True)
    explanation = models.TextField(blank=True)
    # Issue 12. Data volumes as resolved at submission ([{"volume", "claim", "path", "read_only"}]:
    # the claim name is kept, so the job does not change if the volume is edited later).
    mounts = models.JSONField(default=list, blank=True)
    # The memory-backed /dev/shm size ("" on jobs stored before it existed: half the memory).
    shm_size = models.CharField(max_length=16, blank=True)
    termination_grace_seconds = models.PositiveIntegerField(default=60)
    # Where the job keeps checkpoints (CHECKPOINT_DIR) and on which claim; empty without a
    # checkpoint volume. Fixed at submission, so preemption and requeue keep it.
    checkpoint_dir = models.CharField(max_length=300, blank=True)
    checkpoint_claim = models.CharField(max_length=253, blank=True)
    resume_from = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="resumed_by"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Element of an array (jobs/arrays.py): its index and its own sweep values. A failed element
    # resubmitted alone gets a new row; the old one is kept, superseded.
    array = models.ForeignKey(
        JobArray, on_delete=models.CASCADE, null=True, blank=True, related_name="elements"
    )
    array_index = models.PositiveIntegerField(null=True, blank=True)
    params = models.JSONField(default=dict, blank=True)
    superseded = models.BooleanField(default=False)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        # The list's order is (created_at DESC, id DESC) with or without a filter; each index
        # ends in that order so a page is an index range read, not a sort (0009's notes), and
        # carries the filter columns, so the capped count of any filtered list is an
        # index-only scan (0010's notes).
        indexes = [
            models.Index(
                fields=["-created_at", "-id"],
                name="job_newest_first",
                include=["project", "state", "kind", "submitter"],
            ),
            models.Index(
                fields=["project", "-created_at", "-id"],
                name="job_project_newest",
                include=["state", "kind", "submitter"],
            ),
            models.Index(
                fields=["submitter", "-created_at", "-id"],
                name="job_submitter_newest",
                include=["project", "state", "kind"],
            ),
            models.Index(
                fields=["state", "-created_at", "-id"],
                name="job_state_newest",
                include=["project", "kind", "submitter"],
            ),
            models.Index(
                fields=["kind", "-created_at", "-id"],
                name="job_kind_newest",
                include=["project", "state", "submitter"],
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(state__in=JobState.values), name="job_state_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=JobKind.values), name="job_kind_valid"
            ),
            models.UniqueConstraint(
                fields=["project", "name"],
                condition=models.Q(state__in=sorted(ACTIVE)),
                name="unique_active_job_name_per_project",
            ),
            models.UniqueConstraint(
                fields=["array", "array_index"],
                condition=models.Q(superseded=False),
                name="unique_current_array_element",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project.slug}/{self.name}"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def pods(self) -> int:
        return self.replicas if self.kind == JobKind.GANG else 1


class JobEvent(models.Model):
    """One line of a job's timeline: a state change (written by jobs.services.job_transition
    only), a note about the job with from and to equal (cluster objects removed, an apply
    blocked), or a Kubernetes Event about the job's objects (jobs.services.job_record_cluster_event;
    `to_state` empty, repeats folded into `count` under one `dedupe_key`)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    created_at = models.DateTimeField(auto_now_add=True)
    # Empty for the event that records the submission itself.
    from_state = models.CharField(max_length=16, choices=JobState.choices, blank=True)
    # Empty for a cluster event (it reports what happened, not a portal state change).
    to_state = models.CharField(max_length=16, choices=JobState.choices, blank=True)
    reason = models.CharField(max_length=64)
    message = models.TextField(blank=True)
    source = models.CharField(max_length=32, help_text="api, ui, reconciler, admin ...")
    # Cluster events: when the cluster last saw it, how often, and the key that folds repeats
    # (the Kubernetes Event's uid). Null for state changes (NULLs never collide).
    occurred_at = models.DateTimeField(null=True, blank=True)
    count = models.PositiveIntegerField(default=1)
    warning = models.BooleanField(default=False)
    dedupe_key = models.CharField(max_length=128, null=True, blank=True, unique=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_state} → {self.to_state} ({self.reason})"


class JobPod(models.Model):
    """Where a job ran: one row per pod the cluster created for it (by pod uid)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="pod_records")
    uid = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=253)
    rank = models.PositiveSmallIntegerField(null=True, blank=True)
    node = models.CharField(max_length=253, blank=True)
    phase = models.CharField(max_length=16, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    gpu_uuids = models.JSONField(default=list, blank=True)
    gpu_indices = models.JSONField(default=list, blank=True)
    # KAI GPU sharing: the shared GPU's group (runai-gpu-group) of a fraction pod.
    gpu_group = models.CharField(max_length=64, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    reason = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)
    restart_count = models.PositiveIntegerField(default=0)
    deleted = models.BooleanField(default=False, help_text="The pod object no longer exists.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["rank", "name", "id"]
        indexes = [models.Index(fields=["job", "name"])]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.name} on {self.node or '?'}"


class WatchCursor(models.Model):
    """The last resourceVersion the cluster watcher processed per watched collection, so a
    restarted (or newly elected) watcher resumes where the last one stopped."""

    key = models.CharField(max_length=128, unique=True)
    resource_version = models.CharField(max_length=64)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.key}@{self.resource_version}"


class QueueUsage(models.Model):
    """Quota use of one portal owner (project or department) in one pool and resource, as the
    ClusterQueue / Volcano Queue status reports it; kept current by the cluster watcher."""

    queue_kind = models.CharField(max_length=16)  # clusterqueue | volcano
    queue_name = models.CharField(max_length=253)
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, null=True, blank=True, related_name="usage"
    )
    pool = models.CharField(max_length=64, blank=True, help_text="GpuPool slug (flavor).")
    resource = models.CharField(max_length=64, help_text="gpu or a MIG profile, e.g. 1g.10gb")
    in_use = models.DecimalField(max_digits=12, decimal_places=3, default=0)
    reserved = models.DecimalField(max_digits=12, decimal_places=3, default=0)
    guaranteed = models.DecimalField(max_digits=12, decimal_places=3, default=0)
    maximum = models.DecimalField(max_digits=12, decimal_places=3, null=True, blank=True)
    borrowed = models.DecimalField(max_digits=12, decimal_places=3, default=0)
    lent = models.DecimalField(max_digits=12, decimal_places=3, default=0)
    pending_workloads = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["queue_name", "pool", "resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["queue_kind", "queue_name", "pool", "resource"],
                name="unique_queue_usage_row",
            )
        ]

    def __str__(self) -> str:
        return f"{self.queue_name} {self.pool}/{self.resource}: {self.in_use}"


class JobTemplate(models.Model):
    """A saved job request of a project (kind, image, GPUs …), usable from the form, the API
    (`"template": "<name>"`) and the CLI. `fields` passed the submission's validation when saved
    (jobs.job_templates.services); explicit fields of a submission override them."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="job_templates")
    name = models.CharField(max_length=40)
    fields = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="job_templates",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="unique_template_per_project")
        ]

    def __str__(self) -> str:
        return f"{self.project.slug}/{self.name}"


class SubmissionKey(models.Model):
    """An `Idempotency-Key` a user sent with a submission, stored in the transaction that
    stored the job (or array): a repeat of the request finds the first one's job instead of
    creating a second (jobs/idempotency.py). Forgotten after PORTAL_IDEMPOTENCY_KEY_HOURS."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="submission_keys"
    )
    key = models.CharField(max_length=255)
    # SHA-256 of the request body (canonical JSON): the same key with another body is refused.
    request_hash = models.CharField(max_length=64)
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, null=True, blank=True, related_name="submission_keys"
    )
    array = models.ForeignKey(
        JobArray, on_delete=models.CASCADE, null=True, blank=True, related_name="submission_keys"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="unique_submission_key_per_user"),
            models.CheckConstraint(
                condition=models.Q(job__isnull=False, array__isnull=True)
                | models.Q(job__isnull=True, array__isnull=False),
                name="submission_key_names_job_or_array",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.key}"
