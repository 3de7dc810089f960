"""The demo organisation that `make demo` and `manage.py seed_demo` create.

Two departments, four projects, two GPU pools that match kubesim's default cluster, quotas with
borrowing, a department cap each, and users in every role with known passwords.

Seeding only creates what is missing and never changes or deletes existing rows, so running it
twice changes nothing and an admin's edits to the demo data survive a re-seed.

The H100 quotas add up to exactly the pool: kubesim's default H100 pool is 4 nodes × 8 GPUs, one
node partitioned as 4 GPUs × 7 1g.10gb and 2 GPUs × 3 2g.20gb (28 and 6 instances = 6 GPUs)
plus 26 whole GPUs; the demo guarantees 26 whole GPUs, 28 × 1g.10gb and 6 × 2g.20gb.

Issue 25: a third pool runs on KAI Scheduler and lets jobs ask for a fraction of a GPU: the
demo's kubesim adds one node of 4 L40S GPUs for it (portal/management/demo_cluster.yaml),
labelled as its own KAI node pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db import transaction

from quotas import services as quota_services
from quotas.models import GPU_PRODUCT_LABEL, DepartmentQuota, GpuPool, ProjectQuota
from tenants import services as tenant_services
from tenants.models import Department, Membership, Project, Role

SUPERUSER = ("admin", "admin-demo-password")
USER_PASSWORD = "demo-password"  # noqa: S105 - the demo's published sign-in, shown on its page

DEPARTMENTS = [
    ("research", "Research", "Foundation models and computer vision research."),
    ("applied", "Applied ML", "Production recommendation and speech models."),
]

# slug, name, department, description
PROJECTS = [
    ("vision", "Vision", "research", "Image and video models."),
    ("nlp", "NLP", "research", "Language models."),
    ("recsys", "Recommender Systems", "applied", "Ranking and retrieval models."),
    ("speech", "Speech", "applied", "Speech recognition and synthesis."),
]

# slug, name, GFD product, nodes, GPUs per node, MIG profiles
POOLS = [
    ("h100", "H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", 4, 8, ["1g.10gb", "2g.20gb"]),
    ("a100", "A100 SXM4 40GB", "NVIDIA-A100-SXM4-40GB", 2, 8, []),
    ("l40s-kai", "L40S on KAI Scheduler", "NVIDIA-L40S", 1, 4, []),
]
# Pools run on Kueue unless listed here: slug → (extra node labels, pool settings)
KAI_POOLS = {
    "l40s-kai": (
        {"kai.scheduler/node-pool": "l40s"},
        {"scheduler": "kai", "kai_fractions_allowed": True, "gpu_memory_mib": 46068},
    )
}

# project, pool, resource, nominal, borrowing limit (None = may borrow all idle department quota)
QUOTAS = [
    ("vision", "h100", "gpu", 8, 4),
    ("vision", "h100", "1g.10gb", 14, 7),
    ("vision", "a100", "gpu", 4, 4),
    ("nlp", "h100", "gpu", 8, None),
    ("nlp", "h100", "1g.10gb", 14, None),
    ("nlp", "a100", "gpu", 4, None),
    ("recsys", "h100", "gpu", 6, 2),
    ("recsys", "h100", "2g.20gb", 3, 3),
    ("recsys", "a100", "gpu", 4, 0),
    ("speech", "h100", "gpu", 4, None),
    ("speech", "h100", "2g.20gb", 3, None),
    ("speech", "a100", "gpu", 4, 4),
    ("vision", "l40s-kai", "gpu", 2, None),
    ("nlp", "l40s-kai", "gpu", 2, None),
]

# department, pool, resource, limit
DEPARTMENT_CAPS = [
    ("research", "h100", "gpu", 16),
    ("applied", "a100", "gpu", 8),
]

ROLES = (Role.ADMIN, Role.MEMBER, Role.VIEWER)


def demo_username(project_slug: str, role: str) -> str:
    return f"{project_slug}-{role}"


@dataclass
class SeedResult:
    created: dict[str, int] = field(default_factory=dict)
    logins: list[tuple[str, str, str]] = field(default_factory=list)  # username, password, what

    def count(self, kind: str, was_created: bool) -> None:
        self.created[kind] = self.created.get(kind, 0) + int(was_created)


@transaction.atomic
def seed_demo_org() -> SeedResult:
    """Create the demo organisation's missing rows; return what was created and the logins."""
    result = SeedResult()
    User = get_user_model()

    admin = User.objects.filter(username=SUPERUSER[0]).first()
    result.count("users", admin is None)
    if admin is None:
        admin = User.objects.create_superuser(SUPERUSER[0], "admin@example.com", SUPERUSER[1])
    result.logins.append((SUPERUSER[0], SUPERUSER[1], "staff superuser: admin console /admin/"))

    departments = {}
    for slug, name, description in DEPARTMENTS:
        department = Department.objects.filter(slug=slug).first()
        result.count("departments", department is None)
        if department is None:
            department = tenant_services.department_create(
                actor=admin, slug=slug, name=name, description=description
            )
        departments[slug] = department

    projects = {}
    for slug, name, department, description in PROJECTS:
        project = Project.objects.filter(slug=slug).first()
        result.count("projects", project is None)
        if project is None:
            project = tenant_services.project_create(
                actor=admin,
                slug=slug,
                name=name,
                department=departments[department],
                description=description,
            )
        projects[slug] = project

    pools = {}
    for slug, name, model, nodes, per_node, profiles in POOLS:
        pool = GpuPool.objects.filter(slug=slug).first()
        result.count("pools", pool is None)
        if pool is None:
            labels, settings = KAI_POOLS.get(slug, ({}, {}))
            pool = quota_services.pool_create(
                actor=admin,
                slug=slug,
                name=name,
                gpu_model=model,
                node_count=nodes,
                gpus_per_node=per_node,
                mig_profiles=profiles,
                node_labels={GPU_PRODUCT_LABEL: model, **labels},
                **settings,
            )
        pools[slug] = pool

    for project, pool, resource, nominal, borrowing_limit in QUOTAS:
        exists = ProjectQuota.objects.filter(
            project=projects[project], pool=pools[pool], resource=resource
        ).exists()
        if not exists:
            quota_services.quota_set(
                actor=admin,
                project=projects[project],
                pool=pools[pool],
                resource=resource,
                nominal=nominal,
                borrowing_limit=borrowing_limit,
            )
        result.count("quotas", not exists)

    for department, pool, resource, limit in DEPARTMENT_CAPS:
        exists = DepartmentQuota.objects.filter(
            department=departments[department], pool=pools[pool], resource=resource
        ).exists()
        if not exists:
            quota_services.department_quota_set(
                actor=admin,
                department=departments[department],
                pool=pools[pool],
                resource=resource,
                limit=limit,
            )
        result.count("department caps", not exists)

    for slug, project in projects.items():
        for role in ROLES:
            username = demo_username(slug, role)
            user = User.objects.filter(username=username).first()
            result.count("users", user is None)
            if user is None:
                user = User.objects.create_user(username, f"{username}@example.com", USER_PASSWORD)
            exists = Membership.objects.filter(user=user, project=project).exists()
            if not exists:
                tenant_services.membership_add(actor=admin, project=project, user=user, role=role)
            result.count("memberships", not exists)
            result.logins.append((username, USER_PASSWORD, f"{role} of project {slug}"))
    return result
