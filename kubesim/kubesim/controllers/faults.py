"""Cluster fault injection (admin routes; bearer token required like every kubesim route):

POST /kubesim/nodes/NAME/not-ready   the node is lost: its kubelet stops posting status
                                     (Ready=Unknown, NodeStatusUnknown), the node controller
                                     taints it node.kubernetes.io/unreachable (NoSchedule and
                                     NoExecute), and its running pods fail (DisruptionTarget,
                                     containers terminated 137 ContainerStatusUnknown)
POST /kubesim/nodes/NAME/ready       the kubelet is back: Ready=True, taints removed
POST /kubesim/namespaces/NS/pods/NAME/fail   body (optional) {"exitCode": 1, "reason": "Error",
                                     "message": "..."}: the pod's containers exit now
POST /kubesim/xid                    body {"node": NAME, "gpu": INDEX, "xid": 79,
                                     "failPod": false}: record an XID on that GPU (dcgm-exporter
                                     shows it in DCGM_FI_DEV_XID_ERRORS); an XID the device
                                     plugin does not treat as an application error marks the
                                     GPU (or all its MIG instances) unhealthy, which lowers the
                                     node's allocatable; "failPod" also fails the pod holding it
                                     (exit code 1). xid 0 clears the error and the GPU is healthy
                                     again.
"""

from __future__ import annotations

import json

from aiohttp import web

from kubesim.api.errors import ApiError, bad_request, not_found
from kubesim.controllers import events
from kubesim.controllers.node.kubelet import APPLICATION_XIDS


async def _body(request: web.Request) -> dict:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise bad_request("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    return body


class Faults:
    def __init__(self, ctx):
        self.ctx = ctx
        self.store = ctx.store

    @property
    def kubelet(self):
        return self.ctx.extras["kubelet"]

    def _node(self, name: str):
        spec = self.ctx.cluster.node(name)
        if spec is None or self.store.try_get("v1", "Node", None, name) is None:
            raise not_found("nodes", name)
        return spec

    async def not_ready(self, request: web.Request) -> web.Response:
        name = request.match_info["node"]
        self._node(name)
        pods = [
            p["metadata"]["namespace"] + "/" + p["metadata"]["name"]
            for p in self.store.list("v1", "Pod", field_selector=f"spec.nodeName={name}")
            if (p.get("status") or {}).get("phase") in ("Pending", "Running")
            and (p["metadata"].get("annotations") or {}).get("kubesim.dev/system-pod") != "true"
        ]
        self.kubelet.set_node_ready(name, False)
        node = self.store.get("v1", "Node", None, name)
        events.record(
            self.store,
            node,
            "NodeNotReady",
            f"Node {name} status is now: NodeNotReady",
            component="node-controller",
        )
        return web.json_response({"node": name, "ready": False, "failedPods": sorted(pods)})

    async def ready(self, request: web.Request) -> web.Response:
        name = request.match_info["node"]
        self._node(name)
        self.kubelet.set_node_ready(name, True)
        node = self.store.get("v1", "Node", None, name)
        events.record(
            self.store,
            node,
            "NodeReady",
            f"Node {name} status is now: NodeReady",
            component="kubelet",
            host=name,
        )
        return web.json_response({"node": name, "ready": True})

    async def fail_pod(self, request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        name = request.match_info["name"]
        body = await _body(request)
        if self.store.try_get("v1", "Pod", namespace, name) is None:
            raise not_found("pods", name)
        exit_code = body.get("exitCode", 1)
        if not isinstance(exit_code, int) or not 0 <= exit_code <= 255:
            raise bad_request("exitCode: an integer from 0 to 255")
        reason = str(body.get("reason") or ("Completed" if exit_code == 0 else "Error"))
        message = str(body.get("message") or "")
        if not self.kubelet.fail_pod(namespace, name, exit_code, reason, message):
            raise ApiError(
                409,
                "Conflict",
                f'pod "{name}" is not running on a kubesim node '
                "(not yet started, or already finished)",
            )
        return web.json_response({"namespace": namespace, "pod": name, "exitCode": exit_code})

    async def xid(self, request: web.Request) -> web.Response:
        body = await _body(request)
        node_name = body.get("node")
        if not isinstance(node_name, str):
            raise bad_request("node: the node name is required")
        spec = self._node(node_name)
        index = body.get("gpu", 0)
        if not isinstance(index, int) or not 0 <= index < len(spec.gpus):
            raise bad_request(f"gpu: node {node_name} has GPUs 0-{len(spec.gpus) - 1}")
        code = body.get("xid", 79)
        if not isinstance(code, int) or code < 0:
            raise bad_request("xid: a non-negative integer")
        gpu = spec.gpus[index]
        gpu.xid = code
        devices = self.ctx.cluster.devices(node_name)
        uuids = [d.uuid for d in gpu.instances] if gpu.mig_enabled else [gpu.uuid]
        healthy = code == 0 or code in APPLICATION_XIDS
        for device_uuid in uuids:
            if device_uuid in devices:
                devices[device_uuid].healthy = healthy
        self.kubelet.write_node_status(node_name)
        failed = []
        if body.get("failPod") and code:
            for device_uuid in uuids:
                holder = self.kubelet.devices.holder(node_name, device_uuid)
                if holder and self.kubelet.fail_pod(
                    holder[0], holder[1], 1, "Error", f"Xid {code} on GPU {gpu.uuid}"
                ):
                    failed.append(f"{holder[0]}/{holder[1]}")
        return web.json_response(
            {
                "node": node_name,
                "gpu": index,
                "uuid": gpu.uuid,
                "xid": code,
                "healthy": healthy,
                "failedPods": failed,
            }
        )


def start(ctx) -> Faults:
    faults = Faults(ctx)
    server = ctx.server
    server.add_route("POST", "/kubesim/nodes/{node}/not-ready", faults.not_ready)
    server.add_route("POST", "/kubesim/nodes/{node}/ready", faults.ready)
    server.add_route("POST", "/kubesim/namespaces/{namespace}/pods/{name}/fail", faults.fail_pod)
    server.add_route("POST", "/kubesim/xid", faults.xid)
    return faults
