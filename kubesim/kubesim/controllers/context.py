"""What every in-process controller is given: the server, its store, the simulated clock, the
command-line options and the cluster description."""

from __future__ import annotations

import argparse
import asyncio
import sys
import traceback
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubesim.cluster import Cluster


@dataclass
class ControllerContext:
    server: Any  # kubesim.api.server.KubeServer
    store: Any  # kubesim.api.store.Store
    clock: Any  # kubesim.clock.SimClock
    options: argparse.Namespace
    cluster: Cluster
    tasks: list[asyncio.Task] = field(default_factory=list)
    # Shared controller state by name (e.g. "kubelet": the Kubelet, used by faults and dcgm).
    extras: dict[str, Any] = field(default_factory=dict)

    def spawn(self, coro: Coroutine, name: str) -> asyncio.Task:
        """Start a long-running controller task and remember it so shutdown can cancel it."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.append(task)
        return task


async def follow(
    store, api_version: str, kind: str, handler, *, namespace: str | None = None
) -> None:
    """Feed handler(event_type, obj) with every change of a kind, forever.

    Starts with the current objects as ADDED. When the store closes the subscription (the
    close-watches fault, or an overflow), it resubscribes and relists, sending DELETED for the
    objects that vanished in between, as an informer's resync does. Handlers run synchronously.
    """
    known: set[tuple[str, str]] = set()
    while True:
        subscription = store.watch(api_version, kind, namespace)
        try:
            current = store.list(api_version, kind, namespace)
            seen = set()
            for obj in current:
                key = (obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
                seen.add(key)
                _call(handler, "ADDED", obj)
            for key in known - seen:
                _call(
                    handler,
                    "DELETED",
                    {
                        "apiVersion": api_version,
                        "kind": kind,
                        "metadata": {"namespace": key[0], "name": key[1]},
                    },
                )
            known = seen
            async for event_type, obj in subscription:
                key = (obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
                if event_type == "DELETED":
                    known.discard(key)
                else:
                    known.add(key)
                _call(handler, event_type, obj)
        finally:
            subscription.close()
        await asyncio.sleep(0.05)


def _call(handler, event_type: str, obj: dict) -> None:
    try:
        handler(event_type, obj)
    except Exception:  # a bug in one event must not stop the controller
        print(
            f"kubesim: controller error on {event_type} {obj.get('kind')} "
            f"{obj['metadata'].get('namespace')}/{obj['metadata'].get('name')}",
            file=sys.stderr,
        )
        traceback.print_exc()
