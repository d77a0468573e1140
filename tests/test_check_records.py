"""bench/check_records.py, CI's step after the tests: each record check runs, a stale one is named with the command
that refreshes it, and the exit status says whether any is stale."""

from __future__ import annotations

import sys

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import check_records  # noqa: E402


def test_stale_records_are_named_and_fail(monkeypatch, capsys):
    monkeypatch.setitem(check_records.CHECKS, "speed rows measured on this code", lambda: ["the code changed: rerun"])
    monkeypatch.setitem(check_records.CHECKS, "benchmark tables rendered from their results", lambda: [])
    monkeypatch.setitem(check_records.CHECKS, "documentation timings quote their record", lambda: [])
    assert check_records.main() == 1
    out = capsys.readouterr().out
    assert "check_records: STALE: speed rows measured on this code\n  the code changed: rerun" in out
    assert "check_records: ok: benchmark tables rendered from their results" in out
    assert "1 of 3 records are stale" in out


def test_every_check_runs_on_the_tree():
    """Each check returns a list of problems (what they are is CI's step, not this test's)."""
    for name, check in check_records.CHECKS.items():
        assert isinstance(check(), list), name


def test_ci_runs_the_checks_as_their_own_step():
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python bench/check_records.py" in ci
    assert ci.index("python -m pytest") < ci.index("python bench/check_records.py")
