"""Property-based fuzzing of the REST API against its own OpenAPI schema (schemathesis).

Every operation of /api/schema/ is called with generated requests, valid and invalid, through
the WSGI application in-process, signed in with a token of a member of a project that has GPU
quota, and every answer is checked with schemathesis' checks: no 5xx, status codes, content
types, headers and bodies as the schema documents them, invalid data refused and valid data
accepted. The bar is zero server errors and zero schema mismatches. Examples are bounded so the
whole run stays around a minute or two on a loaded two-core machine; raise
PORTAL_FUZZ_EXAMPLES for a deeper run.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

MAX_EXAMPLES = int(os.environ.get("PORTAL_FUZZ_EXAMPLES", "25"))


@pytest.fixture
def fuzz_token(personas) -> str:
    from tenants.services import token_create

    _, secret = token_create(actor=personas.member)
    return secret


def _load_schema():
    # Loaded at collection from the running app's /api/schema/ (no database needed); the
    # requests themselves run inside each test's transaction (see `_in_test_transaction`).
    from portal.wsgi import application

    return schemathesis.openapi.from_wsgi("/api/schema/", application)


schema = _load_schema()


@pytest.fixture(autouse=True)
def _in_test_transaction(db):
    """As Django's test client does: a finished request must not close the connection that
    holds the test's transaction (the WSGI handler would, outside a test)."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_api_conforms_to_its_schema(case, fuzz_token):
    case.call_and_validate(headers={"Authorization": f"Token {fuzz_token}"})
