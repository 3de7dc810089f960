"""What every in-process controller is given: the server, its store, the simulated clock, the
command-line options and the cluster description."""

from __future__ import annotations

import argparse
import asyncio
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

    def spawn(self, coro: Coroutine, name: str) -> asyncio.Task:
        """Start a long-running controller task and remember it so shutdown can cancel it."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.append(task)
        return task
