"""The REST API as the CLI sees it: JSON in and out, the API's errors as CliError.

Idempotent calls (GET) retry a few times on network errors and 502/503/504. Calls that create
something (submit) are retried only when the connection was never made, so a job is never
submitted twice: once a request may have reached the portal, the error is reported instead.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx

from gpuportal import __version__
from gpuportal.errors import EXIT_AUTH, EXIT_NOT_FOUND, EXIT_SERVER, EXIT_USAGE, CliError

RETRY_STATUSES = frozenset({502, 503, 504})
RETRY_DELAYS = (0.5, 1.0, 2.0)


def error_message(response: httpx.Response) -> str:
    """The API's own words: its `detail`, then each field's first message."""
    try:
        body = response.json()
    except ValueError:
        text = response.text.strip().splitlines()
        return f"HTTP {response.status_code}: {text[0][:200] if text else response.reason_phrase}"
    if not isinstance(body, dict):
        return f"HTTP {response.status_code}: {body}"
    detail = str(body.get("detail") or f"HTTP {response.status_code}")
    errors = body.get("errors") or {}
    parts = [detail]
    if isinstance(errors, dict):
        for field, messages in errors.items():
            first = messages[0] if isinstance(messages, list) and messages else messages
            line = f"{field}: {first}"
            if line != detail and str(first) != detail:
                parts.append(line)
    return "; ".join(parts)


def exit_code_for(status: int) -> int:
    if status in (401, 403):
        return EXIT_AUTH
    if status == 404:
        return EXIT_NOT_FOUND
    if status >= 500:
        return EXIT_SERVER
    return EXIT_USAGE


class Client:
    def __init__(self, url: str, token: str, *, timeout: float = 30.0, verify: bool | str = True):
        self.base = url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.base,
            headers={
                "Authorization": f"Token {token}",
                "Accept": "application/json",
                "User-Agent": f"gpuportal-cli/{__version__}",
            },
            timeout=timeout,
            verify=verify,
        )

    def close(self) -> None:
        self.http.close()

    def _send(self, method: str, path: str, *, retry: str, **kwargs: Any) -> httpx.Response:
        """retry: 'idempotent' (network errors, 502-504) or 'connect' (never-sent requests)."""
        attempts = len(RETRY_DELAYS) + 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self.http.request(method, path, **kwargs)
            except httpx.ConnectError as exc:
                if last:
                    raise CliError(f"Cannot reach {self.base}: {exc}", EXIT_SERVER) from exc
            except httpx.TransportError as exc:
                if retry != "idempotent":
                    raise CliError(
                        f"The connection to {self.base} broke during the request ({exc}); it may "
                        "or may not have been carried out. Check with 'gpuportal jobs'.",
                        EXIT_SERVER,
                    ) from exc
                if last:
                    raise CliError(
                        f"Network error talking to {self.base}: {exc}", EXIT_SERVER
                    ) from exc
            else:
                if response.status_code in RETRY_STATUSES and retry == "idempotent" and not last:
                    pass
                else:
                    return response
            time.sleep(RETRY_DELAYS[attempt])
        raise AssertionError("unreachable")  # the loop returns or raises

    def _json(self, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise CliError(error_message(response), exit_code_for(response.status_code))
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise CliError(
                f"{self.base} answered something that is not JSON (HTTP {response.status_code}): "
                "is the URL a GPU Portal?",
                EXIT_SERVER,
            ) from exc

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self._json(self._send("GET", path, retry="idempotent", params=_clean(params)))

    def post(self, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        return self._json(
            self._send("POST", path, retry="connect", json=body, params=_clean(params))
        )

    def get_text(self, path: str, params: dict[str, Any] | None = None) -> str:
        response = self._send(
            "GET", path, retry="idempotent", params=_clean(params), headers={"Accept": "*/*"}
        )
        if response.status_code >= 400:
            raise CliError(error_message(response), exit_code_for(response.status_code))
        return response.text

    def stream_text(self, path: str, params: dict[str, Any] | None = None) -> Iterator[str]:
        """Yield text as the portal sends it (log follow); no retry once bytes have arrived."""
        try:
            with self.http.stream(
                "GET", path, params=_clean(params), headers={"Accept": "*/*"}, timeout=None
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise CliError(error_message(response), exit_code_for(response.status_code))
                yield from response.iter_text()
        except httpx.TransportError as exc:
            raise CliError(f"The stream from {self.base} broke: {exc}", EXIT_SERVER) from exc

    def all_pages(self, path: str, params: dict[str, Any] | None = None) -> list[dict]:
        """Every item of a paginated list (follows `next`)."""
        body = self.get(path, params)
        if isinstance(body, list):
            return body
        items = list(body.get("results", []))
        while body.get("next"):
            body = self._json(self._send("GET", body["next"], retry="idempotent"))
            items.extend(body.get("results", []))
        return items


def _clean(params: dict[str, Any] | None) -> dict[str, Any] | None:
    if params is None:
        return None
    return {k: v for k, v in params.items() if v is not None and v != "" and v != []}
