"""The REST API as the CLI sees it: JSON in and out, the API's errors as CliError.

Idempotent calls (GET) retry a few times on network errors and 502/503/504. A submission carries
an Idempotency-Key (a new UUID per `submit`): the portal stores it with the job and answers a
repeat with the first job, so the submission is retried like a read, and for as long as an outage
may last (SUBMIT_RETRY_SECONDS, at most SUBMIT_MAX_ATTEMPTS tries): on any 5xx, a timeout or a
connection lost after the request was sent, with the same key. Other calls that change something
(cancel) are retried only when the connection was never made. Every retry waits what the
portal's Retry-After asks (at most MAX_WAIT_SECONDS), or backs off exponentially.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from gpuportal import __version__
from gpuportal.errors import EXIT_AUTH, EXIT_NOT_FOUND, EXIT_SERVER, EXIT_USAGE, CliError

RETRY_STATUSES = frozenset({502, 503, 504})
# With an Idempotency-Key even a 500 is safe to repeat: the key makes a stored job come back.
KEYED_RETRY_STATUSES = frozenset({500, 502, 503, 504})
RETRY_DELAYS = (0.5, 1.0, 2.0)
SUBMIT_RETRY_SECONDS = 120.0
SUBMIT_MAX_ATTEMPTS = 30
MAX_WAIT_SECONDS = 30.0
IDEMPOTENCY_HEADER = "Idempotency-Key"


def retry_after(response: httpx.Response | None) -> float | None:
    """The seconds a Retry-After header asks for (a number; an HTTP date is not used here)."""
    if response is None:
        return None
    value = response.headers.get("Retry-After", "").strip()
    try:
        seconds = float(value)
    except ValueError:
        return None
    return max(0.0, seconds) if seconds == seconds else None  # NaN is not a wait


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
    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 30.0,
        verify: bool | str = True,
        submit_retry_seconds: float = SUBMIT_RETRY_SECONDS,
        on_retry: Callable[[str], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.base = url.rstrip("/")
        self.submit_retry_seconds = submit_retry_seconds
        self.on_retry = on_retry
        self.sleep, self.clock = sleep, clock
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
        """retry: 'idempotent' (network errors, 502-504, a few times), 'keyed' (a request with
        an Idempotency-Key: any 5xx or network error, for up to submit_retry_seconds) or
        'connect' (only requests that were never sent)."""
        keyed = retry == "keyed"
        deadline = self.clock() + self.submit_retry_seconds
        statuses = KEYED_RETRY_STATUSES if keyed else RETRY_STATUSES
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                response = self.http.request(method, path, **kwargs)
            except httpx.ConnectError as exc:
                failure: Exception = exc
                what = f"cannot reach {self.base} ({exc})"
            except httpx.TransportError as exc:
                if retry == "connect":
                    raise CliError(
                        f"The connection to {self.base} broke during the request ({exc}); it may "
                        "or may not have been carried out. Check with 'gpuportal jobs'.",
                        EXIT_SERVER,
                    ) from exc
                failure, what = exc, f"the connection broke ({exc})"
            else:
                if response.status_code not in statuses or retry == "connect":
                    return response
                failure, what = None, f"the portal answered {response.status_code}"
            delay = self._delay(attempt, response, keyed)
            if keyed:
                exhausted = self.clock() + delay > deadline or attempt + 1 >= SUBMIT_MAX_ATTEMPTS
            else:
                exhausted = attempt >= len(RETRY_DELAYS)
            if exhausted:
                if response is not None:
                    return response
                raise self._gave_up(failure) from failure
            if keyed and self.on_retry is not None:
                self.on_retry(f"{what}; retrying in {delay:g} s with the same {IDEMPOTENCY_HEADER}")
            self.sleep(delay)
            attempt += 1

    def _delay(self, attempt: int, response: httpx.Response | None, keyed: bool) -> float:
        asked = retry_after(response)
        if asked is not None:
            return min(asked, MAX_WAIT_SECONDS)
        if keyed:
            return min(MAX_WAIT_SECONDS, 0.5 * 2**attempt)
        return RETRY_DELAYS[min(attempt, len(RETRY_DELAYS) - 1)]

    def _gave_up(self, failure: Exception | None) -> CliError:
        if isinstance(failure, httpx.ConnectError):
            return CliError(f"Cannot reach {self.base}: {failure}", EXIT_SERVER)
        return CliError(f"Network error talking to {self.base}: {failure}", EXIT_SERVER)

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

    def post(
        self,
        path: str,
        body: Any = None,
        params: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> Any:
        """POST; with an idempotency_key the request is retried (same key) until it gets an
        answer that is not a server error, for up to submit_retry_seconds."""
        if idempotency_key is None:
            response = self._send("POST", path, retry="connect", json=body, params=_clean(params))
            return self._json(response)
        try:
            response = self._send(
                "POST",
                path,
                retry="keyed",
                json=body,
                params=_clean(params),
                headers={IDEMPOTENCY_HEADER: idempotency_key},
            )
            if response.status_code >= 500:
                raise CliError(error_message(response), exit_code_for(response.status_code))
        except CliError as exc:
            raise CliError(
                f"{exc.message} (gave up retrying). It may or may not have been stored; sending "
                f"it again with {IDEMPOTENCY_HEADER} {idempotency_key} (gpuportal submit "
                f"--idempotency-key {idempotency_key} ...) cannot store it twice.",
                exc.exit_code,
            ) from exc
        return self._json(response)

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
