"""Writes for credentials: create, replace values, delete.

The values go to the cluster only: a Secret in the project's namespace, written by server-side
apply (portal/kube), named and labelled by credentials.manifests. The Credential row keeps the
key names and who changed it when. A row and its Secret change in one database transaction: the
row is written (and locked) first, the Secret applied inside the transaction, so a cluster error
rolls the row back. Project admins and staff write; every error names a field and never quotes a
value, and nothing here logs one.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from kubernetes.config.config_exception import ConfigException

from audit.services import created, diff, record, removed
from credentials import manifests as M
from credentials.models import Credential, CredentialKind
from credentials.validation import validate_kind, validate_name, validate_registry, validate_values
from portal.kube import apply as kube
from portal.kube.apply import KubeError, PermanentKubeError, is_rbac_denial
from tenants.models import Project
from tenants.permissions import administered_project, is_project_admin

log = logging.getLogger(__name__)
# No answer from the cluster, a refusal, or no cluster configured at all.
CLUSTER_ERRORS = (KubeError, ConfigException)


class ClusterUnavailable(Exception):
    """The Secret could not be written or read now; nothing was changed. Try again later."""


def _project_for_admin(actor: Any, project: Project | str) -> Project:
    return administered_project(actor, project, what="credentials")


def _check_admin(actor: Any, credential: Credential) -> None:
    if not is_project_admin(actor, credential.project):
        raise PermissionDenied(
            f"Only admins of project '{credential.project.slug}' manage its credentials."
        )


def _cluster_error(action: str, credential_name: str, exc: Exception) -> ClusterUnavailable:
    # Only the status, never the server's message: a refusal could quote what was sent.
    status = getattr(exc, "status", None)
    log.warning(
        "credential %s: %s failed (%s, HTTP %s)",
        credential_name,
        action,
        type(exc).__name__,
        status,
    )
    if isinstance(exc, PermanentKubeError) and status == 404:
        return ClusterUnavailable(
            "The project's namespace does not exist in the cluster yet; try again in a minute."
        )
    if isinstance(exc, PermanentKubeError) and is_rbac_denial(exc):
        # The API server's refusal names the permission and quotes nothing that was sent.
        return ClusterUnavailable(
            f"The portal is not allowed to do this in the cluster ({exc.message}); nothing was "
            "changed. An administrator has to grant the permission."
        )
    return ClusterUnavailable(
        f"The cluster did not accept the Secret (HTTP {status or 'no answer'}); nothing was "
        "changed. Try again later."
    )


def _existing_secret(credential: Credential) -> dict[str, Any] | None:
    try:
        return kube.get(
            "v1", "Secret", M.secret_name(credential.name), credential.project.namespace
        )
    except CLUSTER_ERRORS as exc:
        raise _cluster_error("read", credential.name, exc) from exc


def _apply(credential: Credential, manifest: dict[str, Any]) -> None:
    try:
        kube.apply(manifest)
    except CLUSTER_ERRORS as exc:
        raise _cluster_error("apply", credential.name, exc) from exc


def _secret_manifest(
    credential: Credential, *, values: dict[str, str] | None, username: str = "", token: str = ""
) -> dict[str, Any]:
    project = credential.project
    if credential.kind == CredentialKind.REGISTRY:
        return M.registry_secret(
            namespace=project.namespace,
            project_slug=project.slug,
            name=credential.name,
            server=credential.server,
            username=username,
            token=token,
        )
    return M.opaque_secret(
        namespace=project.namespace,
        project_slug=project.slug,
        name=credential.name,
        values=values or {},
    )


def credential_create(
    *,
    actor: Any,
    project: Project | str,
    name: str,
    kind: str,
    values: dict[str, str] | None = None,
    server: str = "",
    username: str = "",
    token: str = "",
) -> Credential:
    """Store a credential's name and keys and write its values into its Secret."""
    project = _project_for_admin(actor, project)
    errors: dict[str, list[str]] = {}
    validate_name(name, errors)
    validate_kind(kind, errors)
    normalized = ""
    if kind == CredentialKind.REGISTRY:
        if values:
            errors.setdefault("values", []).append(
                "A registry credential takes server, username and token, not values."
            )
        normalized = validate_registry(server=server, username=username, token=token, errors=errors)
    elif kind == CredentialKind.SECRET:
        validate_values(values, errors, required=True)
        for field, given in (("server", server), ("username", username), ("token", token)):
            if given:
                errors.setdefault(field, []).append("Only registry credentials take this field.")
    if errors:
        raise ValidationError(errors)
    keys = [M.DOCKER_CONFIG_KEY] if kind == CredentialKind.REGISTRY else sorted(values or {})
    try:
        with transaction.atomic():
            credential = Credential.objects.create(
                project=project,
                name=name,
                kind=kind,
                keys=keys,
                server=normalized,
                created_by=actor,
                updated_by=actor,
            )
            existing = _existing_secret(credential)
            if existing is not None and not M.is_portal_secret(existing, project.slug, name):
                raise ValidationError(
                    {
                        "name": [
                            f"The namespace already has a Secret {M.secret_name(name)!r} that the "
                            "portal did not write; choose another name."
                        ]
                    }
                )
            _apply(
                credential,
                _secret_manifest(credential, values=values, username=username, token=token),
            )
            # Key names and the registry server only: values never reach the trail.
            record(
                "credential.create",
                actor=actor,
                target=credential,
                changes=created({"kind": kind, "keys": keys, "server": normalized}),
            )
    except IntegrityError as exc:
        raise ValidationError(
            {"name": [f"Project {project.slug} already has a credential named {name!r}."]}
        ) from exc
    return credential


