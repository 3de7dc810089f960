"""The watcher process: campaign for the Lease; while leading, run the informers and the
processor; write a heartbeat file the container healthcheck reads."""

import json
import logging
import os
import threading
import time
from pathlib import Path

from django.conf import settings

from jobs.logs.selectors import tail_text
from jobs.models import WatchCursor
from jobs.watcher.informer import Collection, Informer
from jobs.watcher.leader import LeaderElector, default_identity
from jobs.watcher.processor import Processor
from portal.kube.labels import MANAGED_SELECTOR
from tenants.models import NAMESPACE_PREFIX

log = logging.getLogger(__name__)


def _tenant(obj: dict) -> bool:
    return ((obj.get("metadata") or {}).get("namespace") or "").startswith(NAMESPACE_PREFIX)


def _event_of_tenant(obj: dict) -> bool:
    return _tenant(obj)


COLLECTIONS = (
    Collection("batch/v1", "Job", MANAGED_SELECTOR),
    Collection("batch.volcano.sh/v1alpha1", "Job", MANAGED_SELECTOR),
    Collection("kueue.x-k8s.io/v1beta2", "Workload", accept=_tenant),
    Collection("scheduling.volcano.sh/v1beta1", "PodGroup", accept=_tenant),
    Collection("scheduling.run.ai/v2alpha2", "PodGroup", accept=_tenant),
    Collection("v1", "Pod", MANAGED_SELECTOR),
    Collection("v1", "Event", accept=_event_of_tenant, resume_without_list=True),
    Collection("kueue.x-k8s.io/v1beta2", "ClusterQueue", MANAGED_SELECTOR),
    Collection("scheduling.volcano.sh/v1beta1", "Queue", MANAGED_SELECTOR),
    Collection("scheduling.run.ai/v2", "Queue", MANAGED_SELECTOR),
)


class Watcher:
    def __init__(self, *, identity: str = "", health_file: Path | None = None):
        self.identity = identity or default_identity()
        self.elector = LeaderElector(
            namespace=settings.PORTAL_WATCHER_LEASE_NAMESPACE,
            name=settings.PORTAL_WATCHER_LEASE_NAME,
            identity=self.identity,
            lease_seconds=settings.PORTAL_WATCHER_LEASE_SECONDS,
            renew_seconds=settings.PORTAL_WATCHER_RENEW_SECONDS,
        )
        self.health_file = health_file
        self.shutdown = threading.Event()
        self.stop: threading.Event | None = None
        self.processor: Processor | None = None
        self.informers: list[Informer] = []

    @property
    def leading(self) -> bool:
        return self.stop is not None

    def start_leading(self) -> None:
        log.info("watcher %s: leading; starting informers", self.identity)
        self.stop = threading.Event()
        self.processor = Processor(
            stop=self.stop,
            is_leader=lambda: self.elector.is_leader,
            log_tail=lambda ns, pod, container: tail_text(ns, pod, container),
        )
        cursors = dict(WatchCursor.objects.values_list("key", "resource_version"))
        self.informers = [
            Informer(
                c,
                self.processor.put,
                stop=self.stop,
                resource_version=cursors.get(c.key, "") if c.resume_without_list else "",
            )
            for c in COLLECTIONS
        ]
        self.processor.start()
        for informer in self.informers:
            informer.start()

    def stop_leading(self, *, shutting_down: bool = False) -> None:
        if shutting_down:
            log.info("watcher %s: shutting down; stopping the informers", self.identity)
        else:
            log.warning("watcher %s: lost the lease; standing by", self.identity)
        if self.stop is not None:
            self.stop.set()
        self.stop, self.processor, self.informers = None, None, []

    def heartbeat(self) -> None:
        if self.health_file is None:
            return
        state = {
            "time": time.time(),
            "pid": os.getpid(),
            "identity": self.identity,
            "leader": self.leading,
            "processed": self.processor.processed if self.processor else 0,
            "write_lag": self.processor.lag_summary() if self.processor else {},
            # What the watcher cannot read, and why (a missing permission, say), for staff.
            "errors": {
                **({"lease": self.elector.last_error} if self.elector.last_error else {}),
                **{i.collection.key: i.last_error for i in self.informers if i.last_error},
            },
        }
        tmp = self.health_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.health_file)

    def run(self) -> None:
        try:
            while not self.shutdown.is_set():
                leader = self.elector.try_acquire_or_renew()
                if leader and not self.leading:
                    self.start_leading()
                elif not leader and self.leading:
                    self.stop_leading()
                self.heartbeat()
                self.shutdown.wait(self.elector.renew_seconds)
        finally:
            if self.leading:
                self.stop_leading(shutting_down=True)
            self.elector.release()
