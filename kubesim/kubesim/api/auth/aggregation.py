"""The clusterrole-aggregation controller: a ClusterRole with an aggregationRule gets, as its
`rules`, the rules of every other ClusterRole its clusterRoleSelectors match (by name, each rule
once), as kube-controller-manager keeps them. It runs synchronously on every ClusterRole write, so
a request right after `kubectl apply` already sees the aggregated rules."""

from __future__ import annotations

import logging

from kubesim.api import errors
from kubesim.api.auth.escalation import CURRENT_USER
from kubesim.api.selectors import label_selector_from_dict, labels_match

log = logging.getLogger("kubesim.rbac")
FIELD_MANAGER = "clusterrole-aggregation-controller"
_RBAC_V1 = "rbac.authorization.k8s.io/v1"


def _normal(rule: dict) -> dict:
    """A rule with empty lists dropped (nil and [] are the same rule)."""
    return {key: value for key, value in rule.items() if value not in (None, [], "")}


def aggregate_rules(role: dict, cluster_roles: list[dict]) -> list[dict]:
    """The rules `role`'s aggregationRule selects from `cluster_roles` (itself excluded)."""
    rule_spec = role.get("aggregationRule") or {}
    name = role["metadata"]["name"]
    out: list[dict] = []
    seen: list[dict] = []
    for selector in rule_spec.get("clusterRoleSelectors") or []:
        try:
            reqs = label_selector_from_dict(selector)
        except errors.ApiError:
            continue
        for other in sorted(cluster_roles, key=lambda r: r["metadata"]["name"]):
            if other["metadata"]["name"] == name:
                continue
            if not labels_match(reqs, other["metadata"].get("labels")):
                continue
            for rule in other.get("rules") or []:
                normal = _normal(rule)
                if normal not in seen:
                    seen.append(normal)
                    out.append(normal)
    return out


class ClusterRoleAggregator:
    """Keeps the rules of aggregated ClusterRoles in the store up to date."""

    def __init__(self, store):
        self.store = store
        self._running = False
        self._again = False

    def on_write(self, event_type: str, rtype, obj: dict, old: dict | None) -> None:
        if rtype.group == "rbac.authorization.k8s.io" and rtype.kind == "ClusterRole":
            self.sync()

    def sync(self) -> None:
        # an update made here writes ClusterRoles again: run once more instead of recursing
        if self._running:
            self._again = True
            return
        self._running = True
        # the controller writes as itself, not as the user whose write woke it
        acting = CURRENT_USER.set(None)
        try:
            for _ in range(20):  # chains of aggregated roles settle in a few passes
                self._again = False
                self._sync_once()
                if not self._again:
                    break
        finally:
            CURRENT_USER.reset(acting)
            self._running = False

    def _sync_once(self) -> None:
        roles = self.store.list(_RBAC_V1, "ClusterRole", None)
        for role in roles:
            if not role.get("aggregationRule"):
                continue
            wanted = aggregate_rules(role, roles)
            current = [_normal(r) for r in role.get("rules") or []]
            if current == wanted:
                continue
            try:
                self.store.patch(
                    _RBAC_V1,
                    "ClusterRole",
                    None,
                    role["metadata"]["name"],
                    {"rules": wanted},
                    patch_type="merge",
                    field_manager=FIELD_MANAGER,
                )
            except errors.ApiError as exc:  # deleted meanwhile, or a rule the schema refuses
                log.warning("aggregating ClusterRole %s: %s", role["metadata"]["name"], exc)
