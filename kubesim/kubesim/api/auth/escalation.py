"""RBAC's escalation check: a user may write a Role or ClusterRole only with rules it holds itself,
and bind a role only if it holds the role's rules, unless it may `escalate` (roles) or `bind`
(bindings) that role; system:masters may do anything. As upstream's registry, the check runs on
the object as it would be stored (after a patch is applied), for requests of users only: kubesim's
own controllers (the clusterrole-aggregation controller) write as themselves."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

from kubesim.api import errors
from kubesim.api.auth.rbac import RBAC_GROUP
from kubesim.api.auth.requestinfo import Attributes
from kubesim.api.auth.user import UserInfo

# The user of the request being served (None: a write of kubesim itself).
CURRENT_USER: ContextVar[UserInfo | None] = ContextVar("kubesim_current_user", default=None)
_FULL_AUTHORITY = [
    {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
    {"verbs": ["*"], "nonResourceURLs": ["*"]},
]
_GC_ONLY = ("finalizers", "ownerReferences", "managedFields", "resourceVersion", "generation")


def _has_all(owner: list[str], wanted: list[str]) -> bool:
    return all(item in owner for item in wanted)


def _resources_covered(owner: list[str], wanted: list[str]) -> bool:
    if "*" in owner or _has_all(owner, wanted):
        return True
    for resource in wanted:
        if resource in owner:
            continue
        if "/" not in resource or "*/" + resource.split("/", 1)[1] not in owner:
            return False
    return True


def _urls_covered(owner: list[str], wanted: list[str]) -> bool:
    if "*" in owner or _has_all(owner, wanted):
        return True
    for url in wanted:
        if url in owner:
            continue
        if not any(o.endswith("*") and url.startswith(o.rstrip("*")) for o in owner):
            return False
    return True


def _rule_covers(owner: dict, atom: dict) -> bool:
    verbs, groups = owner.get("verbs") or [], owner.get("apiGroups") or []
    names = owner.get("resourceNames") or []
    wanted_names = atom.get("resourceNames") or []
    return (
        ("*" in verbs or _has_all(verbs, atom.get("verbs") or []))
        and ("*" in groups or _has_all(groups, atom.get("apiGroups") or []))
        and _resources_covered(owner.get("resources") or [], atom.get("resources") or [])
        and _urls_covered(owner.get("nonResourceURLs") or [], atom.get("nonResourceURLs") or [])
        and (not names or (bool(wanted_names) and _has_all(names, wanted_names)))
    )


def _atoms(rule: dict) -> list[dict]:
    """A rule broken into rules of one verb, group, resource (and name) or URL each."""
    atoms = []
    for verb in rule.get("verbs") or []:
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                names = rule.get("resourceNames") or []
                for name in names or [None]:
                    atom = {"verbs": [verb], "apiGroups": [group], "resources": [resource]}
                    if name is not None:
                        atom["resourceNames"] = [name]
                    atoms.append(atom)
        for url in rule.get("nonResourceURLs") or []:
            atoms.append({"verbs": [verb], "nonResourceURLs": [url]})
    return atoms


def missing_rules(owner: list[dict], wanted: list[dict]) -> list[dict]:
    """The parts of `wanted` no rule of `owner` covers (empty: owner holds them all)."""
    return [
        atom
        for rule in wanted
        for atom in _atoms(rule)
        if not any(_rule_covers(o, atom) for o in owner)
    ]


def _go_strings(values: list[str]) -> str:
    return "[" + " ".join('"' + v.replace('"', '\\"') + '"' for v in values) + "]"


def compact_descriptions(missing: list[dict]) -> list[str]:
    """Missing rules as upstream lists them: verbs merged per group/resource/names, each as
    `{APIGroups:["batch"], Resources:["jobs"], Verbs:["create" "delete"]}`, sorted."""
    merged: dict[tuple, dict] = {}
    for atom in missing:
        key = (
            tuple(atom.get("apiGroups") or ()),
            tuple(atom.get("resources") or ()),
            tuple(atom.get("resourceNames") or ()),
            tuple(atom.get("nonResourceURLs") or ()),
        )
        if key[3]:  # upstream does not merge non-resource rules
            key = (*key, len(merged))
        rule = merged.setdefault(key, {**atom, "verbs": []})
        rule["verbs"] = [*rule["verbs"], *[v for v in atom["verbs"] if v not in rule["verbs"]]]
    described = set()
    for rule in merged.values():
        parts = []
        for field, label in (
            ("apiGroups", "APIGroups"),
            ("resources", "Resources"),
            ("nonResourceURLs", "NonResourceURLs"),
            ("resourceNames", "ResourceNames"),
            ("verbs", "Verbs"),
        ):
            if rule.get(field):
                parts.append(f"{label}:{_go_strings(rule[field])}")
        described.add("{" + ", ".join(parts) + "}")
    return sorted(described)


def _only_gc_fields_changed(obj: dict, old: dict | None) -> bool:
    if old is None:
        return False

    def stripped(item: dict) -> dict:
        meta = {k: v for k, v in (item.get("metadata") or {}).items() if k not in _GC_ONLY}
        return {**item, "metadata": meta}

    return stripped(obj) == stripped(old)


class EscalationCheck:
    """Admission for the four RBAC kinds (store.add_admission_hook)."""

    def __init__(self, authorize: Callable[[Attributes], object], rules_for):
        self._authorize = authorize
        self._rules_for = rules_for  # (user, namespace) -> (resourceRules, nonResourceRules, err)
        self.cluster_roles: Callable[[str], dict | None] = lambda name: None
        self.roles: Callable[[str, str], dict | None] = lambda namespace, name: None

    def _may(self, user: UserInfo, verb: str, resource: str, namespace: str, name: str) -> bool:
        attrs = Attributes(
            user=user,
            verb=verb,
            resource_request=True,
            api_group=RBAC_GROUP,
            namespace=namespace,
            resource=resource,
            name=name,
        )
        return bool(self._authorize(attrs).allowed)

    def _confirm(self, user: UserInfo, namespace: str, rules: list[dict]) -> str:
        """'' when the user holds `rules` in `namespace`, else upstream's refusal."""
        resource_rules, non_resource_rules, problem = self._rules_for(user, namespace)
        missing = missing_rules([*resource_rules, *non_resource_rules], rules)
        if not missing:
            return ""
        groups = _go_strings(list(user.groups))
        message = (
            f'user "{user.name}" (groups={groups}) is attempting to grant RBAC permissions not '
            "currently held:\n" + "\n".join(compact_descriptions(missing))
        )
        if problem:
            message += f"; resolution errors: [{problem}]"
        return message

    def check(self, operation: str, obj: dict, old: dict | None) -> None:
        user = CURRENT_USER.get()
        if user is None or user.is_privileged or operation not in ("CREATE", "UPDATE"):
            return
        if operation == "UPDATE" and _only_gc_fields_changed(obj, old):
            return
        kind = obj.get("kind")
        meta = obj["metadata"]
        name, namespace = meta.get("name") or "", meta.get("namespace") or ""
        plural = {
            "Role": "roles",
            "ClusterRole": "clusterroles",
            "RoleBinding": "rolebindings",
            "ClusterRoleBinding": "clusterrolebindings",
        }[kind]
        qualified = f"{plural}.{RBAC_GROUP}"
        if kind in ("Role", "ClusterRole"):
            if self._may(user, "escalate", plural, namespace, name):
                return
            refusal = self._confirm(user, namespace, obj.get("rules") or [])
            if refusal:
                raise _forbidden(qualified, name, refusal)
            # an aggregationRule can gather anything: it takes * on everything
            if obj.get("aggregationRule") and self._confirm(user, "", _FULL_AUTHORITY):
                raise _forbidden(
                    qualified, name, "must have cluster-admin privileges to use the aggregationRule"
                )
            return
        else:
            ref = obj.get("roleRef") or {}
            ref_kind, ref_name = ref.get("kind") or "", ref.get("name") or ""
            ref_plural = "roles" if ref_kind == "Role" else "clusterroles"
            if self._may(user, "bind", ref_plural, namespace, ref_name):
                return
            role = (
                self.roles(namespace, ref_name)
                if ref_kind == "Role"
                else self.cluster_roles(ref_name)
            )
            if role is None:
                kind_name = "role" if ref_kind == "Role" else "clusterrole"
                raise errors.not_found(f"{kind_name}.{RBAC_GROUP}", ref_name)
            refusal = self._confirm(user, namespace, role.get("rules") or [])
        if refusal:
            raise _forbidden(qualified, name, refusal)


def _forbidden(qualified: str, name: str, why: str) -> errors.ApiError:
    resource, _, group = qualified.partition(".")
    return errors.forbidden(
        f'{qualified} "{name}" is forbidden: {why}',
        details={"name": name, "group": group, "kind": resource},
    )
