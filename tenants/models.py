"""Departments, projects (the tenants) and who belongs to them."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models.functions import Concat

DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
NAMESPACE_PREFIX = "gp-"
PROJECT_SLUG_MAX = 40
RESERVED_PROJECT_SLUG_PREFIX = "dept-"

dns1123_label_validator = RegexValidator(
    DNS1123_LABEL,
    "Use lower-case letters, digits and '-', starting and ending with a letter or digit "
    "(a DNS-1123 label).",
)


def namespace_for_slug(slug: str) -> str:
    """The Kubernetes namespace of a project, derived from its slug so it is deterministic."""
    return f"{NAMESPACE_PREFIX}{slug}"


class Department(models.Model):
    slug = models.SlugField(max_length=40, unique=True, validators=[dns1123_label_validator])
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ProjectQuerySet(models.QuerySet):
    def visible_to(self, user) -> "ProjectQuerySet":
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self
        return self.filter(memberships__user=user).distinct()


class GangBackend(models.TextChoices):
    KUEUE = "kueue", "Kueue"
    VOLCANO = "volcano", "Volcano"


class PodSecurity(models.TextChoices):
    """The Pod Security Standard a project's namespace enforces (and its pods are built for)."""

    RESTRICTED = "restricted", "Restricted: pods run as the project's own non-root uid"
    BASELINE = "baseline", "Baseline: images may run as root (for images that need it)"


def default_pod_security() -> str:
    return settings.PORTAL_DEFAULT_POD_SECURITY


# Each project owns a block of uids/gids, as OpenShift gives each namespace one: deterministic
# (from the primary key, never reused), non-overlapping, and above every uid a base image or a
# host account uses. Restricted pods run as the block's first uid, gid and fsGroup.
PROJECT_UID_BASE = 1_000_000_000
PROJECT_UID_BLOCK = 10_000
_UID_MAX = 2**31 - 1


def project_uid_range(project_id: int) -> range:
    """The uids (and gids) that belong to the project with this primary key."""
    start = PROJECT_UID_BASE + project_id * PROJECT_UID_BLOCK
    if project_id < 1 or start + PROJECT_UID_BLOCK - 1 > _UID_MAX:
        raise ValueError(f"project id {project_id} has no uid range (1 to 114,748 do)")
    return range(start, start + PROJECT_UID_BLOCK)


class Project(models.Model):
    slug = models.CharField(
        max_length=PROJECT_SLUG_MAX,
        unique=True,
        validators=[dns1123_label_validator],
        help_text="DNS-1123 label of at most 40 characters; the namespace is derived from it.",
    )
    name = models.CharField(max_length=200)
    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="projects")
    description = models.TextField(blank=True)
    # The namespace is a pure function of the slug (namespace_for_slug); the database computes
    # the stored copy, so no code path can let them differ.
    namespace = models.GeneratedField(
        expression=Concat(models.Value(NAMESPACE_PREFIX), "slug"),
        output_field=models.CharField(max_length=63),
        db_persist=True,
        db_index=True,  # unique already: the slug is, and the prefix is fixed
    )
    default_gang_backend = models.CharField(
        max_length=16, choices=GangBackend.choices, default=GangBackend.KUEUE
    )
    pod_security = models.CharField(
        max_length=16,
        choices=PodSecurity.choices,
        default=default_pod_security,
        help_text="Restricted runs every pod as the project's uid/gid, non-root, with no "
        "privilege escalation and no capabilities; choose baseline only for images that "
        "must run as root.",
    )
    max_array_elements = models.PositiveIntegerField(
        default=1000,
        validators=[MinValueValidator(1), MaxValueValidator(100_000)],
        help_text="The most elements one job array or parameter sweep of this project may have.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ProjectQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    def clean(self) -> None:
        # A department's Volcano queue is named gp-dept-<department>, a project's gp-<project>;
        # this prefix would let a project's queue take a department's name.
        if self.slug.startswith(RESERVED_PROJECT_SLUG_PREFIX):
            raise ValidationError(
                {
                    "slug": f"A project slug may not start with {RESERVED_PROJECT_SLUG_PREFIX!r}: "
                    "that prefix names the departments' queues in the cluster."
                }
            )

    @property
    def run_as_uid(self) -> int | None:
        """The uid, gid and fsGroup of the project's pods under `restricted` (None unsaved)."""
        return project_uid_range(self.pk).start if self.pk else None


class Role(models.TextChoices):
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


class MembershipSource(models.TextChoices):
    """Who granted a membership: an admin in the portal, or a single sign-on group mapping."""

    LOCAL = "local", "Granted in the portal"
    SSO = "sso", "From an identity provider group"


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    source = models.CharField(
        max_length=8,
        choices=MembershipSource.choices,
        default=MembershipSource.LOCAL,
        help_text="Memberships from single sign-on follow the user's IdP groups at every login; "
        "memberships granted in the portal are never removed by a login.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project__slug", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "project"], name="unique_membership"),
            models.CheckConstraint(
                condition=models.Q(role__in=["admin", "member", "viewer"]),
                name="membership_role_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.role})"


class ExternalIdentity(models.Model):
    """A portal user's account at an OpenID provider: (issuer, subject) is the only match key."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identities"
    )
    issuer = models.URLField(max_length=500)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "external identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="unique_external_identity"),
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class GroupMapping(models.Model):
    """An admin rule: members of this IdP group get this role in this project at login."""

    group = models.CharField(
        max_length=255, help_text="The group exactly as the identity provider sends it."
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="group_mappings")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["group", "project__slug"]
        constraints = [
            models.UniqueConstraint(fields=["group", "project"], name="unique_group_mapping"),
            models.CheckConstraint(
                condition=models.Q(role__in=["admin", "member", "viewer"]),
                name="group_mapping_role_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.group} → {self.project} ({self.role})"
