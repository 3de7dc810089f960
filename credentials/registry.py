"""Which registry an image is pulled from, and registry servers in one spelling. Pure.

Follows the Docker reference grammar (distribution/reference): the first path component names a
registry only if it contains a dot or a port, or is `localhost`; otherwise the image is on Docker
Hub (`busybox` is docker.io/library/busybox, `team/image` docker.io/team/image).
"""

from __future__ import annotations

import re

DOCKER_HUB = "docker.io"
# What Docker Hub is also called; a credential for any of them serves docker.io images.
_HUB_ALIASES = frozenset(
    {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}
)
# The key kubelets (and docker) look Docker Hub logins up by in a .dockerconfigjson.
DOCKER_HUB_AUTH_KEY = "https://index.docker.io/v1/"
_LABEL = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
_HOST_RE = re.compile(rf"^(?:{_LABEL}(?:\.{_LABEL})*)(?::[0-9]{{1,5}})?$")


def normalize_server(text: str) -> str | None:
    """`host[:port]` in lower case, Docker Hub's aliases as docker.io; None when not a server.

    Accepts what people paste: a scheme and a path (https://index.docker.io/v1/) are dropped.
    """
    if not isinstance(text, str):
        return None
    server = text.strip().lower()
    for scheme in ("https://", "http://"):
        if server.startswith(scheme):
            server = server[len(scheme) :]
    server = server.split("/", 1)[0]
    if not server or len(server) > 253 or not _HOST_RE.match(server):
        return None
    if server in _HUB_ALIASES:
        return DOCKER_HUB
    return server


def image_registry(image: str) -> str:
    """The registry (normalised as normalize_server does) an image reference is pulled from."""
    first, sep, _rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return normalize_server(first) or first.lower()
    return DOCKER_HUB


def auth_key(server: str) -> str:
    """The key of a server in a .dockerconfigjson's `auths`."""
    return DOCKER_HUB_AUTH_KEY if server == DOCKER_HUB else server
