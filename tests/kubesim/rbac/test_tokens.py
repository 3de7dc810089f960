"""ServiceAccount tokens without a server: what a TokenRequest token says, and which tokens the
authenticator takes (signature, audience, expiry, the account and bound object still there)."""

from __future__ import annotations

import base64

import orjson
import pytest
from kubesim.api.auth import tokens
from kubesim.api.auth.authn import Authenticator, impersonated_user
from kubesim.api.auth.tokens import TokenIssuer
from kubesim.api.builtins import register_builtins
from kubesim.api.registry import Registry
from kubesim.api.store import Store
from kubesim.clock import SimClock
from multidict import CIMultiDict


class SettableClock(SimClock):
    """A simulated clock the test moves by hand."""

    def __init__(self, now: float):
        super().__init__()
        self.now_value = now

    def time(self) -> float:
        return self.now_value


@pytest.fixture
def clock():
    return SettableClock(1_800_000_000.0)


@pytest.fixture
def store(clock):
    registry = Registry()
    register_builtins(registry)
    store = Store(registry, clock)
    store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    store.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "runner"}},
        namespace="team-a",
    )
    return store


@pytest.fixture(scope="module")
def issuer():
    return TokenIssuer()


@pytest.fixture
def authenticator(store, issuer):
    return Authenticator(store, issuer, "admin-token")


def _token(store, issuer, *, seconds=3600, audiences=None, bound=None):
    account = store.get("v1", "ServiceAccount", "team-a", "runner")
    claims = tokens.bound_claims(
        namespace="team-a",
        service_account=account,
        audiences=audiences or list(tokens.API_AUDIENCES),
        now=store.clock.time(),
        expiration_seconds=seconds,
        bound_object=bound,
    )
    return issuer.sign(claims), claims


def _payload(token: str) -> dict:
    part = token.split(".")[1]
    return orjson.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def test_a_token_carries_the_claims_kube_apiserver_writes(store, issuer):
    token, _ = _token(store, issuer, seconds=600)
    account = store.get("v1", "ServiceAccount", "team-a", "runner")
    header = orjson.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    assert header == {"alg": "RS256", "kid": issuer.key_id}
    claims = _payload(token)
    now = int(store.clock.time())
    assert claims["iss"] == "https://kubernetes.default.svc.cluster.local"
    assert claims["sub"] == "system:serviceaccount:team-a:runner"
    assert claims["aud"] == ["https://kubernetes.default.svc.cluster.local"]
    assert (claims["iat"], claims["nbf"], claims["exp"]) == (now, now, now + 600)
    assert claims["kubernetes.io"] == {
        "namespace": "team-a",
        "serviceaccount": {"name": "runner", "uid": account["metadata"]["uid"]},
    }


def test_the_token_authenticates_as_the_service_account(store, issuer, authenticator):
    token, _ = _token(store, issuer)
    user = authenticator.authenticate_header(f"Bearer {token}")
    assert user.name == "system:serviceaccount:team-a:runner"
    assert user.groups == (
        "system:serviceaccounts",
        "system:serviceaccounts:team-a",
        "system:authenticated",
    )
    assert user.uid == store.get("v1", "ServiceAccount", "team-a", "runner")["metadata"]["uid"]


def test_a_token_expires_after_its_seconds_and_the_leeway(store, issuer, authenticator, clock):
    token, claims = _token(store, issuer, seconds=600)
    clock.now_value = claims["exp"] + tokens.LEEWAY_SECONDS
    assert authenticator.authenticate_token(token) is not None
    clock.now_value += 1
    assert authenticator.authenticate_token(token) is None


def test_tokens_not_signed_by_kubesim_are_refused(store, issuer, authenticator):
    token, _ = _token(store, issuer)
    header, payload, signature = token.split(".")
    forged = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    forged["sub"] = "system:serviceaccount:kube-system:admin"
    forged_payload = base64.urlsafe_b64encode(orjson.dumps(forged)).rstrip(b"=").decode()
    assert authenticator.authenticate_token(f"{header}.{forged_payload}.{signature}") is None
    other_issuer, _ = _token(store, TokenIssuer())
    assert authenticator.authenticate_token(other_issuer) is None
    assert authenticator.authenticate_token("not-a-jwt") is None
    assert authenticator.authenticate_header("Basic YWRtaW46YWRtaW4=") is None


def test_a_token_for_another_audience_is_not_accepted_by_the_api(store, issuer, authenticator):
    token, _ = _token(store, issuer, audiences=["vault"])
    assert authenticator.authenticate_token(token) is None
    assert authenticator.authenticate_token(token, ("vault",)) is not None


def test_a_token_dies_with_its_service_account_even_if_one_of_that_name_returns(
    store, issuer, authenticator
):
    token, _ = _token(store, issuer)
    store.delete("v1", "ServiceAccount", "team-a", "runner")
    assert authenticator.authenticate_token(token) is None
    store.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "runner"}},
        namespace="team-a",
    )
    assert authenticator.authenticate_token(token) is None  # a new uid


def test_a_token_bound_to_a_secret_dies_with_the_secret(store, issuer, authenticator):
    secret = store.create(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "holder"}},
        namespace="team-a",
    )
    token, _ = _token(store, issuer, bound=("secret", secret))
    assert authenticator.authenticate_token(token) is not None
    store.delete("v1", "Secret", "team-a", "holder")
    assert authenticator.authenticate_token(token) is None


def test_the_admin_token_and_anonymous_requests(store, issuer):
    closed = Authenticator(store, issuer, "admin-token")
    assert closed.authenticate_header("Bearer admin-token").groups == (
        "system:masters",
        "system:authenticated",
    )
    assert closed.authenticate_header(None) is None
    opened = Authenticator(store, issuer, "admin-token", anonymous=True)
    anonymous = opened.authenticate_header(None)
    assert (anonymous.name, anonymous.groups) == ("system:anonymous", ("system:unauthenticated",))
    assert opened.authenticate_header("Bearer wrong") is None  # a bad token is not anonymous


@pytest.mark.parametrize(
    ("headers", "name", "groups"),
    [
        (
            [("Impersonate-User", "system:serviceaccount:team-a:runner")],
            "system:serviceaccount:team-a:runner",
            ("system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"),
        ),
        (
            [("Impersonate-User", "bob"), ("Impersonate-Group", "researchers")],
            "bob",
            ("researchers", "system:authenticated"),
        ),
        (
            [("Impersonate-User", "system:anonymous")],
            "system:anonymous",
            ("system:unauthenticated",),
        ),
    ],
)
def test_impersonated_users_get_the_groups_kube_apiserver_gives_them(headers, name, groups):
    user = impersonated_user(CIMultiDict(headers))
    assert (user.name, user.groups) == (name, groups)
