"""The staff overview after a Volcano gang ends: the project's queues come from the portal's own
manifests, kubesim's Volcano controller runs the gang to completion, and the watcher stores what
the queues' status says. Nothing runs any more, so nothing may be "in use" or "borrowed"."""

from decimal import Decimal

import pytest
from kubesim.controllers.volcano.controller import VolcanoController

from jobs.console.overview import exchanges, pool_overview
from jobs.watcher.queues import store_usage
from quotas.manifests import (
    DepartmentSpec,
    PoolSpec,
    ProjectSpec,
    QuotaAmount,
    volcano_department_queues,
    volcano_project_queues,
)
from tests.factories import GpuPoolFactory, ProjectFactory, ProjectQuotaFactory
from tests.kubesim.queues.harness import make_ctx

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu"
QUEUE_API = "scheduling.volcano.sh/v1beta1"


def _cluster():
    ctx = make_ctx("volcano")
    for i in range(2):
        capacity = {"cpu": "64", "memory": "512Gi", GPU: "8", "pods": "110"}
        ctx.store.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"gpu-{i}"},
                "status": {
                    "allocatable": capacity,
                    "capacity": capacity,
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
    controller = VolcanoController(ctx)
    controller.install()
    return ctx.store, controller


def _gang(store, namespace, queue):
    template = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "pytorch", "resources": {"limits": {GPU: "4"}}}],
        }
    }
    store.create(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "gang", "namespace": namespace},
            "spec": {"queue": queue, "tasks": [{"name": "w", "replicas": 2, "template": template}]},
        },
        namespace=namespace,
    )


def _set_phases(store, namespace, phase):
    for pod in store.list("v1", "Pod", namespace, label_selector="volcano.sh/job-name=gang"):
        store.patch(
            "v1",
            "Pod",
            namespace,
            pod["metadata"]["name"],
            {"status": {"phase": phase}},
            subresource="status",
        )


def _watch_queues(store):
    """What the watcher does with the Volcano Queues it lists."""
    queues = store.list(QUEUE_API, "Queue", None)
    store_usage({}, {("", q["metadata"]["name"]): q for q in queues})


def test_overview_shows_nothing_in_use_or_borrowed_once_a_volcano_gang_completed():
    # vision is guaranteed 4 GPUs and borrows from nlp (8) in their department while its 8-GPU
    # gang runs.
    vision = ProjectFactory(slug="vision")
    nlp = ProjectFactory(slug="nlp", department=vision.department)
    pool = GpuPoolFactory(slug="h100", node_count=2)
    ProjectQuotaFactory(project=vision, pool=pool, nominal=4)
    ProjectQuotaFactory(project=nlp, pool=pool, nominal=8)
    pool_spec = PoolSpec("h100", {}, (), 16, "1", "1Gi")
    department = vision.department.slug
    specs = (
        ProjectSpec("vision", "default", department, (QuotaAmount("h100", "gpu", 4, None),)),
        ProjectSpec("nlp", "nlp", department, (QuotaAmount("h100", "gpu", 8, None),)),
    )
    store, controller = _cluster()
    for queue in volcano_department_queues(DepartmentSpec(department), specs, (pool_spec,)):
        store.create(queue)
    controller.reconcile()
    for spec in specs:
        for queue in volcano_project_queues(spec, (pool_spec,), specs):
            store.create(queue)
    controller.reconcile()
    leaf = "gp-vision.h100"

    _gang(store, "default", leaf)
    controller.reconcile()
    controller.reconcile()
    _set_phases(store, "default", "Running")
    controller.reconcile()
    _watch_queues(store)
    (h100,) = pool_overview()
    assert h100.in_use_gpus == 8
    borrowers, _ = exchanges()
    assert [(b.project, b.amount) for b in borrowers] == [("vision", Decimal(4))]

    _set_phases(store, "default", "Succeeded")
    controller.reconcile()
    controller.reconcile()
    _watch_queues(store)
    (h100,) = pool_overview()
    assert h100.in_use_gpus == 0
    assert exchanges() == ([], [])
