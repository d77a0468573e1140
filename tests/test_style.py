"""The code is formatted and linted as pyproject.toml configures (ruff, pinned in the `test` extra so that every
machine formats alike): `ruff format --check` and `ruff check` over the repository, as CI runs them with the suite.

Fix locally with `ruff format . && ruff check --fix .` (CONTRIBUTING.md, "Style")."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff(*args: str) -> subprocess.CompletedProcess:
    command = [shutil.which("ruff")] if shutil.which("ruff") else [sys.executable, "-m", "ruff"]
    return subprocess.run([*command, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module", autouse=True)
def ruff_installed():
    try:
        version = ruff("--version")
    except (FileNotFoundError, OSError):
        version = None
    if version is None or version.returncode != 0:
        pytest.fail("ruff is not installed: it comes with the `test` extra (pip install -e '.[test]')")


def test_the_code_is_formatted():
    result = ruff("format", "--check", ".")
    assert result.returncode == 0, "run `ruff format .`:\n" + result.stdout + result.stderr


def test_the_linter_is_clean():
    result = ruff("check", "--output-format", "concise", ".")
    assert result.returncode == 0, "run `ruff check --fix .` and fix the rest:\n" + result.stdout + result.stderr


def test_no_formatter_escape_hatches():
    """No formatter escape hatch (the "fmt" skip/off comments) in the code: none is needed today."""
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True)
    paths = [ROOT / name for name in listed.stdout.split()] if listed.returncode == 0 else []
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in paths
        if "transformers_testing" not in path.parts and path.is_file()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "# fmt: " + "skip" in line or "# fmt: " + "off" in line
    ]
    assert not offenders, offenders
