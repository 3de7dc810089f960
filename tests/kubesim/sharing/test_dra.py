"""kubesim's DRA with a simulated NVIDIA DRA driver (issue 26), through the official client's
ResourceV1Api: ResourceSlices with the driver's attribute names, the NVIDIA DeviceClasses, claims
from templates allocated by CEL selectors, reservedFor, deallocation and FailedScheduling."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client
from kubesim.testing import wait_for

pytestmark = pytest.mark.kubesim

KUBESIM_OPTIONS = {"cluster": Path(__file__).with_name("cluster.yaml"), "speed": 50.0}
TOLERATE = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
MEM = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('{}')) >= 0"


@pytest.fixture(scope="module")
def apis(kubesim_module):
    api = kubesim_module.api_client()
    yield client.CoreV1Api(api), client.ResourceV1Api(api)
    api.close()


def template(resource, namespace, name, device_class, expressions):
    resource.create_namespaced_resource_claim_template(
        namespace,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": device_class,
                                    "count": 1,
                                    "selectors": [{"cel": {"expression": e}} for e in expressions],
                                },
                            }
                        ]
                    }
                }
            },
        },
    )


def claim_pod(core, namespace, name, template_name):
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "tolerations": TOLERATE,
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template_name}],
                "containers": [
                    {
                        "name": "trainer",
                        "image": "pytorch/pytorch:2.4.0",
                        "command": ["sh", "-c", "sleep 100000"],
                        "resources": {"claims": [{"name": "gpu"}]},
                    }
                ],
            },
        },
    )


def test_slices_and_device_classes_as_the_driver_publishes_them(apis):
    _core, resource = apis
    classes = {c.metadata.name for c in resource.list_device_class().items}
    assert {"gpu.nvidia.com", "mig.nvidia.com"} <= classes
    (slice_,) = [s for s in resource.list_resource_slice().items if s.spec.node_name == "dra-0"]
    assert slice_.spec.driver == "gpu.nvidia.com"
    assert slice_.spec.pool.name == "dra-0"
    devices = {d.name: d for d in slice_.spec.devices}
    gpu = devices["gpu-0"]
    assert gpu.attributes["productName"].string == "NVIDIA H100 80GB HBM3"
    assert gpu.attributes["architecture"].string == "Hopper"
    assert gpu.attributes["cudaComputeCapability"].version == "9.0.0"
    assert gpu.attributes["uuid"].string.startswith("GPU-")
    assert gpu.capacity["memory"].value == "81559Mi"
    mig = devices["gpu-1-mig-1g10gb-19-0"]
    assert mig.attributes["type"].string == "mig"
    assert mig.attributes["profile"].string == "1g.10gb"
    assert len(devices) == 8  # one whole GPU and seven 1g.10gb devices


def test_claim_by_memory_is_allocated_to_the_80gb_gpu_and_released(apis):
    core, resource = apis
    ns = "dra-mem"
    core.create_namespace({"metadata": {"name": ns}})
    template(resource, ns, "big", "gpu.nvidia.com", [MEM.format("40Gi")])
    claim_pod(core, ns, "trainer", "big")
    wait_for(
        lambda: core.read_namespaced_pod("trainer", ns).status.phase == "Running",
        timeout=30,
        message="the claim pod to run",
    )
    pod = core.read_namespaced_pod("trainer", ns)
    assert pod.spec.node_name == "dra-0"
    claim_name = pod.status.resource_claim_statuses[0].resource_claim_name
    claim = resource.read_namespaced_resource_claim(claim_name, ns)
    (result,) = claim.status.allocation.devices.results
    assert (result.driver, result.pool, result.device) == ("gpu.nvidia.com", "dra-0", "gpu-0")
    assert [r.name for r in claim.status.reserved_for] == ["trainer"]
    # a second one finds no free device of ≥ 40 GiB (the MIG devices have 10 GB)
    claim_pod(core, ns, "second", "big")

    def failed_scheduling():
        events = core.list_namespaced_event(ns, field_selector="involvedObject.name=second").items
        return [e.message for e in events if e.reason == "FailedScheduling"]

    wait_for(failed_scheduling, timeout=30, message="FailedScheduling for the second pod")
    assert "cannot allocate all claims" in failed_scheduling()[0]
    core.delete_namespaced_pod("trainer", ns, grace_period_seconds=0)
    wait_for(
        lambda: (
            claim_name
            not in {c.metadata.name for c in resource.list_namespaced_resource_claim(ns).items}
            or core.read_namespaced_pod("second", ns).status.phase == "Running"
        ),
        timeout=30,
        message="the first claim to go and the second pod to get the GPU",
    )
    wait_for(
        lambda: core.read_namespaced_pod("second", ns).status.phase == "Running",
        timeout=30,
        message="the second pod to run once the GPU is free",
    )


def test_mig_profile_claim_gets_a_mig_device(apis):
    core, resource = apis
    ns = "dra-mig"
    core.create_namespace({"metadata": {"name": ns}})
    template(
        resource,
        ns,
        "slice",
        "mig.nvidia.com",
        ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"],
    )
    claim_pod(core, ns, "small", "slice")
    wait_for(
        lambda: core.read_namespaced_pod("small", ns).status.phase == "Running",
        timeout=30,
        message="the MIG claim pod to run",
    )
    pod = core.read_namespaced_pod("small", ns)
    claim = resource.read_namespaced_resource_claim(
        pod.status.resource_claim_statuses[0].resource_claim_name, ns
    )
    assert claim.status.allocation.devices.results[0].device.startswith("gpu-1-mig-1g10gb-")
