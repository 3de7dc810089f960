"""The signature of generic webhooks (pure), the one definition the sender and the
documentation's verification example follow.

    X-GPU-Portal-Timestamp: <unix seconds>
    X-GPU-Portal-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>." + raw body)>

The timestamp is inside the signed text so that a captured request cannot be replayed later
with a fresh timestamp; receivers should also refuse timestamps older than a few minutes."""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-GPU-Portal-Signature"
TIMESTAMP_HEADER = "X-GPU-Portal-Timestamp"
EVENT_HEADER = "X-GPU-Portal-Event"
DELIVERY_HEADER = "X-GPU-Portal-Delivery"


def signature(secret: str, timestamp: int | str, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def verify(secret: str, timestamp: str, body: bytes, header: str) -> bool:
    return hmac.compare_digest(signature(secret, timestamp, body), header)
