"""Fixtures for the quota tests: a small organisation built through the services."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


@pytest.fixture
def org(db):
    """Two departments, three projects, an H100 pool with MIG and an A100 pool without."""
    from quotas import services
    from tenants import services as tenant_services

    research = tenant_services.department_create(actor=None, slug="research", name="Research")
    platform = tenant_services.department_create(actor=None, slug="platform", name="Platform")
    vision = tenant_services.project_create(
        actor=None, slug="vision", name="Vision", department=research
    )
    nlp = tenant_services.project_create(actor=None, slug="nlp", name="NLP", department=research)
    infra = tenant_services.project_create(
        actor=None, slug="infra", name="Infra", department=platform
    )
    h100 = services.pool_create(
        actor=None,
        slug="h100",
        name="H100 80GB",
        gpu_model="NVIDIA-H100-80GB-HBM3",
        node_count=4,
        mig_profiles=["2g.20gb", "1g.10gb"],
    )
    a100 = services.pool_create(
        actor=None, slug="a100", name="A100 40GB", gpu_model="NVIDIA-A100-SXM4-40GB", node_count=2
    )
    return SimpleNamespace(
        research=research,
        platform=platform,
        vision=vision,
        nlp=nlp,
        infra=infra,
        h100=h100,
        a100=a100,
    )


@pytest.fixture
def fast_passwords(settings):
    """Hash test passwords cheaply (production keeps PBKDF2)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def staff_user(db, fast_passwords):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(
        "root", "root@example.com", "root-password-123", is_staff=True, is_superuser=True
    )
