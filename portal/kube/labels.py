"""Label keys and values that tie cluster objects to the portal (shared by every manifest module).

Pure constants, no `kubernetes` import: manifests are built from these, and deletes and drift
repair select by them, so the portal only ever touches objects it labelled itself.
"""

MANAGED_BY_KEY = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpu-portal"
FIELD_MANAGER = "gpu-portal"

JOB_ID_KEY = "gpu-portal.io/job-id"
PROJECT_KEY = "gpu-portal.io/project"
DEPARTMENT_KEY = "gpu-portal.io/department"
POOL_KEY = "gpu-portal.io/pool"
PRIORITY_KEY = "gpu-portal.io/priority"
# What kind of portal object a cluster object stands for: "job", "pool", "department", "project",
# "priority". Lets a sync list exactly the objects one kind of portal object owns.
OWNER_KIND_KEY = "gpu-portal.io/owner-kind"

MANAGED_SELECTOR = f"{MANAGED_BY_KEY}={MANAGED_BY}"


def managed_labels(**extra: str) -> dict[str, str]:
    """The managed-by label plus the given portal labels (values must already be strings)."""
    return {MANAGED_BY_KEY: MANAGED_BY, **extra}


def is_managed(obj: dict) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGED_BY_KEY) == MANAGED_BY
