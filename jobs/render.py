"""Text renderings of job data shared by the REST API and the HTML pages (pure)."""

from typing import Any

import yaml


def manifests_yaml(manifests: list[dict[str, Any]]) -> str:
    """The job's Kubernetes objects as one multi-document YAML text."""
    return yaml.safe_dump_all(manifests, sort_keys=False)
