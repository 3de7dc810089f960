"""Which webhook URLs the portal may POST to (pure apart from name resolution, which is
injectable): only http(s), and, unless the endpoint may reach internal targets (staff), only
hosts every one of whose addresses is public. Checked when an endpoint is saved and again at
every delivery, on the address the delivery then connects to (a name that resolved to a public
address at save time may resolve to 127.0.0.1 later: DNS rebinding)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

Resolver = Callable[[str, int], list[str]]


class UnsafeURL(ValueError):
    """A sentence saying why the URL is refused."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # as written (for the Host header and TLS)
    port: int
    path: str  # path and query
    addresses: tuple[str, ...]  # every address the host resolved to, all checked


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


def is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def check_url(
    url: str, *, allow_internal: bool = False, resolve: Resolver = system_resolver
) -> Target:
    """The URL's target with its checked addresses, or UnsafeURL saying why not."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise UnsafeURL(f"Not a valid URL: {exc}.") from exc
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise UnsafeURL("Only http:// and https:// URLs can receive webhooks.")
    host = parts.hostname or ""
    if not host:
        raise UnsafeURL("The URL has no host name.")
    port = port or (443 if scheme == "https" else 80)
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError) as exc:
        raise UnsafeURL(f"The host {host!r} cannot be resolved ({exc}).") from exc
    if not addresses:
        raise UnsafeURL(f"The host {host!r} has no address.")
    if not allow_internal:
        internal = [a for a in addresses if not is_public(a)]
        if internal:
            raise UnsafeURL(
                f"The host {host!r} resolves to {', '.join(internal)}, a loopback, private, "
                "link-local or otherwise non-public address; webhooks may only go to public "
                "addresses (staff can allow internal targets)."
            )
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return Target(scheme, host, port, path, tuple(addresses))
