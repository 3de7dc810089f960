"""Pod Security admission (the PodSecurity admission plugin): the `baseline` and `restricted`
levels of the Pod Security Standards, with upstream's check names and messages.

`check(pod_spec, pod_meta, level)` returns the violations as upstream words them ("host
namespaces (hostNetwork=true)"), each "summary (detail)"; the admission joins them into
`violates PodSecurity "restricted:latest": a (x), b (y)`.
"""

from __future__ import annotations

ENFORCE = "pod-security.kubernetes.io/enforce"
WARN = "pod-security.kubernetes.io/warn"
AUDIT = "pod-security.kubernetes.io/audit"
LEVELS = ("privileged", "baseline", "restricted")

_BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
_SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
}
_RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
_VOLUME_FIELDS = {
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "portworxVolume",
    "photonPersistentDisk",
    "scaleIO",
    "storageos",
    *_RESTRICTED_VOLUMES,
}


def _add(out: list, check_id: str, text: str) -> None:
    out.append((check_id, text))


def level_of(labels: dict | None, key: str = ENFORCE) -> str:
    value = (labels or {}).get(key) or "privileged"
    return value if value in LEVELS else "restricted"  # an invalid level is the strictest


def _containers(spec: dict) -> list[dict]:
    return [
        c
        for key in ("initContainers", "containers", "ephemeralContainers")
        for c in spec.get(key) or []
        if isinstance(c, dict)
    ]


def _quoted(names: list[str]) -> str:
    return ", ".join(f'"{n}"' for n in names)


def _containers_word(names: list[str]) -> str:
    return ("container " if len(names) == 1 else "containers ") + _quoted(names)


