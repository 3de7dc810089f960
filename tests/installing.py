"""How the tests install a distribution into a fresh venv: with uv when the test run's own venv
has it (`make` installs it there), else with pip. uv resolves the same requirements from the same
index and builds with the same backend, in about a tenth of pip's time; these installs are among
the suite's longest steps."""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
from pathlib import Path

HAVE_UV = importlib.util.find_spec("uv") is not None
# What an installer needs from the environment to reach the index (a machine's own CA bundle or
# proxy): passed on to the tests' otherwise bare environments.
INSTALLER_ENV = {
    key: value
    for key, value in os.environ.items()
    if key.upper() in {"SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"}
    or key.startswith(("UV_", "PIP_"))
}


def install_command(python: Path) -> list[str]:
    """The start of a command that installs into the venv of ``python``; append the targets."""
    if HAVE_UV:
        return [sys.executable, "-m", "uv", "pip", "install", "--quiet", "--python", str(python)]
    return [str(python), "-m", "pip", "install", "--quiet", "--no-compile"]


def as_installer(command: str, python: Path) -> str:
    """A shell command's leading `pip install` (a Dockerfile's RUN line) done the same way."""
    if command.startswith("pip install "):
        return shlex.join(install_command(python)) + command[len("pip install") :]
    return command