def credential_replace(
    *,
    actor: Any,
    credential: Credential,
    values: dict[str, str] | None = None,
    replace_all: bool = False,
    server: str = "",
    username: str = "",
    token: str = "",
) -> Credential:
    """Replace values. A secret credential: the given keys (replace_all: exactly the given keys,
    others removed). A registry login: username and token (and optionally the server) together,
    since the Secret holds them as one document."""
    _check_admin(actor, credential)
    errors: dict[str, list[str]] = {}
    if credential.kind == CredentialKind.REGISTRY:
        if values:
            errors.setdefault("values", []).append(
                "A registry credential takes server, username and token, not values."
            )
        normalized = validate_registry(
            server=server, username=username, token=token, errors=errors, server_required=False
        )
    else:
        validate_values(values, errors, required=True)
        for field, given in (("server", server), ("username", username), ("token", token)):
            if given:
                errors.setdefault(field, []).append("Only registry credentials take this field.")
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        # One replacement at a time per credential: a partial one merges with what the Secret
        # holds, so two at once must not both read the old values.
        locked = (
            Credential.objects.select_for_update().select_related("project").get(pk=credential.pk)
        )
        before_keys, before_server = list(locked.keys), locked.server
        if locked.kind == CredentialKind.REGISTRY:
            locked.server = normalized or locked.server
            manifest = _secret_manifest(locked, values=None, username=username, token=token)
        else:
            merged = dict(values or {})
            if not replace_all:
                existing = _existing_secret(locked)
                if existing is not None and M.is_portal_secret(
                    existing, locked.project.slug, locked.name
                ):
                    merged = {**M.decode_data(existing), **merged}
                missing = sorted(set(locked.keys) - set(merged))
                if missing:
                    raise ValidationError(
                        {
                            "values": [
                                "The Secret in the cluster is missing (deleted outside the "
                                f"portal?); give every key to write it again: {', '.join(missing)}."
                            ]
                        }
                    )
            locked.keys = sorted(merged)
            manifest = _secret_manifest(locked, values=merged)
        locked.updated_by = actor
        locked.save(update_fields=["keys", "server", "updated_by", "updated_at"])
        _apply(locked, manifest)
        record(
            "credential.replace",
            actor=actor,
            target=locked,
            changes=diff(
                {"keys": before_keys, "server": before_server},
                {"keys": locked.keys, "server": locked.server},
            ),
            detail="values replaced: "
            + (", ".join(sorted(values or {})) or "registry login")
            + (" (all keys)" if replace_all else ""),
        )
    return locked


def credential_delete(*, actor: Any, credential: Credential) -> bool:
    """Delete the credential and its Secret (only if the Secret carries the portal's labels for
    it). Returns whether a Secret was deleted. Jobs that still name it will not start."""
    _check_admin(actor, credential)
    with transaction.atomic():
        locked = (
            Credential.objects.select_for_update().select_related("project").get(pk=credential.pk)
        )
        existing = _existing_secret(locked)
        deleted = False
        if M.is_portal_secret(existing, locked.project.slug, locked.name):
            try:
                deleted = kube.delete(
                    "v1", "Secret", M.secret_name(locked.name), locked.project.namespace
                )
            except CLUSTER_ERRORS as exc:
                raise _cluster_error("delete", locked.name, exc) from exc
        target = (locked._meta.label_lower, locked.pk, str(locked))
        project = locked.project
        old = {"kind": locked.kind, "keys": locked.keys}
        locked.delete()
        record(
            "credential.delete",
            actor=actor,
            target=target,
            project=project,
            changes=removed(old),
            detail="its Secret deleted" if deleted else "no Secret of the portal's to delete",
        )
    return deleted
