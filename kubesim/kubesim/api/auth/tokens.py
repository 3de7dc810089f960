"""ServiceAccount tokens: JWTs signed (RS256) by a key kubesim generates at start.

Two kinds, as in Kubernetes:
- bound tokens from the TokenRequest API (`kubectl create token`, projected volumes): issuer,
  audiences, expiry, and the `kubernetes.io` claim naming the account (and the pod or secret the
  token is bound to);
- legacy tokens kept in Secrets of type kubernetes.io/service-account-token: no expiry, valid while
  the Secret holds them.
"""

from __future__ import annotations

import base64
import hashlib
import uuid

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

ISSUER = "https://kubernetes.default.svc.cluster.local"
LEGACY_ISSUER = "kubernetes/serviceaccount"
API_AUDIENCES = (ISSUER,)
LEEWAY_SECONDS = 60  # go-jose's default leeway, which kube-apiserver's validator keeps
_VERIFIED_CACHE_LIMIT = 10_000
LEGACY_PREFIX = "kubernetes.io/serviceaccount/"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenIssuer:
    """Signs and verifies ServiceAccount JWTs with one RSA key (kept in memory)."""

    def __init__(self, private_key: rsa.RSAPrivateKey | None = None):
        self._key = private_key or rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._public = self._key.public_key()
        der = self._public.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.key_id = _b64(hashlib.sha256(der).digest())
        self._header = _b64(orjson.dumps({"alg": "RS256", "kid": self.key_id}))
        # token -> claims of tokens whose signature checked out (verifying costs ~50 µs)
        self._verified: dict[str, dict] = {}

    def sign(self, claims: dict) -> str:
        signing_input = f"{self._header}.{_b64(orjson.dumps(claims))}"
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"

    def verified_claims(self, token: str) -> dict | None:
        """The claims of a token this issuer signed (None: not a JWT, or not ours)."""
        claims = self._verified.get(token)
        if claims is not None:
            return claims
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            header = orjson.loads(_unb64(parts[0]))
            payload = orjson.loads(_unb64(parts[1]))
            signature = _unb64(parts[2])
        except (ValueError, orjson.JSONDecodeError):
            return None
        if not isinstance(header, dict) or header.get("alg") != "RS256":
            return None
        if not isinstance(payload, dict):
            return None
        try:
            self._public.verify(
                signature,
                f"{parts[0]}.{parts[1]}".encode(),
                padding.PKCS1v15(),
                hashes.SHA256(),
            )
        except InvalidSignature:
            return None
        if len(self._verified) >= _VERIFIED_CACHE_LIMIT:
            self._verified.clear()
        self._verified[token] = payload
        return payload

    def public_jwks(self) -> dict:
        """The signing key as a JSON Web Key Set (/openid/v1/jwks)."""
        numbers = self._public.public_numbers()

        def encode_int(value: int) -> str:
            return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))

        return {
            "keys": [
                {
                    "use": "sig",
                    "kty": "RSA",
                    "kid": self.key_id,
                    "alg": "RS256",
                    "n": encode_int(numbers.n),
                    "e": encode_int(numbers.e),
                }
            ]
        }


def bound_claims(
    *,
    namespace: str,
    service_account: dict,
    audiences: list[str],
    now: float,
    expiration_seconds: int,
    bound_object: tuple[str, dict] | None = None,
    node: dict | None = None,
) -> dict:
    """The claims of a TokenRequest token (bound_object: ("pod" | "secret" | "node", object))."""
    sa_meta = service_account["metadata"]
    kubernetes: dict = {"namespace": namespace}
    if bound_object is not None:
        kind, obj = bound_object
        kubernetes[kind] = {"name": obj["metadata"]["name"], "uid": obj["metadata"].get("uid", "")}
    if node is not None:
        kubernetes["node"] = {
            "name": node["metadata"]["name"],
            "uid": node["metadata"].get("uid", ""),
        }
    kubernetes["serviceaccount"] = {"name": sa_meta["name"], "uid": sa_meta.get("uid", "")}
    issued = int(now)
    return {
        "aud": list(audiences),
        "exp": issued + int(expiration_seconds),
        "iat": issued,
        "iss": ISSUER,
        "jti": str(uuid.uuid4()),
        "kubernetes.io": kubernetes,
        "nbf": issued,
        "sub": f"system:serviceaccount:{namespace}:{sa_meta['name']}",
    }


def legacy_claims(namespace: str, secret_name: str, service_account: dict) -> dict:
    """The claims of a token the token controller writes into a service-account-token Secret."""
    sa_meta = service_account["metadata"]
    return {
        "iss": LEGACY_ISSUER,
        f"{LEGACY_PREFIX}namespace": namespace,
        f"{LEGACY_PREFIX}secret.name": secret_name,
        f"{LEGACY_PREFIX}service-account.name": sa_meta["name"],
        f"{LEGACY_PREFIX}service-account.uid": sa_meta.get("uid", ""),
        "sub": f"system:serviceaccount:{namespace}:{sa_meta['name']}",
    }
