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


def install_command(python: Path, *, compile_bytecode: bool = False) -> list[str]:
    """The start of a command that installs into the venv of ``python``; append the targets.
    ``compile_bytecode`` as pip does by default: worth it when many processes will start."""
    if HAVE_UV:
        command = [sys.executable, "-m", "uv", "pip", "install", "--quiet", "--python", str(python)]
        return [*command, "--compile-bytecode"] if compile_bytecode else command
    command = [str(python), "-m", "pip", "install", "--quiet"]
    return command if compile_bytecode else [*command, "--no-compile"]


def as_installer(command: str, python: Path) -> str:
    """A shell command's leading `pip install` (a Dockerfile's RUN line) done the same way,
    byte-compiled as pip does (the image sets PYTHONDONTWRITEBYTECODE: without compiled files
    each of its processes would compile every module it imports again)."""
    if command.startswith("pip install "):
        installer = install_command(python, compile_bytecode=True)
        return shlex.join(installer) + command[len("pip install") :]
    return command
