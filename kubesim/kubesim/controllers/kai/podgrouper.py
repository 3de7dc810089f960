"""KAI's podgrouper: every pod of the KAI scheduler belongs to a PodGroup (scheduling.run.ai/
v2alpha2) named pg-<top owner>-<uid>, created from the pod's top owner (a batch Job, a bare pod,
...), and the pod is annotated `pod-group-name`. A Job is a gang only with the annotation
`kai.scheduler/batch-min-member`; `kai.scheduler/skip-podgrouper: "true"` on the pod or an owner
leaves grouping to whoever created the PodGroup."""

from __future__ import annotations

from dataclasses import dataclass, field

from kubesim.api.errors import ApiError

PG_API = "scheduling.run.ai/v2alpha2"
PG_ANNOTATION = "pod-group-name"
SKIP_ANNOTATION = "kai.scheduler/skip-podgrouper"
MIN_MEMBER_ANNOTATION = "kai.scheduler/batch-min-member"
QUEUE_LABEL = "kai.scheduler/queue"
NODE_POOL_LABEL = "kai.scheduler/node-pool"
PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
PRIORITY_LABEL = "priorityClassName"
PROJECT_LABEL = "project"
USER_LABEL = "user"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
TOP_OWNER_ANNOTATION = "kai.scheduler/top-owner-metadata"
DEFAULT_QUEUE = "default-queue"

# KAI's default priority classes (installed with the chart): name -> (value, preemptible)
PRIORITY_CLASSES = {
    "train": 50,
    "build-preemptible": 75,
    "build": 100,
    "inference": 125,
}
DEFAULT_POD_GROUP_PRIORITY = 50


class GroupingError(Exception):
    """The podgrouper could not group the pod (shown as a PodGrouperWarning event)."""


@dataclass
class Metadata:
    name: str
    namespace: str
    owner: dict
    queue: str
    priority_class: str
    min_member: int = 1
    preemptibility: str = ""
    labels: dict = field(default_factory=dict)
    annotations: dict = field(default_factory=dict)

    def podgroup(self) -> dict:
        spec: dict = {
            "minMember": self.min_member,
            "queue": self.queue,
            "priorityClassName": self.priority_class,
            "subGroups": [],
        }
        if self.preemptibility:
            spec["preemptibility"] = self.preemptibility
        meta: dict = {
            "name": self.name,
            "namespace": self.namespace,
            "ownerReferences": [self.owner],
        }
        if self.labels:
            meta["labels"] = dict(self.labels)
        if self.annotations:
            meta["annotations"] = dict(self.annotations)
        return {"apiVersion": PG_API, "kind": "PodGroup", "metadata": meta, "spec": spec}


def should_skip(obj: dict) -> bool:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(SKIP_ANNOTATION) == "true"


def owners(store, pod: dict) -> list[dict]:
    """The pod's controller owners, nearest first, as far as they exist in the API."""
    chain: list[dict] = []
    namespace = (pod.get("metadata") or {}).get("namespace")
    current = pod
    seen: set[str] = set()
    while True:
        refs = (current.get("metadata") or {}).get("ownerReferences") or []
        ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
        if ref is None or ref.get("uid") in seen:
            return chain
        seen.add(ref.get("uid"))
        try:
            found = store.try_get(
                ref.get("apiVersion", ""), ref.get("kind", ""), namespace, ref["name"]
            )
        except ApiError:
            found = None  # a kind the API does not serve
        if found is None or found["metadata"].get("uid") != ref.get("uid"):
            return chain
        chain.append(found)
        current = found


def _label(objs: list[dict], key: str) -> str | None:
    for obj in objs:
        value = ((obj.get("metadata") or {}).get("labels") or {}).get(key)
        if value is not None:
            return value
    return None


def _owner_ref(obj: dict) -> dict:
    meta = obj["metadata"]
    return {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": obj.get("kind", "Pod"),
        "name": meta["name"],
        "uid": meta.get("uid", ""),
    }


def _top_owner_metadata(obj: dict) -> str:
    api_version = obj.get("apiVersion", "v1")
    group, _, version = api_version.rpartition("/")
    meta = obj["metadata"]
    return (
        f'name: {meta["name"]}\nuid: {meta.get("uid", "")}\ngroup: "{group}"\n'
        f"version: {version}\nkind: {obj.get('kind', '')}\n"
    )


