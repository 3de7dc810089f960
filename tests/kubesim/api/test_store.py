"""The Store and KubeServer used in-process, as the controllers use them (no HTTP client)."""

import asyncio

import aiohttp
import pytest
from aiohttp import web
from kubesim.api import errors, selectors
from kubesim.api.builtins import register_builtins
from kubesim.api.crds import CrdManager, builtin_crds
from kubesim.api.registry import Registry
from kubesim.api.server import KubeServer
from kubesim.api.store import Store
from kubesim.clock import SimClock


@pytest.fixture
def store() -> Store:
    registry = Registry()
    register_builtins(registry)
    store = Store(registry, SimClock(), history_size=50)
    CrdManager(store).create_all(builtin_crds())
    store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    return store


def _cm(name: str, **data) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": data,
    }


def test_returned_objects_are_copies(store):
    created = store.create(_cm("a", k="1"))
    created["data"]["k"] = "changed"
    assert store.get("v1", "ConfigMap", "default", "a")["data"] == {"k": "1"}
    listed = store.list("v1", "ConfigMap", "default")
    listed[0]["data"]["k"] = "changed"
    assert store.get("v1", "ConfigMap", "default", "a")["data"] == {"k": "1"}


def test_admission_hooks_can_deny_and_mutate(store):
    def hook(operation, new, old):
        if operation == "CREATE" and new["metadata"]["name"] == "denied":
            raise errors.ApiError(403, "Forbidden", 'admission webhook "x" denied the request: no')
        if operation in ("CREATE", "UPDATE"):
            new.setdefault("data", {})["stamped"] = "yes"

    store.add_admission_hook("v1", "ConfigMap", hook)
    with pytest.raises(errors.ApiError) as excinfo:
        store.create(_cm("denied"))
    assert excinfo.value.code == 403
    assert store.create(_cm("ok"))["data"] == {"stamped": "yes"}
    assert store.try_get("v1", "ConfigMap", "default", "denied") is None


def test_subscription_feeds_changes_in_order(store):
    async def run():
        sub = store.watch("v1", "ConfigMap", "default")
        everything = store.watch()
        store.create(_cm("w"))
        store.patch("v1", "ConfigMap", "default", "w", {"data": {"x": "1"}})
        store.delete("v1", "ConfigMap", "default", "w")
        seen = [await anext(sub) for _ in range(3)]
        first_any = await anext(everything)
        sub.close()
        everything.close()
        return seen, first_any

    seen, first_any = asyncio.run(run())
    assert [(t, o["metadata"]["name"]) for t, o in seen] == [
        ("ADDED", "w"),
        ("MODIFIED", "w"),
        ("DELETED", "w"),
    ]
    assert seen[1][1]["data"] == {"x": "1"}
    assert first_any[1]["kind"] == "ConfigMap"


def test_history_is_bounded(store):
    first_rv = store.resource_version
    for i in range(60):
        store.create(_cm(f"h{i}"))
    assert store.history_since(first_rv) is None  # older than the 50 kept events
    recent = store.history_since(store.resource_version - 5)
    assert [e.obj["metadata"]["name"] for e in recent] == [f"h{i}" for i in range(55, 60)]


def test_graceful_pod_deletion_waits_for_the_kubelet(store):
    store.graceful_pod_deletion = True
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
    }
    store.create(pod)
    pending = store.delete("v1", "Pod", "default", "p", grace=True)
    assert pending["metadata"]["deletionTimestamp"]
    assert pending["metadata"]["deletionGracePeriodSeconds"] == 30
    # the kubelet confirms with a grace-less delete
    store.delete("v1", "Pod", "default", "p")
    assert store.try_get("v1", "Pod", "default", "p") is None


def test_dump_and_load_round_trip(store):
    made = store.create(_cm("persisted", a="b"))
    data = store.dump()
    registry = Registry()
    register_builtins(registry)
    restored = Store(registry, SimClock())
    manager = CrdManager(restored)
    restored.load(data, manager.install)
    again = restored.get("v1", "ConfigMap", "default", "persisted")
    assert again["metadata"]["uid"] == made["metadata"]["uid"]
    assert restored.resource_version == store.resource_version
    assert restored.registry.by_kind("kueue.x-k8s.io/v1beta2", "ClusterQueue").is_crd


