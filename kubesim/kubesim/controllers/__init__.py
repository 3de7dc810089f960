"""The simulated cluster: nodes, scheduler, Job controller, kubelets, dcgm-exporter, faults, and
the queueing controllers (Kueue, Volcano) that run inside the kubesim process."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import sys

from kubesim.controllers.context import ControllerContext

# Queue controllers owned by the QUEUES part; each module exposes `start(ctx)`.
QUEUE_CONTROLLERS = (
    "kubesim.controllers.kueue.controller",
    "kubesim.controllers.volcano.controller",
    "kubesim.controllers.kai.controller",
)


async def start(server, options: argparse.Namespace) -> list[asyncio.Task]:
    """Build the nodes of the cluster description and start every controller."""
    from kubesim import cluster as cluster_mod
    from kubesim.controllers import (
        disruption,
        dra,
        endpoints,
        endpointslices,
        faults,
        jobs,
        scheduler,
        storage,
        workloads,
    )
    from kubesim.controllers.apiserver import admission, apis, defaults, pod_admission
    from kubesim.controllers.node import dcgm, kubelet

    path = getattr(options, "cluster", None)
    try:
        cluster = cluster_mod.load_cluster(path) if path else cluster_mod.default_cluster()
    except cluster_mod.ClusterSpecError as exc:
        print(f"kubesim: invalid cluster description {path}: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    if getattr(options, "default_duration", None) is None:
        options.default_duration = 60.0
    ctx = ControllerContext(
        server=server,
        store=server.store,
        clock=server.clock,
        options=options,
        cluster=cluster,
    )
    admission.install(ctx)
    pod_admission.install(ctx)
    storage.install(ctx)
    disruption.install(ctx)
    apis.install(ctx)
    endpoints.start(ctx)
    endpointslices.install(ctx)
    defaults.install(ctx)
    cluster_mod.install(ctx)
    scheduler.start(ctx)
    jobs.start(ctx)
    workloads.start(ctx)
    kubelet.start(ctx)
    dcgm.start(ctx)
    dra.start(ctx)
    faults.start(ctx)
    for module_name in QUEUE_CONTROLLERS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            print(f"kubesim: {module_name} not available, not started", file=sys.stderr)
            continue
        result = module.start(ctx)
        if inspect.iscoroutine(result):
            result = await result
        if isinstance(result, asyncio.Task):
            ctx.tasks.append(result)
        elif isinstance(result, list | tuple):
            ctx.tasks.extend(t for t in result if isinstance(t, asyncio.Task))
    # Kueue's pod integration (its own module, beside the Job integration in kueue.py)
    from kubesim.controllers.kueue import pods as kueue_pods

    kueue_pods.install(ctx)
    # A task may be appended twice (returned and spawned); keep each once.
    unique: list[asyncio.Task] = []
    for task in ctx.tasks:
        if task not in unique:
            unique.append(task)
    return unique