def metadata_for(store, pod: dict) -> Metadata | None:
    """What the podgrouper would apply for this pod; None when the pod is not its business."""
    meta = pod.get("metadata") or {}
    if should_skip(pod):
        return None
    chain = owners(store, pod)
    if PG_ANNOTATION in (meta.get("annotations") or {}) and not meta.get("ownerReferences"):
        return None  # a bare pod that names its own PodGroup
    if any(should_skip(owner) for owner in chain):
        return None
    # CronJob -> Job -> Pod groups per Job; Deployment -> ReplicaSet -> Pod groups per pod.
    kinds = [o.get("kind") for o in chain]
    if "CronJob" in kinds:
        chain = chain[: kinds.index("CronJob")]
    if "ReplicaSet" in kinds or "Deployment" in kinds:
        top, default_class = pod, "inference"
    else:
        top = chain[-1] if chain else pod
        default_class = "train"
    everything = [*chain, pod] if top is not pod else [pod]
    top_meta = top["metadata"]
    queue = _label([top], QUEUE_LABEL) or _label([pod], QUEUE_LABEL)
    if queue is None:
        project = _label([top], PROJECT_LABEL) or _label([pod], PROJECT_LABEL)
        if project:
            pool = (meta.get("labels") or {}).get(NODE_POOL_LABEL)
            queue = f"{project}-{pool}" if pool else project
        else:
            queue = DEFAULT_QUEUE
    priority_class = default_class
    candidates = [_label([owner], PRIORITY_LABEL) for owner in chain]
    candidates += [_label([pod], PRIORITY_LABEL), (pod.get("spec") or {}).get("priorityClassName")]
    for wanted in candidates:
        if wanted and store.try_get("scheduling.k8s.io/v1", "PriorityClass", None, wanted):
            priority_class = wanted
            break
    preemptibility = ""
    for obj in everything:
        value = ((obj.get("metadata") or {}).get("labels") or {}).get(PREEMPTIBILITY_LABEL)
        if value in ("preemptible", "non-preemptible"):
            preemptibility = value
            break
    min_member = 1
    if top.get("kind") == "Job" and top is not pod:
        override = (top_meta.get("annotations") or {}).get(MIN_MEMBER_ANNOTATION)
        if override is not None:
            try:
                min_member = int(override)
            except ValueError:
                raise GroupingError(
                    "invalid min-member annotation value: strconv.ParseInt: parsing "
                    f'"{override}": invalid syntax'
                ) from None
    labels = (
        dict(top_meta.get("labels") or {}) if top is not pod else dict(meta.get("labels") or {})
    )
    if USER_LABEL not in labels and USER_LABEL in (meta.get("labels") or {}):
        labels[USER_LABEL] = meta["labels"][USER_LABEL]
    if NODE_POOL_LABEL not in labels and NODE_POOL_LABEL in (meta.get("labels") or {}):
        labels[NODE_POOL_LABEL] = meta["labels"][NODE_POOL_LABEL]
    annotations = {TOP_OWNER_ANNOTATION: _top_owner_metadata(top)}
    annotations.update(top_meta.get("annotations") or {})
    return Metadata(
        name=f"pg-{top_meta['name']}-{top_meta.get('uid', '')}",
        namespace=meta.get("namespace") or "default",
        owner=_owner_ref(top),
        queue=queue,
        priority_class=priority_class,
        min_member=min_member,
        preemptibility=preemptibility,
        labels=labels,
        annotations=annotations,
    )


def priority_of(store, class_name: str | None, cache: dict[str, int | None]) -> int:
    """A PodGroup's priority: its PriorityClass value, else KAI's default (50)."""
    if not class_name:
        return DEFAULT_POD_GROUP_PRIORITY
    if class_name not in cache:
        found = store.try_get("scheduling.k8s.io/v1", "PriorityClass", None, class_name)
        cache[class_name] = int(found.get("value") or 0) if found else None
    value = cache[class_name]
    return DEFAULT_POD_GROUP_PRIORITY if value is None else value


def is_preemptible(pg: dict, priority: int) -> bool:
    value = (pg.get("spec") or {}).get("preemptibility")
    if value == "preemptible":
        return True
    if value == "non-preemptible":
        return False
    return priority < 100
