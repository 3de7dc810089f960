"""The RBAC authorizer, as kube-apiserver's (plugin/pkg/auth/authorizer/rbac).

A request is allowed when one rule of one role bound to its user allows it: first the
ClusterRoleBindings (their roles apply in every namespace and at the cluster scope), then the
RoleBindings of the request's namespace (a Role there, or a ClusterRole's rules limited to that
namespace). Nothing denies; a request no rule allows is forbidden.

Rules are compiled once into sets (wildcards as None) and each user's applicable rules are cached
per (user, groups, namespace); any write to a Role, ClusterRole or binding drops the caches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kubesim.api import errors
from kubesim.api.auth.requestinfo import Attributes
from kubesim.api.auth.user import UserInfo, split_service_account_username

RBAC_GROUP = "rbac.authorization.k8s.io"
_CACHE_LIMIT = 20_000


class CompiledRule:
    """One PolicyRule as sets; None where the rule says "*"."""

    __slots__ = (
        "groups",
        "names",
        "resources",
        "rule",
        "subresource_wildcards",
        "url_prefixes",
        "urls",
        "verbs",
    )

    def __init__(self, rule: dict):
        self.rule = rule
        verbs = rule.get("verbs") or ()
        self.verbs = None if "*" in verbs else frozenset(verbs)
        groups = rule.get("apiGroups") or ()
        self.groups = None if "*" in groups else frozenset(groups)
        resources = rule.get("resources") or ()
        self.resources = None if "*" in resources else frozenset(resources)
        # "*/scale" allows the scale subresource of every resource
        self.subresource_wildcards = frozenset(
            r[2:] for r in resources if r.startswith("*/") and len(r) > 2
        )
        self.names = frozenset(rule.get("resourceNames") or ()) or None
        urls = rule.get("nonResourceURLs") or ()
        self.urls = None if "*" in urls else frozenset(urls)
        self.url_prefixes = tuple(u[:-1] for u in urls if u.endswith("*") and u != "*")

    def allows(self, attrs: Attributes) -> bool:
        if self.verbs is not None and attrs.verb not in self.verbs:
            return False
        if attrs.resource_request:
            if self.groups is not None and attrs.api_group not in self.groups:
                return False
            if self.resources is not None:
                sub = attrs.subresource
                combined = f"{attrs.resource}/{sub}" if sub else attrs.resource
                if combined not in self.resources and sub not in self.subresource_wildcards:
                    return False
            # a rule with resourceNames allows only requests that name one of them
            return self.names is None or attrs.name in self.names
        if self.urls is None:
            return True
        path = attrs.path
        return path in self.urls or any(path.startswith(p) for p in self.url_prefixes)

    @property
    def is_resource_rule(self) -> bool:
        return bool(self.rule.get("resources"))

    @property
    def is_non_resource_rule(self) -> bool:
        return bool(self.rule.get("nonResourceURLs"))


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""


def _subject_applies(user: UserInfo, subject: dict, namespace: str) -> bool:
    kind = subject.get("kind")
    name = subject.get("name") or ""
    if kind == "User":
        return user.name == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        # a binding may leave out the namespace of an account in its own namespace
        sa_namespace = subject.get("namespace") or namespace
        if not sa_namespace:
            return False
        return split_service_account_username(user.name) == (sa_namespace, name)
    return False


def _describe_subject(subject: dict, binding_namespace: str) -> str:
    kind, name = subject.get("kind", ""), subject.get("name", "")
    if kind == "ServiceAccount":
        return f'{kind} "{name}/{subject.get("namespace") or binding_namespace}"'
    return f'{kind} "{name}"'


class _Binding:
    __slots__ = ("description_prefix", "name", "namespace", "role_kind", "role_name", "subjects")

    def __init__(self, obj: dict):
        meta = obj["metadata"]
        self.name = meta["name"]
        self.namespace = meta.get("namespace") or ""
        ref = obj.get("roleRef") or {}
        self.role_kind = ref.get("kind") or ""
        self.role_name = ref.get("name") or ""
        self.subjects = obj.get("subjects") or []
        kind = "RoleBinding" if self.namespace else "ClusterRoleBinding"
        label = f"{self.name}/{self.namespace}" if self.namespace else self.name
        self.description_prefix = f'{kind} "{label}" of {self.role_kind} "{self.role_name}" to '

    def applies(self, user: UserInfo) -> dict | None:
        """The first subject naming the user, or None."""
        for subject in self.subjects:
            if _subject_applies(user, subject, self.namespace):
                return subject
        return None


class _Policy:
    """The RBAC objects, indexed; roles compiled when first used; kept current by `apply`."""

    def __init__(self, objects: Iterable[dict]):
        self._cluster_roles: dict[str, dict] = {}
        self._roles: dict[tuple[str, str], dict] = {}
        self._compiled: dict[tuple[str, str], tuple[CompiledRule, ...]] = {}
        self._cluster_bindings: dict[str, _Binding] = {}
        self._bindings: dict[str, dict[str, _Binding]] = {}
        self._sorted_cluster_bindings: list[_Binding] | None = None
        self._sorted_bindings: dict[str, list[_Binding]] = {}
        for obj in objects:
            self.apply("ADDED", obj)

    def apply(self, event_type: str, obj: dict) -> None:
        """Take one written object into the index (event_type DELETED: drop it)."""
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        name = meta.get("name") or ""
        namespace = meta.get("namespace") or ""
        gone = event_type == "DELETED"
        if kind == "ClusterRole":
            self._compiled.pop(("", name), None)
            if gone:
                self._cluster_roles.pop(name, None)
            else:
                self._cluster_roles[name] = obj
        elif kind == "Role":
            self._compiled.pop((namespace, name), None)
            if gone:
                self._roles.pop((namespace, name), None)
            else:
                self._roles[(namespace, name)] = obj
        elif kind == "ClusterRoleBinding":
            self._sorted_cluster_bindings = None
            if gone:
                self._cluster_bindings.pop(name, None)
            else:
                self._cluster_bindings[name] = _Binding(obj)
        elif kind == "RoleBinding":
            self._sorted_bindings.pop(namespace, None)
            bindings = self._bindings.setdefault(namespace, {})
            if gone:
                bindings.pop(name, None)
            else:
                bindings[name] = _Binding(obj)

    def cluster_bindings(self) -> list[_Binding]:
        if self._sorted_cluster_bindings is None:
            self._sorted_cluster_bindings = sorted(
                self._cluster_bindings.values(), key=lambda b: b.name
            )
        return self._sorted_cluster_bindings

    def bindings(self, namespace: str) -> list[_Binding]:
        found = self._sorted_bindings.get(namespace)
        if found is None:
            found = sorted((self._bindings.get(namespace) or {}).values(), key=lambda b: b.name)
            self._sorted_bindings[namespace] = found
        return found

    def _rules(self, key: tuple[str, str], role: dict) -> tuple[CompiledRule, ...]:
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = tuple(CompiledRule(rule) for rule in role.get("rules") or () if rule)
            self._compiled[key] = compiled
        return compiled

    def role_rules(self, binding: _Binding) -> tuple[tuple[CompiledRule, ...] | None, str]:
        """The rules a binding refers to, or None and the error kube-apiserver reports."""
        if binding.role_kind == "ClusterRole":
            role = self._cluster_roles.get(binding.role_name)
            if role is None:
                return None, f'clusterrole.{RBAC_GROUP} "{binding.role_name}" not found'
            return self._rules(("", binding.role_name), role), ""
        if binding.role_kind == "Role":
            key = (binding.namespace, binding.role_name)
            role = self._roles.get(key)
            if role is None:
                return None, f'role.{RBAC_GROUP} "{binding.role_name}" not found'
            return self._rules(key, role), ""
        return None, f'unsupported role reference kind: "{binding.role_kind}"'


# (source description, rule) in the order kube-apiserver visits them, and resolution errors
_Resolved = tuple[tuple[tuple[str, CompiledRule], ...], tuple[str, ...]]


class RBACAuthorizer:
    """Authorizes requests by the RBAC objects `load()` returns, read when first needed and then
    kept current by `changed()` for every RBAC write (or re-read after `invalidate()`)."""

    def __init__(self, load: Callable[[], Iterable[dict]]):
        self._load = load
        self._policy: _Policy | None = None
        # (user, groups) -> rules of the ClusterRoleBindings naming them
        self._cluster_cache: dict[tuple, _Resolved] = {}
        # namespace -> (user, groups) -> rules of that namespace's RoleBindings naming them
        self._namespace_cache: dict[str, dict[tuple, _Resolved]] = {}

    @classmethod
    def from_objects(cls, objects: Iterable[dict]) -> RBACAuthorizer:
        items = list(objects)
        return cls(lambda: items)

    def invalidate(self) -> None:
        self._policy = None
        self._cluster_cache = {}
        self._namespace_cache = {}

    def changed(self, event_type: str, obj: dict) -> None:
        """An RBAC object was written: update the index, drop only the answers it can change."""
        if self._policy is None:
            return  # read in full at the next decision
        self._policy.apply(event_type, obj)
        kind = obj.get("kind")
        if kind in ("Role", "RoleBinding"):
            self._namespace_cache.pop((obj.get("metadata") or {}).get("namespace") or "", None)
        elif kind == "ClusterRoleBinding":
            self._cluster_cache = {}
        else:  # a ClusterRole may be bound anywhere
            self._cluster_cache = {}
            self._namespace_cache = {}

    @property
    def policy(self) -> _Policy:
        if self._policy is None:
            self._policy = _Policy(self._load())
        return self._policy

    # ------------------------------------------------------------------ rule resolution
    def _resolve(self, policy: _Policy, bindings: Iterable[_Binding], user: UserInfo) -> _Resolved:
        rules: list[tuple[str, CompiledRule]] = []
        problems: list[str] = []
        for binding in bindings:
            subject = binding.applies(user)
            if subject is None:
                continue
            role_rules, problem = policy.role_rules(binding)
            if role_rules is None:
                problems.append(problem)
                continue
            source = binding.description_prefix + _describe_subject(subject, binding.namespace)
            rules.extend((source, rule) for rule in role_rules)
        return tuple(rules), tuple(problems)

    def _cluster_rules(self, user: UserInfo) -> _Resolved:
        key = (user.name, user.groups)
        resolved = self._cluster_cache.get(key)
        if resolved is None:
            policy = self.policy
            resolved = self._resolve(policy, policy.cluster_bindings(), user)
            if len(self._cluster_cache) >= _CACHE_LIMIT:
                self._cluster_cache.clear()
            self._cluster_cache[key] = resolved
        return resolved

    def _namespace_rules(self, user: UserInfo, namespace: str) -> _Resolved:
        if not namespace:
            return (), ()
        cache = self._namespace_cache.get(namespace)
        if cache is None:
            if len(self._namespace_cache) >= _CACHE_LIMIT:
                self._namespace_cache.clear()
            cache = self._namespace_cache[namespace] = {}
        key = (user.name, user.groups)
        resolved = cache.get(key)
        if resolved is None:
            policy = self.policy
            resolved = self._resolve(policy, policy.bindings(namespace), user)
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[key] = resolved
        return resolved

    # ------------------------------------------------------------------ decisions
    def authorize(self, attrs: Attributes) -> Decision:
        problems: list[str] = []
        for rules, errs in (
            self._cluster_rules(attrs.user),
            self._namespace_rules(attrs.user, attrs.namespace),
        ):
            for source, rule in rules:
                if rule.allows(attrs):
                    return Decision(True, f"RBAC: allowed by {source}")
            problems.extend(errs)
        if not problems:
            return Decision(False)
        joined = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
        return Decision(False, f"RBAC: {joined}")

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[dict], list[dict], str]:
        """(resourceRules, nonResourceRules, evaluationError) of a SelfSubjectRulesReview."""
        resource_rules: list[dict] = []
        non_resource_rules: list[dict] = []
        problems: list[str] = []
        for rules, errs in (self._cluster_rules(user), self._namespace_rules(user, namespace)):
            problems.extend(errs)
            for _, rule in rules:
                raw = rule.rule
                if rule.is_resource_rule:
                    entry = {
                        "verbs": list(raw.get("verbs") or []),
                        "apiGroups": list(raw.get("apiGroups") or []),
                        "resources": list(raw.get("resources") or []),
                    }
                    if raw.get("resourceNames"):
                        entry["resourceNames"] = list(raw["resourceNames"])
                    resource_rules.append(entry)
                if rule.is_non_resource_rule:
                    non_resource_rules.append(
                        {
                            "verbs": list(raw.get("verbs") or []),
                            "nonResourceURLs": list(raw.get("nonResourceURLs") or []),
                        }
                    )
        error = ""
        if problems:
            error = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
        return resource_rules, non_resource_rules, error


def forbidden_message(attrs: Attributes) -> str:
    """responsewriters.forbiddenMessage: what the user may not do, where."""
    user = attrs.user.name
    if not attrs.resource_request:
        return f'User "{user}" cannot {attrs.verb} path "{attrs.path}"'
    resource = attrs.resource
    if attrs.subresource:
        resource = f"{resource}/{attrs.subresource}"
    if attrs.namespace:
        return (
            f'User "{user}" cannot {attrs.verb} resource "{resource}" in API group '
            f'"{attrs.api_group}" in the namespace "{attrs.namespace}"'
        )
    return (
        f'User "{user}" cannot {attrs.verb} resource "{resource}" in API group '
        f'"{attrs.api_group}" at the cluster scope'
    )


def forbidden_error(attrs: Attributes, reason: str = "") -> errors.ApiError:
    """The 403 Status kube-apiserver answers a request its authorizer did not allow."""
    detail = forbidden_message(attrs)
    if reason:
        detail = f"{detail}: {reason}"
    details: dict = {}
    if attrs.resource_request and attrs.resource:
        qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
        if attrs.name:
            message = f'{qualified} "{attrs.name}" is forbidden: {detail}'
            details["name"] = attrs.name
        else:
            message = f"{qualified} is forbidden: {detail}"
        if attrs.api_group:
            details["group"] = attrs.api_group
        details["kind"] = attrs.resource
    else:
        message = f"forbidden: {detail}"
    return errors.forbidden(message, details=details)


def create_on_update_forbidden(attrs: Attributes, reason: str) -> errors.ApiError:
    """The 403 of an apply that would create an object its user may patch but not create
    (kube-apiserver's withAuthorization: the authorizer's reason alone, empty from RBAC)."""
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    details: dict = {"name": attrs.name}
    if attrs.api_group:
        details["group"] = attrs.api_group
    details["kind"] = attrs.resource
    return errors.forbidden(f'{qualified} "{attrs.name}" is forbidden: {reason}', details=details)
