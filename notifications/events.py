"""The event types a user can be told about, and the channels (pure: no Django models).

`quota_request_decided` at the bottom is the entry point the quota requests call."""

from __future__ import annotations

from typing import Any

JOB_ENDED = "job.ended"
JOB_WAITING = "job.waiting"
GPU_IDLE = "gpu.idle"
QUOTA_REQUEST_DECIDED = "quota_request.decided"

EVENT_LABELS = {
    JOB_ENDED: "A job of mine ended (succeeded or failed)",
    JOB_WAITING: "A job of mine has waited longer than my limit",
    GPU_IDLE: "A running job of mine keeps its GPUs idle",
    QUOTA_REQUEST_DECIDED: "A quota request I made was approved or refused",
}
EVENTS = tuple(EVENT_LABELS)

EMAIL = "email"
WEBHOOK = "webhook"
CHANNEL_LABELS = {EMAIL: "E-mail", WEBHOOK: "Webhooks"}
CHANNELS = tuple(CHANNEL_LABELS)

# Without a stored preference every event is on for every channel: a user who added a webhook
# wants it used, and e-mail goes to the address of the account.
DEFAULT_ENABLED = True


def quota_request_decided(request_obj: Any) -> None:
    """Tell the requester that their quota request was decided.

    `request_obj` needs these attributes:
      - pk (or id): the request's id (the dedupe key is quota_request.decided:<pk>:<decision>)
      - requester: the user who asked (a User)
      - project: the project (its `slug` and `name` are used)
      - pool: the GPU pool (its `slug` or `name`), or a string
      - gpus: how many more GPUs were asked for (int)
      - decision: "approved" or "refused" (any short word is shown as it is)
      - note: the deciding staff member's note ("" for none)
    optional: until (a date or datetime the extra quota lasts until), decided_by (a User).
    Call it inside the transaction that stores the decision: nothing is sent if it rolls back.
    """
    from notifications.producers import announce_quota_request_decided

    announce_quota_request_decided(request_obj)
