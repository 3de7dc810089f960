"""Settings for bench/submit.py's child processes: the portal's settings plus the pacing knobs
from the environment (until portal/settings.py reads them itself, it just keeps them)."""

import os

from portal.settings import *  # noqa: F403

PORTAL_KUBE_QPS = float(os.environ.get("PORTAL_KUBE_QPS", "20"))
PORTAL_KUBE_BURST = int(os.environ.get("PORTAL_KUBE_BURST", "40"))
