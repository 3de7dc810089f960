"""Watches through kubernetes.watch.Watch: events, filters, bookmarks, 410 Gone and resume."""

import threading
import time

import pytest
from kubernetes import watch
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.kubesim


def _later(action, delay: float = 0.3) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(delay), action()))
    thread.start()
    return thread


def _collect(stream, count: int) -> list[tuple[str, str]]:
    seen = []
    for event in stream:
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) >= count:
            break
    return seen


def test_watch_from_a_resource_version_streams_changes(core, namespace):
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version

    def changes():
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "w"}})
        core.patch_namespaced_config_map("w", namespace, {"data": {"k": "v"}})
        core.delete_namespaced_config_map("w", namespace)

    thread = _later(changes)
    w = watch.Watch()
    seen = _collect(
        w.stream(
            core.list_namespaced_config_map, namespace, resource_version=rv, timeout_seconds=10
        ),
        3,
    )
    w.stop()
    thread.join()
    assert seen == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


def test_watch_without_resource_version_starts_with_the_current_objects(core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "old1"}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "old2"}})
    w = watch.Watch()
    seen = _collect(w.stream(core.list_namespaced_config_map, namespace, timeout_seconds=5), 2)
    w.stop()
    assert seen == [("ADDED", "old1"), ("ADDED", "old2")]


def test_replay_from_an_older_resource_version(core, namespace):
    start = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "r1"}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "r2"}})
    w = watch.Watch()
    seen = _collect(
        w.stream(
            core.list_namespaced_config_map, namespace, resource_version=start, timeout_seconds=5
        ),
        2,
    )
    w.stop()
    assert seen == [("ADDED", "r1"), ("ADDED", "r2")]


def test_label_filtered_watch_sees_objects_leave_the_selection(core, namespace):
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "sel", "labels": {"keep": "yes"}}}
    )
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    thread = _later(
        lambda: core.patch_namespaced_config_map(
            "sel", namespace, {"metadata": {"labels": {"keep": "no"}}}
        )
    )
    w = watch.Watch()
    seen = _collect(
        w.stream(
            core.list_namespaced_config_map,
            namespace,
            resource_version=rv,
            label_selector="keep=yes",
            timeout_seconds=5,
        ),
        1,
    )
    w.stop()
    thread.join()
    assert seen == [("DELETED", "sel")]


def test_bookmarks_and_timeout(core, namespace):
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    events: list[dict] = []
    # The server ends the watch after timeout_seconds; one that ignored it would run for
    # kubesim's default watch length (30 to 60 minutes), far past the wait below.
    reader = threading.Thread(
        target=lambda: events.extend(
            watch.Watch().stream(
                core.list_namespaced_config_map,
                namespace,
                resource_version=rv,
                allow_watch_bookmarks=True,
                timeout_seconds=1,
            )
        ),
        daemon=True,
    )
    reader.start()
    reader.join(timeout=60)
    assert not reader.is_alive(), "the watch outlived its timeoutSeconds"
    assert events
    assert events[-1]["type"] == "BOOKMARK"
    assert int(events[-1]["raw_object"]["metadata"]["resourceVersion"]) >= int(rv)


def test_expired_resource_version_answers_410_and_relist_recovers(core, namespace, kubesim_api):
    old_rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "before"}})
    kubesim_api.admin("/kubesim/faults", {"expire_history": True})
    with pytest.raises(ApiException) as excinfo:
        list(
            watch.Watch().stream(
                core.list_namespaced_config_map,
                namespace,
                resource_version=old_rv,
                timeout_seconds=5,
            )
        )
    assert excinfo.value.status == 410
    # the client's recovery: relist, then watch from the list's resourceVersion
    listed = core.list_namespaced_config_map(namespace)
    assert [o.metadata.name for o in listed.items] == ["before"]
    thread = _later(
        lambda: core.create_namespaced_config_map(namespace, {"metadata": {"name": "after"}})
    )
    w = watch.Watch()
    seen = _collect(
        w.stream(
            core.list_namespaced_config_map,
            namespace,
            resource_version=listed.metadata.resource_version,
            timeout_seconds=5,
        ),
        1,
    )
    w.stop()
    thread.join()
    assert seen == [("ADDED", "after")]


