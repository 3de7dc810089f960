"""Fixtures for the tenancy tests owned by the foundation-domain work (admin, seeding)."""

import pytest

FAST_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def fast_passwords(settings):
    """Demo users are many; hash their passwords cheaply in tests (production keeps PBKDF2)."""
    settings.PASSWORD_HASHERS = FAST_HASHERS


@pytest.fixture(scope="module")
def _demo_seeded(django_db_setup, django_db_blocker):
    """The demo organisation, seeded once for a test module inside a transaction that is rolled
    back after the module's tests; each test runs in a savepoint within it and rolls back its
    own changes (what Django's TestCase.setUpTestData does for a class). Seeding takes most of
    a test's time otherwise."""
    from django.db import transaction
    from django.test import override_settings

    from tenants.management.demo_org import seed_demo_org

    with django_db_blocker.unblock():
        module_transaction = transaction.atomic()
        module_transaction.__enter__()
        with override_settings(PASSWORD_HASHERS=FAST_HASHERS):
            seeded = seed_demo_org()
    yield seeded
    with django_db_blocker.unblock():
        transaction.set_rollback(True)
        module_transaction.__exit__(None, None, None)


@pytest.fixture
def demo(request, _demo_seeded, db, fast_passwords):
    """The demo organisation, seeded as `make demo` seeds it."""
    marker = request.node.get_closest_marker("django_db")
    if marker and marker.kwargs.get("transaction"):
        pytest.fail("`demo` lives in a module-wide transaction: not for transactional tests")
    return _demo_seeded


@pytest.fixture
def staff_client(client, django_user_model, fast_passwords):
    user = django_user_model.objects.create_user(
        "root", "root@example.com", "root-password-123", is_staff=True, is_superuser=True
    )
    client.force_login(user)
    return client
