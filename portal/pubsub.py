"""Publish small JSON notices on Redis pub/sub for live pages (best effort, never raises).

The channel names are the contract with the consumers: `portal:jobs:<project slug>` carries
{"job": id, "state": state} for every job change. No URL configured → nothing is published.
"""

import json
import logging
import threading
from typing import Any

from django.conf import settings

log = logging.getLogger(__name__)
_lock = threading.Lock()
_client: tuple[str, Any] | None = None


def _redis():
    global _client
    url = getattr(settings, "PORTAL_PUBSUB_URL", "")
    if not url:
        return None
    with _lock:
        if _client is None or _client[0] != url:
            import redis

            _client = (url, redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2))
        return _client[1]


def enabled() -> bool:
    return bool(getattr(settings, "PORTAL_PUBSUB_URL", ""))


def publish(channel: str, message: dict[str, Any]) -> bool:
    """True when Redis took the message."""
    client = _redis()
    if client is None:
        return False
    try:
        client.publish(channel, json.dumps(message, separators=(",", ":")))
        return True
    except Exception:  # redis raises several types; liveness is not worth failing a write
        log.warning("could not publish on %s", channel, exc_info=True)
        return False


def publish_many(messages: list[tuple[str, dict[str, Any]]]) -> bool:
    """Publish (channel, message) pairs in one pipeline (one round trip, not one each)."""
    client = _redis()
    if client is None or not messages:
        return False
    try:
        pipe = client.pipeline(transaction=False)
        for channel, message in messages:
            pipe.publish(channel, json.dumps(message, separators=(",", ":")))
        pipe.execute()
        return True
    except Exception:  # as publish(): liveness is not worth failing a write
        log.warning("could not publish %d notices", len(messages), exc_info=True)
        return False


def redis_client():
    """The shared Redis client for pub/sub and the metrics store, or None when not configured."""
    return _redis()