def test_watch_resumes_once_by_itself_after_a_410(core, namespace, kubesim_api):
    """Without timeout_seconds, Watch.stream retries once from its last resourceVersion."""
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "x1"}})
    w = watch.Watch()
    stream = w.stream(core.list_namespaced_config_map, namespace, resource_version=rv)
    first = next(stream)
    assert (first["type"], first["object"].metadata.name) == ("ADDED", "x1")
    # a write elsewhere moves the cluster past x1, then history before it is forgotten
    core.create_namespaced_secret(namespace, {"metadata": {"name": "elsewhere"}})
    kubesim_api.admin("/kubesim/faults", {"expire_history": True, "close_watches": True})
    with pytest.raises(ApiException) as excinfo:
        next(stream)  # reconnect from x1's rv -> 410 -> second attempt -> 410 -> raise
    assert excinfo.value.status == 410
    w.stop()


def test_many_watchers_all_receive_the_event(core, namespace):
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    results: list[list] = []

    def watcher():
        w = watch.Watch()
        results.append(
            _collect(
                w.stream(
                    core.list_namespaced_config_map,
                    namespace,
                    resource_version=rv,
                    timeout_seconds=10,
                ),
                1,
            )
        )
        w.stop()

    threads = [threading.Thread(target=watcher) for _ in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "fan"}})
    for thread in threads:
        thread.join(15)
    assert results == [[("ADDED", "fan")]] * 8


def test_custom_object_watch_through_the_deprecated_version(custom):
    """Watching ClusterQueues through v1beta1 converts each event (cohortName -> cohort)."""
    listed = custom.list_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues")
    name = f"wcq-{time.time_ns() % 10**8}"
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"cohortName": "blue", "namespaceSelector": {}, "resourceGroups": []},
    }
    thread = _later(
        lambda: custom.create_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta2", "clusterqueues", body
        )
    )
    w = watch.Watch()
    for event in w.stream(
        custom.list_cluster_custom_object,
        "kueue.x-k8s.io",
        "v1beta1",
        "clusterqueues",
        resource_version=listed["metadata"]["resourceVersion"],
        timeout_seconds=5,
    ):
        if event["object"]["metadata"]["name"] == name:
            break
    w.stop()
    thread.join()
    assert event["type"] == "ADDED"
    assert event["object"]["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert event["object"]["spec"]["cohort"] == "blue"


def test_shared_informer_lists_watches_and_relists_after_410(core, namespace, kubesim_api):
    """kubernetes.informer.SharedInformer (client 36) keeps its cache right through a 410."""
    from kubernetes.informer import SharedInformer
    from kubernetes.informer.informer import ADDED
    from kubesim.testing import wait_for

    core.create_namespaced_config_map(namespace, {"metadata": {"name": "first"}})
    informer = SharedInformer(core.list_namespaced_config_map, namespace=namespace)
    added: list[str] = []
    informer.add_event_handler(ADDED, lambda obj: added.append(obj.metadata.name))
    informer.start()
    try:
        wait_for(lambda: "first" in added, timeout=10)
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "second"}})
        wait_for(lambda: "second" in added, timeout=10)
        # history lost and the watch cut: the informer must re-list to see "third"
        core.create_namespaced_secret(namespace, {"metadata": {"name": "move-on"}})
        kubesim_api.admin("/kubesim/faults", {"expire_history": True, "close_watches": True})
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "third"}})
        wait_for(lambda: "third" in added, timeout=20)
        names = sorted(o.metadata.name for o in informer.cache.list())
        assert names == ["first", "second", "third"]
    finally:
        # The client's Watch.stop() takes effect at the stream's next event, so stop() would wait
        # for one (up to the watch's server timeout): stop from a thread and send it an event.
        stopper = threading.Thread(target=informer.stop, daemon=True)
        stopper.start()
        for attempt in range(10):
            stopper.join(timeout=0.5)
            if not stopper.is_alive():
                break
            core.create_namespaced_config_map(namespace, {"metadata": {"name": f"wake-{attempt}"}})
        stopper.join(timeout=10)
        assert not stopper.is_alive(), "the informer did not stop"
