"""The web entry points freeze the start-up heap (portal.runtime), so the cyclic collector's full
passes stop walking it: 90–110 ms pauses, the p99 of every page, before; 14–25 ms after."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("entry", ["portal.wsgi", "portal.asgi"])
def test_loading_the_application_freezes_the_start_up_heap(entry):
    code = (
        "import gc; assert gc.get_freeze_count() == 0; "
        f"import {entry}; print(gc.get_freeze_count())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    # Django, DRF and the kubernetes client: far more than a hundred thousand objects.
    assert int(done.stdout.strip().splitlines()[-1]) > 100_000
