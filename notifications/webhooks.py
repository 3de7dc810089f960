"""Posting a webhook: the body of each format, and an HTTP POST pinned to the address that was
just checked (no second name lookup between the check and the connection), with short timeouts,
no redirects and no retries here (Celery retries the task with backoff)."""

from __future__ import annotations

import json
import ssl
import time
from dataclasses import dataclass
from typing import Any

import urllib3

from notifications import signing
from notifications.address_guard import Target

USER_AGENT = "GPU-Portal-Webhooks/1"


def slack_body(subject: str, text: str) -> dict[str, Any]:
    """Slack's incoming webhooks (and Mattermost, Rocket.Chat, Teams' Slack-compatible ones)."""
    return {"text": f"*{subject}*\n{text}".strip()}


def generic_body(*, delivery_id: int, event: str, subject: str, text: str, payload: dict) -> dict:
    return {
        "delivery": delivery_id,
        "event": event,
        "subject": subject,
        "text": text,
        "data": payload,
    }


def encode(body: dict) -> bytes:
    return json.dumps(body, separators=(",", ":"), sort_keys=True, default=str).encode()


@dataclass(frozen=True)
class PostResult:
    status: int
    body: str


class PostFailed(Exception):
    """The endpoint could not be reached or did not answer in time."""


def post(
    target: Target,
    body: bytes,
    *,
    secret: str,
    event: str,
    delivery_id: int,
    timeout: float,
    ca_certs: str | None = None,
) -> PostResult:
    timestamp = str(int(time.time()))
    headers = {
        "Host": target.host if target.port in (80, 443) else f"{target.host}:{target.port}",
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        signing.TIMESTAMP_HEADER: timestamp,
        signing.SIGNATURE_HEADER: signing.signature(secret, timestamp, body),
        signing.EVENT_HEADER: event,
        signing.DELIVERY_HEADER: str(delivery_id),
    }
    address = target.addresses[0]
    limits = urllib3.Timeout(connect=timeout, read=timeout)
    if target.scheme == "https":
        pool: urllib3.HTTPConnectionPool = urllib3.HTTPSConnectionPool(
            address,
            target.port,
            timeout=limits,
            retries=False,
            server_hostname=target.host,
            assert_hostname=target.host,
            cert_reqs=ssl.CERT_REQUIRED,
            ca_certs=ca_certs,
        )
    else:
        pool = urllib3.HTTPConnectionPool(address, target.port, timeout=limits, retries=False)
    try:
        response = pool.urlopen(
            "POST",
            target.path,
            body=body,
            headers=headers,
            redirect=False,
            retries=False,
            preload_content=False,
        )
        try:
            text = response.read(2048, decode_content=True).decode("utf-8", "replace")
        finally:
            response.release_conn()
        return PostResult(response.status, text)
    except urllib3.exceptions.HTTPError as exc:
        raise PostFailed(str(exc) or type(exc).__name__) from exc
    finally:
        pool.close()
