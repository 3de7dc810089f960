"""Authentication and authorization as kube-apiserver does them.

- `user`: who a request is (UserInfo) and the well-known users and groups;
- `tokens`: ServiceAccount JWTs (TokenRequest and legacy Secret tokens) signed by kubesim's key;
- `authn`: bearer token -> user, and impersonation (`Impersonate-User`, `kubectl --as`);
- `requestinfo`: a URL and method -> verb, API group, resource, subresource, name, namespace;
- `rbac`: the RBAC authorizer (Roles, ClusterRoles, bindings; rules compiled and cached);
- `bootstrap`: the default ClusterRoles and bindings a cluster starts with;
- `aggregation`: the clusterrole-aggregation controller (aggregationRule -> rules);
- `escalation`: no Role or binding granting more than its writer holds (escalate/bind verbs);
- `apis`: TokenRequest, TokenReview, SelfSubjectReview and the access/rules reviews;
- `layer`: what the server calls on every request.

Enforcement is opt-in (`python -m kubesim --rbac`); without it every authenticated request is
allowed, as with kube-apiserver's AlwaysAllow mode.
"""
