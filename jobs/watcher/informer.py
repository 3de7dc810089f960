"""One watched collection: list, then watch from the list's resourceVersion, forever.

Every change is handed to `sink(Change)`. After a (re)list the informer reports the whole
collection (type "SYNC") and a DELETED for every object it knew that the list no longer has, so
the consumer converges whatever it missed. A dropped watch resumes from the last resourceVersion
seen (bookmarks included); a 410 Gone relists; any other failure waits with exponential backoff
and full jitter (0.5 s doubling to 30 s) before trying again.
"""

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from portal.kube import watch as kube
from portal.kube.apply import KubeError, PermanentKubeError

log = logging.getLogger(__name__)

BACKOFF_START = 0.5
BACKOFF_MAX = 30.0


@dataclass(frozen=True)
class Change:
    collection: str  # e.g. "batch/v1/Job"
    type: str  # ADDED | MODIFIED | DELETED | SYNC | BOOKMARK | RELISTED
    obj: dict[str, Any]
    resource_version: str
    received: float  # time.time() when it arrived


@dataclass(frozen=True)
class Collection:
    api_version: str
    kind: str
    label_selector: str = ""
    # Client-side filter (e.g. tenant namespaces only) for collections the server cannot select.
    accept: Callable[[dict[str, Any]], bool] | None = None
    # Watch from the stored resourceVersion without listing first (Events: replaying them is
    # safe, the timeline folds repeats); cached collections always list to fill the cache.
    resume_without_list: bool = False

    @property
    def key(self) -> str:
        return f"{self.api_version}/{self.kind}"


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


class Informer(threading.Thread):
    def __init__(
        self,
        collection: Collection,
        sink: Callable[[Change], None],
        *,
        stop: threading.Event,
        resource_version: str = "",
        timeout_seconds: int = 300,
    ):
        super().__init__(name=f"informer-{collection.kind}", daemon=True)
        self.collection = collection
        self.sink = sink
        self.stop_event = stop
        self.resource_version = resource_version
        self.timeout_seconds = timeout_seconds
        self.known: set[tuple[str, str]] = set()
        self.synced = threading.Event()
        self.relists = 0
        self.reconnects = 0
        self.last_error = ""  # the last failure's message, "" once the collection is read

    def _emit(self, kind: str, obj: dict[str, Any], rv: str) -> None:
        self.sink(Change(self.collection.key, kind, obj, rv, time.time()))

    def relist(self) -> None:
        c = self.collection
        items, rv = kube.list_page(c.api_version, c.kind, label_selector=c.label_selector)
        if c.accept is not None:
            items = [i for i in items if c.accept(i)]
        seen = set()
        for item in items:
            seen.add(_key(item))
            self._emit("SYNC", item, rv)
        for namespace, name in self.known - seen:
            gone = {
                "apiVersion": c.api_version,
                "kind": c.kind,
                "metadata": {"namespace": namespace, "name": name},
            }
            self._emit("DELETED", gone, rv)
        self.known = seen
        self.resource_version = rv
        self.relists += 1
        self._emit("RELISTED", {}, rv)
        self.synced.set()

    def watch_once(self) -> None:
        c = self.collection
        for kind, obj in kube.watch(
            c.api_version,
            c.kind,
            resource_version=self.resource_version,
            label_selector=c.label_selector,
            timeout_seconds=self.timeout_seconds,
        ):
            if self.stop_event.is_set():
                return
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            if kind == "BOOKMARK":
                if rv:
                    self.resource_version = rv
                    self._emit("BOOKMARK", {}, rv)
                continue
            if c.accept is not None and not c.accept(obj):
                continue
            if kind == "DELETED":
                self.known.discard(_key(obj))
            else:
                self.known.add(_key(obj))
            if rv:
                self.resource_version = rv
            self._emit(kind, obj, self.resource_version)

    def run(self) -> None:
        backoff = BACKOFF_START
        need_list = not (self.collection.resume_without_list and self.resource_version)
        if not need_list:
            self.synced.set()
        while not self.stop_event.is_set():
            try:
                if need_list:
                    self.relist()
                    need_list = False
                self.watch_once()
                backoff = BACKOFF_START  # a watch that ended normally (timeout) is healthy
                self.last_error = ""
            except kube.WatchExpired:
                log.info("%s: history expired; relisting", self.collection.key)
                need_list = True
            except KubeError as exc:
                self.reconnects += 1
                delay = random.uniform(0, backoff)  # noqa: S311 - retry jitter, not a secret
                if isinstance(exc, PermanentKubeError) and exc.message != self.last_error:
                    # A refusal (e.g. a missing permission) does not pass by itself: say it
                    # loudly once, then keep retrying quietly until it is fixed.
                    log.error("%s: %s; retrying with backoff", self.collection.key, exc.message)
                else:
                    log.info("%s: %s; retrying in %.1fs", self.collection.key, exc, delay)
                self.last_error = exc.message
                self.stop_event.wait(delay)
                backoff = min(backoff * 2, BACKOFF_MAX)
            except Exception:  # a bug must not kill the thread silently
                log.exception("%s: unexpected error", self.collection.key)
                self.stop_event.wait(random.uniform(0, backoff))  # noqa: S311 - jitter
                backoff = min(backoff * 2, BACKOFF_MAX)
