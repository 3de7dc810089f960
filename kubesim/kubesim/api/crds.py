"""CustomResourceDefinitions: loading from YAML, run-time creation through the API, and the
built-in (schema-less) definitions of the Kueue, Volcano and KAI kinds, used only with
--no-default-crds and no --crds (by default kubesim loads the vendored CRDs of kubesim/crds/)."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import orjson
import yaml

from kubesim.api import errors
from kubesim.api.registry import Registry, ResourceType, sort_versions
from kubesim.api.schema import CompiledSchema

# libyaml's loader parses the 1.4 MB Workload CRD about ten times faster than the pure-Python one
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
CRD_API_VERSION = "apiextensions.k8s.io/v1"
log = logging.getLogger("kubesim.crds")
CRD_KIND = "CustomResourceDefinition"

# Compiling the Workload schema takes a while; identical schemas (same CRD applied twice, a CRD
# updated without schema change) reuse the compiled form.
_schema_cache: dict[str, CompiledSchema] = {}


def compile_schema(schema: dict) -> CompiledSchema:
    digest = hashlib.sha256(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)).hexdigest()
    compiled = _schema_cache.get(digest)
    if compiled is None:
        compiled = _schema_cache[digest] = CompiledSchema(schema)
        for rule in compiled.unsupported_rules:
            log.warning("CEL rule not evaluated (the CEL library cannot compile it): %s", rule)
    return compiled


def read_crd_files(paths: Iterable[str | Path]) -> list[dict]:
    """Every CustomResourceDefinition document in the given files/directories (recursively)."""
    crds: list[dict] = []
    for root in paths:
        root = Path(root)
        if not root.exists():
            raise FileNotFoundError(f"--crds {root}: no such file or directory")
        files = (
            [root]
            if root.is_file()
            else sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
        )
        for path in files:
            for doc in _documents(path):
                if isinstance(doc, dict) and doc.get("kind") == CRD_KIND:
                    crds.append(doc)
    return crds


def _documents(path: Path) -> list:
    """A file's YAML documents, through a JSON cache keyed by path, size and mtime (parsing the
    Kueue CRDs' YAML is most of kubesim's start-up time; every test server reads them)."""
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    cache = Path(tempfile.gettempdir()) / "kubesim-yaml-cache" / f"{key.hexdigest()[:32]}.json"
    try:
        return orjson.loads(cache.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        pass
    try:
        documents = list(yaml.load_all(path.read_text(), Loader=YAML_LOADER))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from exc
    try:
        data = orjson.dumps(documents)
    except TypeError:  # values JSON cannot hold (YAML timestamps): no cache for this file
        return documents
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, cache)
    except OSError:
        pass
    return documents


def _validation_causes(crd: dict) -> list[dict]:
    causes: list[dict] = []
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group") or ""
    plural = names.get("plural") or ""
    name = (crd.get("metadata") or {}).get("name", "")
    if not group:
        causes.append(errors.required("spec.group"))
    if not plural:
        causes.append(errors.required("spec.names.plural"))
    if not names.get("kind"):
        causes.append(errors.required("spec.names.kind"))
    if group and plural and name != f"{plural}.{group}":
        causes.append(
            errors.invalid_value("metadata.name", name, 'must be spec.names.plural+"."+spec.group')
        )
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(
            errors.cause(
                "FieldValueNotSupported",
                "spec.scope",
                f'Unsupported value: "{spec.get("scope")}": supported '
                f'values: "Cluster", "Namespaced"',
            )
        )
    versions = spec.get("versions") or []
    if not versions:
        causes.append(
            errors.required(
                "spec.versions", "must have exactly one version marked as storage version"
            )
        )
    elif sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(
            errors.invalid_value(
                "spec.versions",
                [v.get("name") for v in versions],
                "must have exactly one version marked as storage version",
            )
        )
    return causes


def resource_type_from_crd(crd: dict) -> ResourceType:
    spec = crd["spec"]
    names = spec["names"]
    versions = [v for v in spec["versions"] if v.get("served", True)]
    storage = next(v["name"] for v in spec["versions"] if v.get("storage"))
    schemas: dict = {}
    openapi: dict = {}
    columns: dict = {}
    selectable: dict = {}
    subresources: set[str] = set()
    deprecated: dict = {}
    for version in spec["versions"]:
        vname = version["name"]
        raw_schema = ((version.get("schema") or {}).get("openAPIV3Schema")) or None
        openapi[vname] = raw_schema
        schemas[vname] = compile_schema(raw_schema) if raw_schema else None
        columns[vname] = list(version.get("additionalPrinterColumns") or [])
        selectable[vname] = [f["jsonPath"] for f in version.get("selectableFields") or []]
        subresources.update((version.get("subresources") or {}).keys())
        if version.get("deprecated"):
            deprecated[vname] = version.get("deprecationWarning") or (
                f"{spec['group']}/{vname} {names['kind']} is deprecated"
            )
    served = [v["name"] for v in versions]
    # kube-apiserver's preferred version is the highest by Kubernetes version priority
    served = sort_versions(served)
    return ResourceType(
        group=spec["group"],
        kind=names["kind"],
        plural=names["plural"],
        singular=names.get("singular") or names["kind"].lower(),
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        versions=served,
        storage_version=storage,
        short_names=list(names.get("shortNames") or []),
        categories=list(names.get("categories") or []),
        subresources=subresources,
        schemas=schemas,
        printer_columns=columns,
        selectable_fields=selectable,
        list_kind=names.get("listKind") or names["kind"] + "List",
        is_crd=True,
        openapi_schemas=openapi,
        deprecated_versions=deprecated,
    )


def crd_status(crd: dict, now: str) -> dict:
    spec = crd["spec"]
    names = dict(spec["names"])
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", names["kind"] + "List")
    stored = list((crd.get("status") or {}).get("storedVersions") or [])
    storage = next((v["name"] for v in spec["versions"] if v.get("storage")), None)
    if storage and storage not in stored:
        stored.append(storage)
    return {
        "acceptedNames": names,
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": now,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": now,
            },
        ],
        "storedVersions": stored,
    }


class CrdManager:
    """Keeps the registry in step with the CustomResourceDefinition objects in the store."""

    def __init__(self, store) -> None:
        self.store = store
        self.registry: Registry = store.registry
        store.add_admission_hook(CRD_API_VERSION, CRD_KIND, self._admit)
        store.add_write_listener(self._on_write)

    def _admit(self, operation: str, crd: dict, old: dict | None) -> None:
        if operation == "DELETE":
            return
        name = (crd.get("metadata") or {}).get("name", "")
        causes = _validation_causes(crd)
        if not causes:
            spec = crd["spec"]
            existing = self.registry.by_group_kind(spec["group"], spec["names"]["kind"])
            if existing is not None and not existing.is_crd:
                causes.append(
                    errors.invalid_value(
                        "spec.names.kind", spec["names"]["kind"], "conflicts with a built-in kind"
                    )
                )
        if not causes:
            try:
                resource_type_from_crd(crd)
            except Exception as exc:  # a schema the compiler rejects
                causes.append(
                    errors.invalid_value("spec.versions[0].schema.openAPIV3Schema", "...", str(exc))
                )
        if causes:
            raise errors.invalid(CRD_KIND, "apiextensions.k8s.io", name, causes)
        crd["status"] = crd_status(crd, self.store.now())

    def _on_write(self, event_type: str, rtype: ResourceType, obj: dict, old: dict | None) -> None:
        if rtype.kind != CRD_KIND or rtype.group != "apiextensions.k8s.io":
            return
        if event_type == "DELETED":
            spec = obj.get("spec") or {}
            removed = self.registry.by_key(
                spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
            )
            if removed is not None and removed.is_crd:
                self.store.remove_all_of_type(removed)
                self.registry.remove(removed.group, removed.plural)
            return
        self.install(obj)

    def install(self, crd: dict) -> ResourceType:
        rtype = resource_type_from_crd(crd)
        if (old := self.registry.by_key(rtype.group, rtype.plural)) and not old.is_crd:
            raise errors.invalid(
                CRD_KIND,
                "apiextensions.k8s.io",
                crd["metadata"]["name"],
                [
                    errors.invalid_value(
                        "spec.names.plural", rtype.plural, "conflicts with a built-in resource"
                    )
                ],
            )
        self.registry.add(rtype)
        return rtype

    def create_all(self, crds: list[dict]) -> None:
        """Create CRDs at start (through the store, so `kubectl get crds` lists them). The first
        CRD of a name in `crds` wins; one restored from a state file with another spec (saved by
        an older kubesim, or before the vendored CRDs existed) is replaced: the definitions given
        at start are the source of truth, as `kubectl apply` of a new release would make them."""
        seen: set[str] = set()
        for crd in crds:
            crd = dict(crd)
            crd.setdefault("apiVersion", CRD_API_VERSION)
            name = (crd.get("metadata") or {}).get("name")
            if name in seen:
                continue
            seen.add(name)
            existing = self.store.try_get(CRD_API_VERSION, CRD_KIND, None, name)
            if existing is None:
                self.store.create(crd, field_manager="kubesim")
            elif existing.get("spec") != crd.get("spec"):
                version = existing["metadata"]["resourceVersion"]
                crd["metadata"] = {**crd["metadata"], "resourceVersion": version}
                self.store.update(crd, field_manager="kubesim")


# --- built-in definitions (used with --no-default-crds and no --crds) ------------------------
def _col(name: str, type_: str, path: str, priority: int = 0) -> dict:
    column = {"name": name, "type": type_, "jsonPath": path}
    if priority:
        column["priority"] = priority
    return column


_AGE = _col("Age", "date", ".metadata.creationTimestamp")
_KUEUE = "kueue.x-k8s.io"
_KUEUE_VERSIONS = ["v1beta2", "v1beta1"]

# (group, kind, plural, scope, versions (storage first), short names, status, columns per
#  version (None = same for all), selectable fields)
_BUILTIN_CRDS: list[tuple] = [
    (_KUEUE, "AdmissionCheck", "admissionchecks", "Cluster", _KUEUE_VERSIONS, ["ac"], True, [], []),
    (
        _KUEUE,
        "ClusterQueue",
        "clusterqueues",
        "Cluster",
        _KUEUE_VERSIONS,
        ["cq"],
        True,
        {
            "v1beta2": [
                _col("Cohort", "string", ".spec.cohortName"),
                _col("Strategy", "string", ".spec.queueingStrategy", 1),
                _col("Pending Workloads", "integer", ".status.pendingWorkloads"),
                _col("Admitted Workloads", "integer", ".status.admittedWorkloads", 1),
            ],
            "v1beta1": [
                _col("Cohort", "string", ".spec.cohort"),
                _col("Strategy", "string", ".spec.queueingStrategy", 1),
                _col("Pending Workloads", "integer", ".status.pendingWorkloads"),
                _col("Admitted Workloads", "integer", ".status.admittedWorkloads", 1),
            ],
        },
        [],
    ),
    (_KUEUE, "Cohort", "cohorts", "Cluster", _KUEUE_VERSIONS, ["co"], True, [], []),
    (
        _KUEUE,
        "LocalQueue",
        "localqueues",
        "Namespaced",
        _KUEUE_VERSIONS,
        ["queue", "queues", "lq"],
        True,
        [
            _col("ClusterQueue", "string", ".spec.clusterQueue"),
            _col("Pending Workloads", "integer", ".status.pendingWorkloads"),
            _col("Admitted Workloads", "integer", ".status.admittedWorkloads"),
        ],
        [],
    ),
    (
        _KUEUE,
        "MultiKueueCluster",
        "multikueueclusters",
        "Cluster",
        _KUEUE_VERSIONS,
        ["mkc"],
        True,
        [_col("Connected", "string", ".status.conditions[?(@.type=='Active')].status"), _AGE],
        [],
    ),
    (
        _KUEUE,
        "MultiKueueConfig",
        "multikueueconfigs",
        "Cluster",
        _KUEUE_VERSIONS,
        ["mkconf"],
        False,
        [],
        [],
    ),
    (
        _KUEUE,
        "ProvisioningRequestConfig",
        "provisioningrequestconfigs",
        "Cluster",
        _KUEUE_VERSIONS,
        ["prc"],
        False,
        [],
        [],
    ),
    (
        _KUEUE,
        "ResourceFlavor",
        "resourceflavors",
        "Cluster",
        _KUEUE_VERSIONS,
        ["flavor", "flavors", "rf"],
        False,
        [],
        [],
    ),
    (_KUEUE, "Topology", "topologies", "Cluster", _KUEUE_VERSIONS, ["topo"], False, [], []),
    (
        _KUEUE,
        "WorkloadPriorityClass",
        "workloadpriorityclasses",
        "Cluster",
        _KUEUE_VERSIONS,
        ["wpc"],
        False,
        [_col("Value", "integer", ".value")],
        [],
    ),
    (
        _KUEUE,
        "Workload",
        "workloads",
        "Namespaced",
        _KUEUE_VERSIONS,
        ["kwl", "kueueworkload", "kueueworkloads"],
        True,
        [
            _col("Queue", "string", ".spec.queueName"),
            _col("Reserved in", "string", ".status.admission.clusterQueue"),
            _col("Admitted", "string", ".status.conditions[?(@.type=='Admitted')].status"),
            _col("Finished", "string", ".status.conditions[?(@.type=='Finished')].status"),
            _AGE,
        ],
        [".status.admission.clusterQueue"],
    ),
    (
        "batch.volcano.sh",
        "Job",
        "jobs",
        "Namespaced",
        ["v1alpha1"],
        ["vcjob", "vj"],
        True,
        [
            _col("STATUS", "string", ".status.state.phase"),
            _col("minAvailable", "integer", ".status.minAvailable"),
            _col("RUNNINGS", "integer", ".status.running"),
            _col("AGE", "date", ".metadata.creationTimestamp"),
            _col("QUEUE", "string", ".spec.queue", 1),
        ],
        [],
    ),
    ("bus.volcano.sh", "Command", "commands", "Namespaced", ["v1alpha1"], [], False, [], []),
    (
        "scheduling.volcano.sh",
        "PodGroup",
        "podgroups",
        "Namespaced",
        ["v1beta1"],
        ["pg", "podgroup-v1beta1"],
        False,
        [
            _col("STATUS", "string", ".status.phase"),
            _col("minMember", "integer", ".spec.minMember"),
            _col("RUNNINGS", "integer", ".status.running"),
            _col("AGE", "date", ".metadata.creationTimestamp"),
            _col("QUEUE", "string", ".spec.queue", 1),
        ],
        [],
    ),
    (
        "scheduling.volcano.sh",
        "Queue",
        "queues",
        "Cluster",
        ["v1beta1"],
        ["q", "queue-v1beta1"],
        True,
        [_col("PARENT", "string", ".spec.parent")],
        [],
    ),
    ("kai.scheduler", "Topology", "topologies", "Cluster", ["v1alpha1"], [], False, [], []),
    (
        "scheduling.run.ai",
        "BindRequest",
        "bindrequests",
        "Namespaced",
        ["v1alpha2"],
        [],
        True,
        [],
        [],
    ),
    (
        "scheduling.run.ai",
        "PodGroup",
        "podgroups",
        "Namespaced",
        ["v2alpha2"],
        ["pg"],
        True,
        [],
        [],
    ),
    (
        "scheduling.run.ai",
        "Queue",
        "queues",
        "Cluster",
        ["v2"],
        [],
        True,
        [
            _col("Priority", "string", ".spec.priority"),
            _col("Parent", "string", ".spec.parentQueue"),
            _col("Children", "string", ".status.childQueues"),
            _col("DisplayName", "string", ".spec.displayName"),
        ],
        [],
    ),
]


def builtin_crds() -> list[dict]:
    """Schema-less CRDs for the Kueue, Volcano and KAI kinds (names, scopes, versions and
    printer columns as upstream ships them); objects are stored without validation."""
    crds = []
    for group, kind, plural, scope, versions, short, status, columns, selectable in _BUILTIN_CRDS:
        version_entries = []
        for index, version in enumerate(versions):
            entry: dict = {
                "name": version,
                "served": True,
                "storage": index == 0,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
            version_columns = columns.get(version, []) if isinstance(columns, dict) else columns
            if version_columns:
                entry["additionalPrinterColumns"] = version_columns
            if status:
                entry["subresources"] = {"status": {}}
            if selectable and index == 0:
                entry["selectableFields"] = [{"jsonPath": path} for path in selectable]
            if group == _KUEUE and version == "v1beta1":
                entry["deprecated"] = True
                entry["deprecationWarning"] = "Use v1beta2 instead"
            version_entries.append(entry)
        names: dict = {
            "kind": kind,
            "listKind": kind + "List",
            "plural": plural,
            "singular": kind.lower(),
        }
        if short:
            names["shortNames"] = list(short)
        crds.append(
            {
                "apiVersion": CRD_API_VERSION,
                "kind": CRD_KIND,
                "metadata": {
                    "name": f"{plural}.{group}",
                    "annotations": {"kubesim.dev/builtin-definition": "true"},
                },
                "spec": {
                    "group": group,
                    "names": names,
                    "scope": scope,
                    "versions": version_entries,
                },
            }
        )
    return crds