def test_server_extension_points(store):
    async def run():
        server = KubeServer(store, token="t0k")
        port = await server.start("127.0.0.1", 0)

        async def hello(request):
            return web.json_response({"name": request.match_info["name"]})

        async def pod_log(request, namespace, name, rest):
            return web.Response(text=f"log of {namespace}/{name}")

        # routes and handlers may be added after the server started (controllers do)
        server.add_route("GET", "/apis/visibility.example.com/v1/things/{name}", hello)
        server.set_subresource_handler("v1", "Pod", "log", pod_log)
        server.add_discovery_group(
            "visibility.example.com",
            "v1",
            [
                {
                    "name": "things",
                    "singularName": "thing",
                    "namespaced": False,
                    "kind": "Thing",
                    "verbs": ["get"],
                }
            ],
        )
        store.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            }
        )
        base = f"http://127.0.0.1:{port}"
        headers = {"Authorization": "Bearer t0k"}
        async with aiohttp.ClientSession(headers=headers) as session:
            async with session.get(base + "/apis/visibility.example.com/v1/things/x") as r:
                thing = (r.status, await r.json())
            async with session.get(base + "/api/v1/namespaces/default/pods/p/log") as r:
                log = (r.status, await r.text())
            async with session.get(base + "/apis/visibility.example.com/v1") as r:
                discovery = await r.json()
            async with session.get(base + "/apis") as r:
                groups = [g["name"] for g in (await r.json())["groups"]]
            async with (
                aiohttp.ClientSession() as anonymous,
                anonymous.get(base + "/apis/visibility.example.com/v1/things/x") as r,
            ):
                unauthorized = r.status
        await server.stop()
        return thing, log, discovery, groups, unauthorized

    thing, log, discovery, groups, unauthorized = asyncio.run(run())
    assert thing == (200, {"name": "x"})
    assert log == (200, "log of default/p")
    assert discovery["resources"][0]["name"] == "things"
    assert "visibility.example.com" in groups
    assert unauthorized == 401


def test_a_watcher_that_falls_behind_is_closed_without_blocking_writers(store):
    from kubesim.api.watch import Watcher

    rtype = store.registry.by_kind("v1", "ConfigMap")
    slow = Watcher(rtype.store_key, "default", max_queue=10)
    fine = Watcher(rtype.store_key, "default", max_queue=1000)
    store.add_watcher(slow)
    store.add_watcher(fine)
    for i in range(25):
        store.create(_cm(f"burst{i}"))  # never waits for any reader
    assert slow.closed
    assert slow.overflowed
    assert not fine.closed
    assert len(fine.queue) == 25
    assert store.watcher_count() == 1  # the closed watcher was dropped from the fan-out
    fine.close()


def test_a_label_selected_namespace_list_sees_that_namespace_alone_in_key_order(store):
    """The same label on many objects in another namespace: a namespace's list scans that
    namespace (fewer objects than the label index) and still answers the same, in name order."""
    store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "big"}})
    for i in range(5):
        cm = _cm(f"big-{i}")
        cm["metadata"].update(namespace="big", labels={"owner": "portal"})
        store.create(cm)
    for name in ("b", "a", "c"):
        cm = _cm(name)
        cm["metadata"]["labels"] = {"owner": "portal", "tier": name}
        store.create(cm)
    store.create(_cm("unlabelled"))
    rtype = store.registry.by_kind("v1", "ConfigMap")

    def names(namespace, selector, start_after=None):
        reqs = selectors.to_requirements(selector)
        picked = store.select(rtype, namespace, reqs, start_after=start_after)
        return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in picked]

    assert names("default", "owner=portal") == [("default", n) for n in ("a", "b", "c")]
    assert names("default", "owner=portal", ("default", "a")) == [
        ("default", "b"),
        ("default", "c"),
    ]
    assert names("default", "owner=portal,tier=b") == [("default", "b")]
    assert names("nowhere", "owner=portal") == []
    # Cluster-wide, through the label index: both namespaces, by (namespace, name).
    assert names(None, "owner=portal")[:4] == [
        ("big", "big-0"),
        ("big", "big-1"),
        ("big", "big-2"),
        ("big", "big-3"),
    ]
    assert len(names(None, "owner=portal")) == 8


def test_label_index_pages_see_objects_labelled_between_pages(store):
    """The sorted label index a paged list reuses is dropped when labels change."""
    rtype = store.registry.by_kind("v1", "ConfigMap")
    reqs = selectors.to_requirements("owner=portal")
    for name in ("a", "c"):
        cm = _cm(name)
        cm["metadata"]["labels"] = {"owner": "portal"}
        store.create(cm)

    def page(start_after=None):
        picked = store.select(rtype, None, reqs, start_after=start_after, limit=1)
        return [o["metadata"]["name"] for o in picked]

    assert page() == ["a"]
    late = _cm("b")
    late["metadata"]["labels"] = {"owner": "portal"}
    store.create(late)
    assert page(("default", "a")) == ["b"]
    store.delete("v1", "ConfigMap", "default", "c")
    assert page(("default", "b")) == []
