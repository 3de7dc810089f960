"""A real OpenID provider for the single sign-on tests: the npm package `oidc-provider` run by
the machine's node, installed once into var/ (gitignored) and started once per session."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
PROVIDER_SCRIPT = REPO / "tests" / "fixtures" / "oidc" / "provider.mjs"
NODE_CACHE = REPO / "var" / "oidc-provider-node"
PROVIDER_PACKAGE = "oidc-provider@9"
CLIENT_ID = "gpu-portal"
CLIENT_SECRET = "gpu-portal-test-secret"


@dataclass
class OidcProvider:
    issuer: str
    groups_file: Path

    def set_groups(self, login: str, groups: list[str]) -> None:
        """The groups the provider puts in this login's next ID token."""
        current = json.loads(self.groups_file.read_text())
        current[login] = groups
        self.groups_file.write_text(json.dumps(current))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _installed_provider() -> Path:
    """The cache folder holding node_modules/oidc-provider and a copy of the script (ES module
    imports resolve from the script's own folder)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("node and npm are needed to run the OpenID provider of the SSO tests")
    NODE_CACHE.mkdir(parents=True, exist_ok=True)
    if not (NODE_CACHE / "node_modules" / "oidc-provider" / "package.json").exists():
        (NODE_CACHE / "package.json").write_text('{"private": true, "type": "module"}\n')
        result = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--silent", PROVIDER_PACKAGE],
            cwd=NODE_CACHE,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0:
            pytest.fail(f"npm install {PROVIDER_PACKAGE} failed:\n{result.stderr[-2000:]}")
    shutil.copyfile(PROVIDER_SCRIPT, NODE_CACHE / "provider.mjs")
    return NODE_CACHE


@pytest.fixture(scope="session")
def portal_server(request):
    """pytest-django's live server, started with static files from the finders (the session
    fixture starts before the autouse one of tests/conftest.py that sets this per test)."""
    from django.test import override_settings

    with override_settings(WHITENOISE_USE_FINDERS=True, WHITENOISE_AUTOREFRESH=True):
        return request.getfixturevalue("live_server")


@pytest.fixture(scope="session")
def oidc_provider(portal_server, tmp_path_factory) -> Iterator[OidcProvider]:
    live_server = portal_server
    folder = _installed_provider()
    port = _free_port()
    issuer = f"http://127.0.0.1:{port}"
    groups_file = tmp_path_factory.mktemp("oidc") / "groups.json"
    groups_file.write_text("{}")
    log = (groups_file.parent / "provider.log").open("w")
    process = subprocess.Popen(
        ["node", "provider.mjs"],
        cwd=folder,
        env={
            "PATH": os.environ["PATH"],
            "NODE_ENV": "test",
            "OIDC_PORT": str(port),
            "OIDC_ISSUER": issuer,
            "OIDC_CLIENT_ID": CLIENT_ID,
            "OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "OIDC_REDIRECT_URI": f"{live_server.url}/accounts/sso/callback/",
            "OIDC_POST_LOGOUT_REDIRECT_URI": f"{live_server.url}/accounts/login/",
            "OIDC_GROUPS_FILE": str(groups_file),
        },
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(
                    f"{issuer}/.well-known/openid-configuration", timeout=1
                ).raise_for_status()
                break
            except httpx.HTTPError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail(
                        "the OpenID provider did not start:\n"
                        + (groups_file.parent / "provider.log").read_text()[-2000:]
                    )
                time.sleep(0.2)
        yield OidcProvider(issuer=issuer, groups_file=groups_file)
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


@pytest.fixture
def sso_settings(settings, oidc_provider):
    """The portal configured for the test provider."""
    from tenants.sso.client import clear_discovery_cache

    settings.PORTAL_OIDC_ISSUER = oidc_provider.issuer
    settings.PORTAL_OIDC_DISCOVERY_URL = ""
    settings.PORTAL_OIDC_CLIENT_ID = CLIENT_ID
    settings.PORTAL_OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.PORTAL_OIDC_SCOPES = ["openid", "email", "profile", "groups"]
    settings.PORTAL_OIDC_GROUPS_CLAIM = "groups"
    clear_discovery_cache()
    yield settings
    clear_discovery_cache()
