"""What kube-apiserver adds to a new pod before the scheduler sees it: the API defaults for pod and
container fields, the ServiceAccount admission's default account, and the DefaultTolerationSeconds
admission plugin's NoExecute tolerations for not-ready and unreachable nodes (300 s). Also the
pods/eviction subresource (`kubectl drain`): the pod gets DisruptionTarget=True
(EvictionByEvictionAPI) and is deleted gracefully, unless a PodDisruptionBudget forbids it
(429, disruption.py)."""

from __future__ import annotations

from aiohttp import web

from kubesim.api import protobuf
from kubesim.api.errors import ApiError, bad_request, not_found
from kubesim.clock import rfc3339
from kubesim.controllers import disruption

DEFAULT_TOLERATION_SECONDS = 300
NODE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _image_pull_policy(image: str) -> str:
    last = (image or "").split("@")[0].rsplit("/", 1)[-1]
    if "@" in (image or ""):
        return "IfNotPresent"
    if ":" not in last or last.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def _default_container(container: dict) -> None:
    container.setdefault("imagePullPolicy", _image_pull_policy(container.get("image", "")))
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")


def pod_defaults(operation: str, pod: dict, old: dict | None) -> None:
    if operation != "CREATE":
        return
    spec = pod.setdefault("spec", {})
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            _default_container(container)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("enableServiceLinks", True)
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = account
    spec["serviceAccount"] = account
    tolerations = spec.get("tolerations") or []
    for key in NODE_TAINTS:
        if not any(
            (t.get("key") == key or (not t.get("key") and t.get("operator") == "Exists"))
            and t.get("effect") in (None, "", "NoExecute")
            for t in tolerations
        ):
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
                }
            )
    spec["tolerations"] = tolerations


def eviction_handler(store):
    async def handle(request: web.Request, namespace: str, name: str, rest: str = ""):
        if request.method != "POST":
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        raw = await request.read()
        try:
            # kubectl drain sends the Eviction as protobuf
            body = protobuf.decode_body(raw, request.content_type) if raw.strip() else {}
        except ValueError:
            raise bad_request("the body of an Eviction could not be decoded") from None
        pod = store.try_get("v1", "Pod", namespace, name)
        if pod is None:
            raise not_found("pods", name)
        blocked = disruption.eviction_blocked(store, pod)
        if blocked is not None:
            raise blocked
        options = body.get("deleteOptions") or {}
        grace = options.get("gracePeriodSeconds")
        if not pod["metadata"].get("deletionTimestamp"):
            conditions = [
                c
                for c in (pod.get("status") or {}).get("conditions") or []
                if c.get("type") != "DisruptionTarget"
            ]
            conditions.append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "EvictionByEvictionAPI",
                    "message": "Eviction API: evicting",
                    "lastProbeTime": None,
                    "lastTransitionTime": rfc3339(store.clock.now()),
                }
            )
            store.patch(
                "v1",
                "Pod",
                namespace,
                name,
                {"status": {"conditions": conditions}},
                subresource="status",
            )
            store.delete(
                "v1", "Pod", namespace, name, grace=grace is None or grace > 0, grace_seconds=grace
            )
        return web.json_response(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            },
            status=201,
        )

    return handle


def install(ctx) -> None:
    ctx.store.add_admission_hook("v1", "Pod", pod_defaults)
    ctx.server.set_subresource_handler("v1", "Pod", "eviction", eviction_handler(ctx.store))
