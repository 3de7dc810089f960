"""kubesim RBAC benchmark: what enforcing RBAC (--rbac) costs per request.

    .venv/bin/python bench/kubesim_rbac.py [--short] [--namespaces N] [--requests N]

- the authorizer in process, over a policy of N namespaces each with a Role and a RoleBinding for
  its ServiceAccount (plus the bootstrap roles): microseconds per decision once the user's rules
  are cached (allowed and denied), and the time to rebuild after an RBAC write drops the caches;
- GETs per second over one kept-alive HTTPS connection: kubesim without --rbac (admin token), and
  with --rbac as the admin and as a ServiceAccount whose RoleBinding allows the GET.
"""

from __future__ import annotations

import http.client
import ssl
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubesim.api.auth import bootstrap
from kubesim.api.auth.rbac import RBACAuthorizer
from kubesim.api.auth.requestinfo import request_attributes
from kubesim.api.auth.user import service_account_user

from bench import _harness as harness

RBAC = "rbac.authorization.k8s.io/v1"
RULES = [
    {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete", "get"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["registry"], "verbs": ["get"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["get", "list"]},
]


def policy(namespaces: int) -> list[dict]:
    objects = bootstrap.objects()
    for i in range(namespaces):
        ns = f"team-{i}"
        objects.append(
            {"kind": "Role", "metadata": {"name": "runner", "namespace": ns}, "rules": RULES}
        )
        objects.append(
            {
                "kind": "RoleBinding",
                "metadata": {"name": "runner", "namespace": ns},
                "roleRef": {"kind": "Role", "name": "runner"},
                "subjects": [{"kind": "ServiceAccount", "name": "runner", "namespace": ns}],
            }
        )
    return objects


def authorizer_figures(namespaces: int, decisions: int) -> None:
    objects = policy(namespaces)
    authorizer = RBACAuthorizer(lambda: objects)
    user = service_account_user("team-7", "runner")
    allowed = request_attributes(user, "GET", "/api/v1/namespaces/team-7/configmaps/c", {})
    denied = request_attributes(user, "DELETE", "/api/v1/namespaces/team-7/configmaps/c", {})
    assert authorizer.authorize(allowed).allowed
    assert not authorizer.authorize(denied).allowed
    for label, attrs in (("allowed", allowed), ("denied", denied)):
        start = time.perf_counter()
        for _ in range(decisions):
            authorizer.authorize(attrs)
        micros = (time.perf_counter() - start) / decisions * 1e6
        print(f"authorize(), rules cached, {label}: {micros:8.2f} µs per decision")
        harness.figure(f"authorize {label} (cached)", micros, "µs")
    role = next(
        o for o in objects if o["kind"] == "Role" and o["metadata"]["namespace"] == "team-7"
    )
    writes = 200
    start = time.perf_counter()
    for _ in range(writes):
        # as the server does on every RBAC write: the index updated, that namespace re-resolved
        authorizer.changed("MODIFIED", role)
        authorizer.authorize(allowed)
    micros = (time.perf_counter() - start) / writes * 1e6
    print(f"a Role write, then the next decision in its namespace: {micros:8.1f} µs")
    harness.figure("role write + next decision", micros, "µs")
    reloads = 20
    start = time.perf_counter()
    for _ in range(reloads):
        authorizer.invalidate()
        authorizer.authorize(allowed)
    millis = (time.perf_counter() - start) / reloads * 1e3
    print(
        f"full reload ({namespaces} namespaces, {len(objects)} RBAC objects), then a decision: "
        f"{millis:6.2f} ms"
    )
    harness.figure("full reload", millis, "ms")


def gets_per_second(server, token: str, path: str, requests: int) -> float:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=30)
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    for _ in range(20):  # warm: TLS session, caches
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status
    start = time.perf_counter()
    for _ in range(requests):
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        response.read()
    elapsed = time.perf_counter() - start
    conn.close()
    return requests / elapsed


def http_figures(stack: harness.Stack, requests: int) -> None:
    path = "/api/v1/namespaces/team-a/configmaps/settings"
    plain = stack.kubesim(name="plain", no_cluster=True)
    enforcing = stack.kubesim(name="rbac", no_cluster=True, rbac=True)
    for server in (plain, enforcing):
        for api_path, body in (
            ("/api/v1/namespaces", {"metadata": {"name": "team-a"}}),
            ("/api/v1/namespaces/team-a/configmaps", {"metadata": {"name": "settings"}}),
        ):
            status, _ = server.request("POST", api_path, body)
            assert status == 201, status
    token = enforcing.service_account_token("team-a", "runner")
    status, data = enforcing.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings",
        {
            "metadata": {"name": "runner-view"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "view",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "runner", "namespace": "team-a"}],
        },
    )
    assert status == 201, orjson.dumps(data)
    configurations = (
        ("without --rbac, admin token", plain, plain.token),
        ("with --rbac, admin token", enforcing, enforcing.token),
        ("with --rbac, ServiceAccount token", enforcing, token),
    )
    best: dict[str, float] = {}
    for _ in range(3):  # interleaved rounds, the best of each: load from elsewhere comes and goes
        for label, server, credential in configurations:
            rate = gets_per_second(server, credential, path, requests // 3)
            best[label] = max(best.get(label, 0.0), rate)
    for label, rate in best.items():
        print(f"GET one ConfigMap, {label:36} {rate:8.0f} requests/s (best of 3)")
        harness.figure(f"GET/s {label}", rate, "req/s")


def main() -> int:
    parser = harness.make_parser(__doc__, short={"namespaces": 200, "requests": 500})
    parser.add_argument("--namespaces", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=3000)
    args = harness.parse_args(parser)
    return harness.run(args, measure)


def measure(args, stack: harness.Stack) -> int | None:
    authorizer_figures(args.namespaces, decisions=100_000 if not args.short else 20_000)
    http_figures(stack, args.requests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
