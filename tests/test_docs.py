"""The README and the documentation site: short README whose first commands are the two set-up
commands, links that resolve, headings that name capabilities (not issue numbers), every setting
documented, and `mkdocs build --strict` passing (this is how `make test` builds the site)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
CONFIGURATION_PAGE = DOCS / "operations" / "configuration.md"

README_MAX_LINES = 200
SHELL_FENCE = re.compile(r"^```(?:sh|bash|shell|console)\s*$")
# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis.
MARKDOWN_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
ISSUE_NUMBER = re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)
# How portal/settings.py reads the environment: django-environ's env("X"), env.str("X", ...),
# env.bool/int/float/list/path/db(...), and plain os.environ / os.getenv.
SETTING_READ = re.compile(
    r"""(?:\benv(?:\.\w+)?|os\.environ\.get|os\.getenv)\(\s*["']([A-Z][A-Z0-9_]*)["']"""
    r"""|os\.environ\[\s*["']([A-Z][A-Z0-9_]*)["']\s*\]"""
)


def _doc_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _shell_commands(markdown: str) -> list[str]:
    """The commands of the shell code blocks, in order, without prompts and trailing comments."""
    commands, in_shell = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_shell = not in_shell and bool(SHELL_FENCE.match(line))
            continue
        if in_shell:
            command = line.split(" #", 1)[0].removeprefix("$ ").strip()
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def _headings(markdown: str) -> list[str]:
    """ATX headings outside code blocks."""
    headings, in_code = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and re.match(r"^#{1,6} ", line):
            headings.append(line)
    return headings


def test_the_readme_fits_on_a_screen_or_two():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_the_readme_opens_with_the_two_setup_commands():
    assert _shell_commands(README.read_text())[:2] == ["make demo", "make test"]


def test_every_relative_link_of_the_readme_resolves():
    targets = MARKDOWN_LINK.findall(README.read_text())
    relative = [
        t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")
    ]
    assert relative, "the README links into the docs"
    broken = [t for t in relative if not (REPO / t.split("#", 1)[0]).exists()]
    assert broken == []


def test_no_heading_or_title_names_an_issue_number():
    offenders = []
    for path in [README, *_doc_pages()]:
        text = path.read_text()
        name = path.relative_to(REPO)
        offenders += [f"{name}: {h}" for h in _headings(text) if ISSUE_NUMBER.search(h)]
        offenders += [f"{name}: {m}" for m in re.findall(r"\(issues? \d+[^)]*\)", text)]
    assert offenders == []


def test_every_setting_read_from_the_environment_is_documented():
    source = (REPO / "portal" / "settings.py").read_text()
    names = {a or b for a, b in SETTING_READ.findall(source)}
    # The settings read dozens of variables; finding few would mean the pattern went stale.
    assert len(names) > 40
    assert {"DATABASE_URL", "SECRET_KEY", "PORTAL_METRICS_ENABLED"} <= names
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]*)`", CONFIGURATION_PAGE.read_text()))
    assert sorted(names - documented) == []


@pytest.mark.timeout(180)
def test_the_documentation_site_builds_strictly(tmp_path):
    """Broken links, missing pages and missing anchors are warnings, which --strict fails on."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=170,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "index.html").exists()
    assert (tmp_path / "operations" / "configuration" / "index.html").exists()
