"""Property-based fuzzing of the REST API against its own OpenAPI schema (schemathesis).

Every operation of /api/schema/ is called with generated requests, valid and invalid, through
the WSGI application in-process, signed in with a token of an admin of a project that has GPU
quota (its members' and jobs' ids are among the generated ones). Every answer goes through all of
schemathesis' checks: no 5xx, status codes, content types, headers and bodies as the schema
documents them, invalid data refused and valid data accepted. The bar is zero server errors and
zero schema mismatches. Examples are bounded (PORTAL_FUZZ_EXAMPLES per operation, 20 by
default: about 200 s of one worker for the 72 operations on a loaded two-core machine, an eighth
of what the whole suite may take); raise it for a deeper run (40 doubles it).
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.core.media_types import YAML_MEDIA_TYPES

MAX_EXAMPLES = int(os.environ.get("PORTAL_FUZZ_EXAMPLES", "20"))


@pytest.fixture
def fuzz_world(personas, kubesim_api, settings):
    """A project admin's token, and objects for generated ids and slugs to land on; the
    projects' namespaces in the session's API-only kubesim (credentials are written there)."""
    from jobs.models import Job
    from tenants.models import Membership
    from tenants.services import token_create
    from tests.credentials.conftest import point_at_kubesim

    point_at_kubesim(kubesim_api, settings)
    job = Job.objects.create(
        project=personas.project_a,
        submitter=personas.member,
        name="fuzz-target",
        kind="single",
        image="busybox",
        env={"SECRET": "value"},
        gpus=1,
        cpu="4",
        memory="16Gi",
        max_runtime_minutes=60,
        backend="kueue",
    )
    _, secret = token_create(actor=personas.admin)
    members = list(
        Membership.objects.filter(project=personas.project_a).values_list("pk", flat=True)
    )
    return {
        "token": secret,
        "ids": {"jobs": [job.pk], "memberships": members},
        "slugs": {"projects": "alpha", "pools": personas.pool.slug},
    }


def _aim_at_real_objects(case, world) -> None:
    """Point part of the generated requests at objects that exist, so that more than the
    404/400 paths are exercised: every other generated id or slug, and the project and user
    named in bodies. Values of the wrong type are left alone (they are the invalid cases)."""
    collection = case.path.split("/")[3]
    params = case.path_parameters or {}
    ident = params.get("id")
    number = int(ident) if isinstance(ident, str) and ident.isdigit() else ident
    if isinstance(number, int) and 0 < number < 10**9 and number % 2 == 0:
        known = world["ids"].get(collection)
        if known:
            chosen = known[number // 2 % len(known)]
            params["id"] = str(chosen) if isinstance(ident, str) else chosen
    slug = params.get("slug")
    if isinstance(slug, str) and len(slug) % 2 == 0 and collection in world["slugs"]:
        params["slug"] = world["slugs"][collection]
    if isinstance(case.body, dict):
        if isinstance(case.body.get("project"), str):
            case.body["project"] = "alpha"
        if isinstance(case.body.get("user"), str):
            case.body["user"] = "oscar"


# Every YAML media type, so that none of schemathesis' own YAML parsers matches first.
@schemathesis.deserializer(*YAML_MEDIA_TYPES)
def _yaml_as_text(ctx, response) -> str:
    """The manifest's YAML answer is documented as text (`type: string`): a multi-document
    stream for `kubectl apply -f`, which one YAML document cannot describe. Check it as the
    text it is (tests/api/test_bad_input.py checks that it parses into the objects)."""
    return response.content.decode(response.encoding or "utf-8")


def _load_schema():
    # Loaded at collection from the running app's /api/schema/ (no database needed); the
    # requests themselves run inside each test's transaction (see `_in_test_transaction`).
    from portal.wsgi import application

    config = schemathesis.config.SchemathesisConfig.from_dict(
        {
            "generation": {"mode": "all"},  # valid and invalid requests
            "checks": {
                # Schema-valid requests may still break a domain rule the schema cannot state
                # (the project must exist and have quota, the image reference grammar, the
                # last admin stays): those answer 400 with the field, which is acceptance
                # of the shape; a generated Idempotency-Key met again with another body is a
                # 422. Everything else keeps schemathesis' defaults.
                "positive_data_acceptance": {
                    "expected-statuses": ["2xx", "400", "401", "403", "404", "409", "422"]
                },
            },
        }
    )
    return schemathesis.openapi.from_wsgi("/api/schema/", application, config=config)


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
def test_api_conforms_to_its_schema(case, fuzz_world):
    _aim_at_real_objects(case, fuzz_world)
    case.call_and_validate(headers={"Authorization": f"Token {fuzz_world['token']}"})
