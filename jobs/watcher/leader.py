"""Leader election on a coordination.k8s.io/v1 Lease, the client-go way.

A candidate takes the Lease when it is free or its holder has not renewed it for
leaseDurationSeconds *as observed locally* (the holder's clock is never compared with ours: we
note when the Lease record last changed, by our monotonic clock). Every write carries the
resourceVersion read, so two candidates cannot both win. The leader renews every
`renew_seconds`; if it cannot renew for a whole lease duration it must stop writing.
"""

import logging
import socket
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from portal import observability
from portal.kube import watch as kube
from portal.kube.apply import KubeError

log = logging.getLogger(__name__)


def default_identity() -> str:
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


class LeaderElector:
    def __init__(
        self,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: float = 8.0,
        renew_seconds: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_seconds = float(lease_seconds)
        self.renew_seconds = float(renew_seconds)
        self.clock = clock
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._renewed_at: float | None = None  # when we last renewed as leader
        self.last_error = ""  # why the last round failed ("" after a good one)

    def _spec(self, lease: dict | None) -> dict:
        now = kube.micro_time(datetime.now(UTC))
        old = (lease or {}).get("spec") or {}
        ours = old.get("holderIdentity") == self.identity
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_seconds)),
            "acquireTime": old.get("acquireTime") if ours and old.get("acquireTime") else now,
            "renewTime": now,
            "leaseTransitions": int(old.get("leaseTransitions") or 0) + (0 if ours else 1),
        }
        return spec

    @property
    def is_leader(self) -> bool:
        """True while our last renewal is younger than the lease duration."""
        return self._renewed_at is not None and self.clock() - self._renewed_at < self.lease_seconds

    def try_acquire_or_renew(self) -> bool:
        """One round; True when we hold the Lease afterwards (also reported on /metrics)."""
        held = self._try_acquire_or_renew()
        # Expires on its own: a killed leader stops being reported within one lease duration.
        observability.gauge(
            "watcher_leader", 1 if held else 0, ttl=self.lease_seconds, identity=self.identity
        )
        return held

    def _try_acquire_or_renew(self) -> bool:
        try:
            lease = kube.get_lease(self.namespace, self.name)
            now = self.clock()
            if lease is None:
                kube.create_lease(self.namespace, self.name, self._spec(None))
                self._renewed_at = now
                self.last_error = ""
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            record = (holder, str(spec.get("renewTime") or ""))
            if record != self._observed:
                self._observed, self._observed_at = record, now
            duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
            free = not holder or now - self._observed_at >= duration
            if holder != self.identity and not free:
                self._renewed_at = None
                self.last_error = ""
                return False
            kube.update_lease(lease, self._spec(lease))
            self._renewed_at = now
            self.last_error = ""
            return True
        except KubeError as exc:
            # A conflict means someone else wrote first; an outage means we cannot prove we
            # still hold it. Either way keep the last renewal time: is_leader runs out on its own.
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            self.last_error = exc.message
            return self.is_leader

    def release(self) -> None:
        """Give the Lease up on a clean shutdown so a standby takes over at once."""
        if not self.is_leader:
            return
        try:
            lease = kube.get_lease(self.namespace, self.name)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                spec = dict(lease["spec"])
                spec["holderIdentity"] = ""
                spec["leaseDurationSeconds"] = 1
                kube.update_lease(lease, spec)
        except KubeError:
            pass
        self._renewed_at = None
