"""Fixtures for the tenancy tests owned by the foundation-domain work (admin, seeding)."""

import pytest


@pytest.fixture
def fast_passwords(settings):
    """Demo users are many; hash their passwords cheaply in tests (production keeps PBKDF2)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def demo(db, fast_passwords):
    """The demo organisation, seeded as `make demo` seeds it."""
    from tenants.management.demo_org import seed_demo_org

    return seed_demo_org()


@pytest.fixture
def staff_client(client, django_user_model, fast_passwords):
    user = django_user_model.objects.create_user(
        "root", "root@example.com", "root-password-123", is_staff=True, is_superuser=True
    )
    client.force_login(user)
    return client
