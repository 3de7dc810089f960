"""How each workspace app is started under the portal's prefix and how the proxy signs in to it.
Pure functions.

- JupyterLab: base URL /ws/<id>/, the token from JUPYTER_TOKEN; the proxy sends
  `Authorization: token <token>` (straight to the Service) or `?token=` (through the API server,
  which strips the Authorization header of the requests it authenticates).
- code-server: --abs-proxy-base-path /ws/<id>, HASHED_PASSWORD = sha256 of the token, which is
  also the value code-server accepts as its session cookie; the proxy sends that cookie.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from workspaces.models import WorkspaceApp

TOKEN_ENV = "JUPYTER_TOKEN"  # noqa: S105 - the variable's name, not a value
HASHED_PASSWORD_ENV = "HASHED_PASSWORD"  # noqa: S105
CODE_SERVER_COOKIE = "code-server-session"


def base_path(workspace_id: int) -> str:
    return f"/ws/{workspace_id}/"


def command(app: str, *, workspace_id: int, port: int) -> list[str]:
    base = base_path(workspace_id)
    if app == WorkspaceApp.CODE_SERVER:
        return [
            "code-server",
            "--bind-addr",
            f"0.0.0.0:{port}",
            "--auth",
            "password",
            "--abs-proxy-base-path",
            base.rstrip("/"),
            "--disable-telemetry",
        ]
    return [
        "jupyter",
        "lab",
        "--ServerApp.ip=0.0.0.0",
        f"--ServerApp.port={port}",
        f"--ServerApp.base_url={base}",
        "--ServerApp.open_browser=False",
        # The Host header is the Service's (or the API server's), not the browser's.
        "--ServerApp.allow_remote_access=True",
        "--ServerApp.root_dir=/home/jovyan",
    ]


def hashed(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def secret_values(app: str, *, token: str) -> dict[str, str]:
    """The app's sign-in setting, as its env variable: the token's Secret holds exactly this."""
    if app == WorkspaceApp.CODE_SERVER:
        return {HASHED_PASSWORD_ENV: hashed(token)}
    return {TOKEN_ENV: token}


def secret_keys(app: str) -> tuple[str, ...]:
    """The keys of the token Secret (the app's env variable)."""
    return (HASHED_PASSWORD_ENV,) if app == WorkspaceApp.CODE_SERVER else (TOKEN_ENV,)


def token_credential(workspace_id: int, run: int) -> str:
    """The name a run's env references its token Secret by (jobs.secret_refs). A '.' is in no
    project credential's name, so no credential can take it, and its Secret's name
    (credentials.manifests.secret_name) is the workspace's alone. One per run: a run's pod never
    starts with the token of the run before."""
    return f"workspace.{workspace_id}.{run}"


def env_refs(app: str, *, workspace_id: int, run: int) -> dict[str, dict[str, str]]:
    """The run's env: the sign-in setting taken from the token Secret, so the token is stored
    neither in the job nor in the pod spec, where the project's members could read it."""
    name = token_credential(workspace_id, run)
    return {var: {"secret": name, "key": var} for var in secret_keys(app)}


@dataclass(frozen=True)
class Credentials:
    """What the proxy adds to each upstream request."""

    headers: dict[str, str]
    query: dict[str, str]
    cookies: dict[str, str]


def credentials(app: str, *, token: str, via_api_server: bool) -> Credentials:
    if app == WorkspaceApp.CODE_SERVER:
        return Credentials({}, {}, {CODE_SERVER_COOKIE: hashed(token)})
    if via_api_server:
        return Credentials({}, {"token": token}, {})
    return Credentials({"Authorization": f"token {token}"}, {}, {})
