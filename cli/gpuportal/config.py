"""Where the CLI keeps the portal URL and token: the user's config directory, mode 0600.

GPUPORTAL_URL and GPUPORTAL_TOKEN override the file, so CI jobs and containers need no file.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from gpuportal.errors import EXIT_AUTH, CliError


def config_dir() -> Path:
    """XDG_CONFIG_HOME/gpuportal (~/.config/gpuportal), or %APPDATA%\\gpuportal on Windows."""
    if sys.platform == "win32" and os.environ.get("APPDATA"):
        return Path(os.environ["APPDATA"]) / "gpuportal"
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuportal"


def config_path() -> Path:
    return config_dir() / "config.json"


@dataclass(frozen=True)
class Settings:
    url: str
    token: str


def _read_file() -> dict[str, str]:
    path = config_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CliError(
            f"Cannot read {path}: {exc}. Run 'gpuportal login' again.", EXIT_AUTH
        ) from exc
    return data if isinstance(data, dict) else {}


def load_settings() -> Settings:
    stored = _read_file()
    url = os.environ.get("GPUPORTAL_URL") or stored.get("url") or ""
    token = os.environ.get("GPUPORTAL_TOKEN") or stored.get("token") or ""
    if not url or not token:
        raise CliError(
            "Not logged in: run 'gpuportal login --url URL' or set GPUPORTAL_URL and "
            "GPUPORTAL_TOKEN.",
            EXIT_AUTH,
        )
    return Settings(url=normalise_url(url), token=token)


def normalise_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        url = "https://" + url
    return url


def save_settings(url: str, token: str) -> Path:
    """Write the file so that only its owner can ever read it (created 0600, not chmod-ed later)."""
    directory = config_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = config_path()
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"url": normalise_url(url), "token": token}, out)
    os.chmod(tmp, 0o600)  # an existing tmp file keeps its old mode under O_CREAT
    os.replace(tmp, path)
    return path


def forget_settings() -> bool:
    try:
        config_path().unlink()
    except FileNotFoundError:
        return False
    return True
