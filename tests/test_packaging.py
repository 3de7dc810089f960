"""Packaging: the production install carries the portal alone, the supported Pythons are the ones
pyproject says, and a clone needs nothing outside itself (scripts/check-standalone.sh)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from tests.installing import HAVE_UV, INSTALLER_ENV, install_command

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
KUBESIM_PROJECT = tomllib.loads((REPO / "kubesim" / "pyproject.toml").read_text())["project"]
# What kubesim needs and the portal does not. (cryptography is both's: kubesim signs its serving
# certificates with it, the portal's single sign-on checks ID token signatures through Authlib;
# orjson too: kubesim encodes with it, the portal's watcher decodes watch events with it.)
SIM_PACKAGES = {
    "aiohttp",
    "common-expression-language",
    "jsonpatch",
    "kubernetes-validate",
}
# Their import names, blocked in the import test (aiohttp is left out: the kubernetes client
# itself requires it, so a production install has it anyway).
SIM_MODULES = ["cel", "jsonpatch", "kubernetes_validate", "kubesim"]


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=~!; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_kubesim_is_its_own_distribution_that_dev_pulls_in():
    extras = PROJECT["optional-dependencies"]
    assert names(PROJECT["dependencies"]).isdisjoint(SIM_PACKAGES)
    assert names(KUBESIM_PROJECT["dependencies"]) >= SIM_PACKAGES
    assert "sim" not in extras  # kubesim's dependencies are kubesim's, not an extra of the portal
    assert "kubesim[client]" in extras["dev"]
    assert KUBESIM_PROJECT["scripts"] == {"kubesim": "kubesim.__main__:main"}
    assert "kubesim*" in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["exclude"]


def test_supported_pythons_are_3_11_to_3_13_and_the_license_is_an_spdx_string():
    from packaging.specifiers import SpecifierSet

    supported = SpecifierSet(PROJECT["requires-python"])
    assert [v for v in ("3.10", "3.11", "3.12", "3.13", "3.14") if v in supported] == [
        "3.11",
        "3.12",
        "3.13",
    ]
    assert PROJECT["license"] == "Apache-2.0"  # a table is deprecated by setuptools 77
    assert "setuptools>=77" in PYPROJECT["build-system"]["requires"]


def test_the_image_installs_the_portal_alone():
    """The image copies the tree minus .dockerignore (tests/test_image.py replays it): kubesim and
    the CLI stay out, and the install is the portal, not editable, with no extra."""
    lines = [line.strip() for line in (REPO / "Dockerfile").read_text().splitlines()]
    left_out = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()}
    assert {"kubesim", "cli", "tests", ".venv", ".git"} <= left_out
    installs = [line for line in lines if "pip install" in line]
    assert installs == ["RUN pip install ."]


def portal_apps() -> list[str]:
    """The top-level packages the portal's distribution contains (its packages.find)."""
    from setuptools import find_packages

    find = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    return sorted(p for p in find_packages(REPO, exclude=find["exclude"]) if "." not in p)


def test_the_portal_distribution_holds_every_installed_app_and_no_kubesim():
    from django.conf import settings

    ours = {app.split(".")[0] for app in settings.INSTALLED_APPS if not app.startswith("django")}
    ours &= {p.name for p in REPO.iterdir() if p.is_dir()}
    assert ours <= set(portal_apps())
    assert not {"kubesim", "cli", "tests", "bench"} & set(portal_apps())


def test_every_portal_module_imports_without_kubesim_or_its_dependencies():
    """What the image has: Django setup and every module of the four apps import with the sim
    extra's packages (and kubesim itself) unimportable."""
    script = textwrap.dedent(
        f"""
        import importlib, pkgutil, sys

        BLOCKED = {SIM_MODULES!r}

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"{{name}} is not installed in production")

        sys.meta_path.insert(0, Block())
        import django
        django.setup()
        count = 0
        for package in {portal_apps()!r}:
            module = importlib.import_module(package)
            for info in pkgutil.walk_packages(module.__path__, package + "."):
                importlib.import_module(info.name)
                count += 1
        print(count)
        """
    )
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="portal.settings")
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[-1]) > 50  # really walked the apps


@pytest.fixture
def scratch_repo(tmp_path):
    """A git repository holding the check script and one ordinary file."""
    shutil.copytree(REPO / "scripts", tmp_path / "scripts")
    (tmp_path / "README.md").write_text("# a project\nshared settings live in settings.py\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    return tmp_path


def check(repo: Path) -> subprocess.CompletedProcess:
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    return subprocess.run(
        ["bash", str(repo / "scripts" / "check-standalone.sh"), str(repo)],
        capture_output=True,
        text=True,
    )


SHARED = ".." + "/shared"  # spelled in two parts so this file does not trip the check itself


@pytest.mark.parametrize(
    "text",
    [
        f"python -m kubesim --crds {SHARED}/crds",
        f"see {SHARED[3:]}/docs/nvidia.md section 1",
        f"Path(os.environ.get('PORTAL_{SHARED[3:].upper()}_DIR'))",
        f'REPO.parent / "{SHARED[3:]}"',
        f"cat /work/{SHARED[3:]}/fixtures/dcgm/SOURCES.md",
    ],
)
def test_check_standalone_fails_on_a_reference_to_the_shared_folder(scratch_repo, text):
    (scratch_repo / "jobs.py").write_text(f"# {text}\n")
    result = check(scratch_repo)
    assert result.returncode == 1
    assert "jobs.py:1:" in result.stderr


def test_check_standalone_passes_a_clean_repo_and_the_optional_conformance_test(scratch_repo):
    assert check(scratch_repo).returncode == 0
    conformance = scratch_repo / "tests" / "kubesim" / "test_conformance_client_e2e.py"
    conformance.parent.mkdir(parents=True)
    conformance.write_text(f"SUITE = REPO.parent / '{SHARED[3:]}' / 'conformance'  # {SHARED}\n")
    (scratch_repo / "notes.md").write_text("the unshared/docs folder and a shared_task\n")
    result = check(scratch_repo)
    assert result.returncode == 0, result.stderr


def test_this_repository_passes_the_standalone_check():
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "check-standalone.sh")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_kubesim_installs_alone_in_a_fresh_venv_and_runs(tmp_path):
    """`pip install ./kubesim` (not editable, no portal, no extra) gives a working `kubesim`
    (installed with uv where the test run has it: tests/installing.py)."""
    import venv

    venv.EnvBuilder(with_pip=not HAVE_UV).create(tmp_path / "venv")
    bin_dir = tmp_path / "venv" / "bin"
    env = {
        **INSTALLER_ENV,
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", str(tmp_path)),
    }
    source = tmp_path / "kubesim-src"
    shutil.copytree(
        REPO / "kubesim", source, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    install = subprocess.run(
        [*install_command(bin_dir / "python"), str(source)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    # Run from an empty folder: nothing of this checkout is importable there.
    help_text = subprocess.run(
        [bin_dir / "kubesim", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert help_text.returncode == 0, help_text.stderr
    assert "--kubeconfig-out" in help_text.stdout
    probe = subprocess.run(
        [bin_dir / "python", "-c", "import kubesim.__main__ as m, django"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "No module named 'django'" in probe.stderr  # kubesim alone, no portal dependencies
    crds = subprocess.run(
        [bin_dir / "python", "-c", "import kubesim.__main__ as m; print(m.DEFAULT_CRDS_DIR)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "site-packages" in crds.stdout
    assert list(Path(crds.stdout.strip()).glob("kueue/*.yaml"))  # the vendored CRDs ship with it