def _baseline(spec: dict, meta: dict) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    containers = _containers(spec)
    pod_sc = spec.get("securityContext") or {}
    host = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    if host:
        _add(out, "hostNamespaces", f"host namespaces ({', '.join(host)})")
    privileged = [
        c["name"] for c in containers if (c.get("securityContext") or {}).get("privileged")
    ]
    if privileged:
        _add(
            out,
            "privileged",
            f"privileged ({_containers_word(privileged)} must not set "
            "securityContext.privileged=true)",
        )
    bad_caps: dict[str, list[str]] = {}
    for c in containers:
        for cap in ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []:
            if cap not in _BASELINE_CAPABILITIES:
                bad_caps.setdefault(c["name"], []).append(cap)
    if bad_caps:
        names = list(bad_caps)
        caps = sorted({cap for v in bad_caps.values() for cap in v})
        _add(
            out,
            "capabilities_baseline",
            f"non-default capabilities ({_containers_word(names)} must not include "
            f"{_quoted(caps)} in securityContext.capabilities.add)",
        )
    host_path = [v.get("name") for v in spec.get("volumes") or [] if v.get("hostPath")]
    if host_path:
        word = "volume" if len(host_path) == 1 else "volumes"
        _add(out, "hostPathVolumes", f"hostPath volumes ({word} {_quoted(host_path)})")
    ports: dict[str, list[str]] = {}
    for c in containers:
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                ports.setdefault(c["name"], []).append(str(port["hostPort"]))
    if ports:
        all_ports = [p for v in ports.values() for p in v]
        _add(
            out,
            "hostPorts",
            f"hostPort ({_containers_word(list(ports))} uses "
            f"{'hostPort' if len(all_ports) == 1 else 'hostPorts'} {', '.join(all_ports)})",
        )
    unconfined = []
    if ((pod_sc.get("seccompProfile") or {}).get("type")) == "Unconfined":
        unconfined.append("pod")
    unconfined += [
        f'container "{c["name"]}"'
        for c in containers
        if ((c.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
        == "Unconfined"
    ]
    if unconfined:
        _add(
            out,
            "seccompProfile_baseline",
            f"seccompProfile ({' and '.join(unconfined)} must not set "
            'securityContext.seccompProfile.type to "Unconfined")',
        )
    proc = [
        c["name"]
        for c in containers
        if (c.get("securityContext") or {}).get("procMount") not in (None, "Default")
    ]
    if proc:
        _add(
            out,
            "procMount",
            f"procMount ({_containers_word(proc)} must not set "
            'securityContext.procMount to "Unmasked")',
        )
    sysctls = [
        s.get("name") for s in pod_sc.get("sysctls") or [] if s.get("name") not in _SAFE_SYSCTLS
    ]
    if sysctls:
        _add(out, "sysctls", f"forbidden sysctls ({', '.join(sysctls)})")
    return out


def _restricted(spec: dict, meta: dict) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    containers = _containers(spec)
    pod_sc = spec.get("securityContext") or {}
    bad_volumes = []
    for volume in spec.get("volumes") or []:
        kinds = [k for k in volume if k in _VOLUME_FIELDS]
        if kinds and kinds[0] not in _RESTRICTED_VOLUMES:
            bad_volumes.append((volume.get("name"), kinds[0]))
    if bad_volumes:
        names = [n for n, _ in bad_volumes]
        types = sorted({t for _, t in bad_volumes})
        word = "volume" if len(names) == 1 else "volumes"
        _add(
            out,
            "restrictedVolumes",
            f"restricted volume types ({word} {_quoted(names)} uses restricted volume "
            f"type{'s' if len(types) > 1 else ''} {_quoted(types)})",
        )
    escalation = [
        c["name"]
        for c in containers
        if (c.get("securityContext") or {}).get("allowPrivilegeEscalation") is not False
    ]
    if escalation:
        _add(
            out,
            "allowPrivilegeEscalation",
            f"allowPrivilegeEscalation != false ({_containers_word(escalation)} must set "
            "securityContext.allowPrivilegeEscalation=false)",
        )
    no_drop = [
        c["name"]
        for c in containers
        if "ALL"
        not in (((c.get("securityContext") or {}).get("capabilities") or {}).get("drop") or [])
    ]
    added = [
        c["name"]
        for c in containers
        if any(
            cap != "NET_BIND_SERVICE"
            for cap in ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
        )
    ]
    if no_drop or added:
        parts = []
        if no_drop:
            parts.append(
                f'{_containers_word(no_drop)} must set securityContext.capabilities.drop=["ALL"]'
            )
        if added:
            parts.append(
                f"{_containers_word(added)} must not include capabilities other than "
                '"NET_BIND_SERVICE" in securityContext.capabilities.add'
            )
        _add(out, "capabilities_restricted", f"unrestricted capabilities ({'; '.join(parts)})")
    pod_non_root = pod_sc.get("runAsNonRoot")
    not_set = [
        c["name"]
        for c in containers
        if (c.get("securityContext") or {}).get("runAsNonRoot", pod_non_root) is not True
    ]
    if not_set:
        _add(
            out,
            "runAsNonRoot",
            "runAsNonRoot != true (pod or "
            f"{_containers_word(not_set)} must set securityContext.runAsNonRoot=true)",
        )
    root_uid = [
        c["name"] for c in containers if (c.get("securityContext") or {}).get("runAsUser") == 0
    ]
    if pod_sc.get("runAsUser") == 0 or root_uid:
        who = "pod" if pod_sc.get("runAsUser") == 0 else _containers_word(root_uid)
        _add(out, "runAsUser", f"runAsUser=0 ({who} must not set runAsUser=0)")
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    missing = [
        c["name"]
        for c in containers
        if ((c.get("securityContext") or {}).get("seccompProfile") or {}).get("type", pod_seccomp)
        not in ("RuntimeDefault", "Localhost")
    ]
    if missing:
        who = "pod or " + _containers_word(missing)
        _add(
            out,
            "seccompProfile_restricted",
            f"seccompProfile ({who} must set securityContext.seccompProfile.type to "
            '"RuntimeDefault" or "Localhost")',
        )
    return out


def check(spec: dict, meta: dict, level: str) -> list[str]:
    """The violations of a pod spec at a level (privileged: none)."""
    if level == "privileged":
        return []
    found = dict(_baseline(spec, meta))
    if level == "restricted":
        found.update(_restricted(spec, meta))
        # the restricted versions of a check replace the baseline ones
        for check_id in ("capabilities", "seccompProfile"):
            if f"{check_id}_restricted" in found:
                found.pop(f"{check_id}_baseline", None)
    # upstream reports the checks in the order of their IDs
    return [text for _, text in sorted(found.items())]


def message(level: str, violations: list[str]) -> str:
    return f'violates PodSecurity "{level}:latest": ' + ", ".join(violations)
