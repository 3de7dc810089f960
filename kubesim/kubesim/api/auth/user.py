"""Who a request is: kube-apiserver's user.Info, and the well-known names."""

from __future__ import annotations

from dataclasses import dataclass, field

ALL_AUTHENTICATED = "system:authenticated"
ALL_UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
MASTERS = "system:masters"  # the privileged group: allowed everything before RBAC is asked
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
SERVICE_ACCOUNTS_GROUP = "system:serviceaccounts"
ADMIN_USER = "kubesim-admin"


@dataclass(frozen=True, slots=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False, compare=False)

    @property
    def is_privileged(self) -> bool:
        return MASTERS in self.groups

    def to_api(self) -> dict:
        """authentication.k8s.io/v1 UserInfo."""
        out: dict = {"username": self.name}
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {key: list(values) for key, values in self.extra.items()}
        return out


ADMIN = UserInfo(ADMIN_USER, (MASTERS, ALL_AUTHENTICATED))
ANONYMOUS_USER = UserInfo(ANONYMOUS, (ALL_UNAUTHENTICATED,))


def service_account_username(namespace: str, name: str) -> str:
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


def split_service_account_username(username: str) -> tuple[str, str] | None:
    """(namespace, name) of "system:serviceaccount:NS:NAME", else None."""
    if not username.startswith(SERVICE_ACCOUNT_PREFIX):
        return None
    namespace, sep, name = username[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")
    if not sep or not namespace or not name or ":" in name:
        return None
    return namespace, name


def service_account_groups(namespace: str) -> tuple[str, ...]:
    return (SERVICE_ACCOUNTS_GROUP, f"{SERVICE_ACCOUNTS_GROUP}:{namespace}")


def service_account_user(namespace: str, name: str, uid: str = "", extra=None) -> UserInfo:
    return UserInfo(
        service_account_username(namespace, name),
        (*service_account_groups(namespace), ALL_AUTHENTICATED),
        uid,
        extra or {},
    )
