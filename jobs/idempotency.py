"""Idempotent submission: the `Idempotency-Key` header of POST /api/v1/jobs/.

A client that did not hear the answer to a submission (a lost connection, a 503 during a database
outage, a timeout) cannot know whether the job was stored. With a key of its choosing (a UUID per
submission) it sends the same request again: the portal stores the key with the job, in the same
transaction, and a repeat with the same key and body returns that job (200) instead of a second
one. The same key with another body is a client bug (422). Keys are per user and forgotten after
PORTAL_IDEMPOTENCY_KEY_HOURS (the periodic resync deletes them).

Two identical requests racing each other are settled by the (user, key) unique constraint: the
loser's transaction rolls back and it answers with the winner's job.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from jobs.models import Job, JobArray, SubmissionKey

HEADER = "Idempotency-Key"
MAX_LENGTH = 255


@dataclass(frozen=True)
class IdempotencyKey:
    key: str
    request_hash: str


class KeyReused(Exception):
    """The key was used before with a different request body (the API answers 422)."""

    def __init__(self, key: str):
        self.key = key
        super().__init__(
            f"This {HEADER} was already used for a different request; send a new key for a new "
            "submission (the same key repeats only an identical request)."
        )


class AlreadySubmitted(Exception):
    """A concurrent request with the same key and body stored its job first."""

    def __init__(self, previous: SubmissionKey):
        self.previous = previous
        super().__init__(f"already submitted with {HEADER} {previous.key!r}")


def request_hash(body: Any) -> str:
    """SHA-256 of the body as canonical JSON (key order and spacing do not matter)."""
    if hasattr(body, "lists"):  # a form post's QueryDict: every value of every field
        body = {key: values for key, values in body.lists()}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def parse_idempotency_key(value: str | None, *, body: Any) -> IdempotencyKey | None:
    """The header's key with the body's hash, None without the header; ValidationError naming
    the header when the key is empty, longer than 255 characters or not printable ASCII."""
    if value is None:
        return None
    if not 1 <= len(value) <= MAX_LENGTH or not all(" " <= c <= "~" for c in value):
        raise ValidationError(
            {
                HEADER: [
                    f"Not a valid key: use 1 to {MAX_LENGTH} printable ASCII characters, for "
                    "example a UUID made for this submission."
                ]
            }
        )
    return IdempotencyKey(key=value, request_hash=request_hash(body))


def _expiry_cutoff(now: datetime | None = None) -> datetime:
    hours = float(getattr(settings, "PORTAL_IDEMPOTENCY_KEY_HOURS", 24.0))
    return (now or timezone.now()) - timedelta(hours=hours)


def previous_submission(*, user: Any, key: IdempotencyKey) -> SubmissionKey | None:
    """The stored submission of this user's key (with its job or array), None when the key is
    new or expired. Raises KeyReused when the key came with a different body."""
    row = (
        SubmissionKey.objects.select_related("job", "array")
        .filter(user_id=user.pk, key=key.key)
        .first()
    )
    if row is None:
        return None
    if row.created_at < _expiry_cutoff():
        row.delete()  # expired but not yet swept: the key is free again
        return None
    if row.request_hash != key.request_hash:
        raise KeyReused(key.key)
    return row


def record_submission(
    *, user: Any, key: IdempotencyKey, job: Job | None = None, array: JobArray | None = None
) -> SubmissionKey:
    """Store the key; call inside the transaction that stores the job or array, so that both
    exist or neither does. A duplicate key raises IntegrityError (the transaction rolls back)."""
    return SubmissionKey.objects.create(
        user_id=user.pk, key=key.key, request_hash=key.request_hash, job=job, array=array
    )


def raise_if_already_submitted(*, user: Any, key: IdempotencyKey | None) -> None:
    """After an IntegrityError of a submission: AlreadySubmitted when a request with the same
    key committed first (the unique constraint was the key's), else nothing (the caller
    reports its own conflict)."""
    if key is None:
        return
    previous = previous_submission(user=user, key=key)
    if previous is not None:
        raise AlreadySubmitted(previous)


def expire_submission_keys(*, now: datetime | None = None) -> int:
    """Forget keys older than PORTAL_IDEMPOTENCY_KEY_HOURS (the periodic resync calls this)."""
    deleted, _ = SubmissionKey.objects.filter(created_at__lt=_expiry_cutoff(now)).delete()
    return deleted
