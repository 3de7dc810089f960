"""factory-boy factories for the tenancy and quota models, shared by every test package."""

from __future__ import annotations

from functools import cache

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password

from quotas.models import FULL_GPU, GpuPool, PriorityClass, ProjectQuota
from quotas.priority_defaults import PRIORITY_CLASSES
from tenants.models import Department, Membership, Project, Role

TEST_PASSWORD = "correct-horse-battery-staple"


@cache
def _test_password_hash() -> str:
    return make_password(TEST_PASSWORD)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    is_staff = False
    # Hashing is deliberately slow; hash the shared test password once per process.
    password = factory.LazyFunction(lambda: _test_password_hash())


class DepartmentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Department
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"dept-{n}")
    name = factory.LazyAttribute(lambda d: d.slug.replace("-", " ").title())


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"project-{n}")
    name = factory.LazyAttribute(lambda p: p.slug.replace("-", " ").title())
    department = factory.SubFactory(DepartmentFactory)
    description = ""


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    project = factory.SubFactory(ProjectFactory)
    role = Role.MEMBER


class GpuPoolFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuPool
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"pool-{n}")
    name = factory.LazyAttribute(lambda p: f"Pool {p.slug}")
    gpu_model = "NVIDIA-H100-80GB-HBM3"
    node_labels = factory.LazyAttribute(lambda p: {"portal.example.com/pool": p.slug})
    node_count = 4
    gpus_per_node = 8
    mig_profiles = factory.LazyFunction(list)


class ProjectQuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ProjectQuota

    project = factory.SubFactory(ProjectFactory)
    pool = factory.SubFactory(GpuPoolFactory)
    resource = FULL_GPU
    nominal = 4
    borrowing_limit = None


def ensure_workspace_kinds() -> None:
    """The workspace kinds the seed migration gives every install (JupyterLab, code-server), for
    tests after a transactional test flushed the tables."""
    import importlib

    from workspaces.models import WorkspaceKind

    seed = importlib.import_module("workspaces.migrations.0002_default_kinds")
    for values in seed.DEFAULTS:
        WorkspaceKind.objects.get_or_create(slug=values["slug"], defaults=values)


def ensure_priority_classes() -> None:
    """The default priority classes, with the values the seed migration gives every install
    (transactional tests flush the tables, so they cannot rely on the migration's rows)."""
    for default in PRIORITY_CLASSES:
        PriorityClass.objects.get_or_create(
            name=default.name,
            defaults={
                "value": default.value,
                "preemptible": default.preemptible,
                "description": default.description,
            },
        )
