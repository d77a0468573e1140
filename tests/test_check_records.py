"""bench/check_records.py, CI's step after the tests: each record check runs, a stale one is named with the command
that refreshes it, and the exit status says whether any is stale."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import check_records  # noqa: E402


def test_stale_records_are_named_and_fail(monkeypatch, capsys):
    monkeypatch.setitem(check_records.CHECKS, "speed rows measured on this code", lambda: ["the code changed: rerun"])
    monkeypatch.setitem(check_records.CHECKS, "benchmark tables rendered from their results", lambda: [])
    monkeypatch.setitem(check_records.CHECKS, "documentation timings quote their record", lambda: [])
    monkeypatch.setitem(check_records.CHECKS, "the flag schema and its help are the parser's", lambda: [])
    assert check_records.main() == 1
    out = capsys.readouterr().out
    assert "check_records: STALE: speed rows measured on this code\n  the code changed: rerun" in out
    assert "check_records: ok: benchmark tables rendered from their results" in out
    assert "1 of 4 records are stale" in out


def test_every_check_runs_on_the_tree():
    """Each check returns a list of problems (what they are is CI's step, not this test's)."""
    for name, check in check_records.CHECKS.items():
        assert isinstance(check(), list), name


def test_ci_runs_the_checks_as_their_own_step():
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python bench/check_records.py" in ci
    assert ci.index("python -m pytest") < ci.index("python bench/check_records.py")


def test_a_stale_flag_schema_is_named_with_its_refresh_command(tmp_path, monkeypatch):
    from xlpe.cli import train as train_cli

    stale = tmp_path / "train_flags.json"
    stale.write_text('{"version": 2, "key": "python 0.0, transformers 0, sources 0", "flags": []}\n', encoding="utf-8")
    monkeypatch.setattr(train_cli, "FLAGS_SNAPSHOT", stale)
    (problem,) = check_records.help_snapshot()
    assert "made from other sources or releases" in problem and "write_help_snapshot()" in problem


def test_a_flag_schema_that_is_not_the_parsers_is_named(tmp_path, monkeypatch):
    """The schema the command line is parsed with before torch (`train_flags.json`) is the parser's."""
    from xlpe.cli import train as train_cli

    if train_cli.read_schema(train_cli.FLAGS_SNAPSHOT, train_cli.snapshot_key()) is None:
        pytest.skip("the shipped schema is stale itself (check_records names that first)")
    copy = tmp_path / "train_flags.json"
    stored = json.loads(train_cli.FLAGS_SNAPSHOT.read_text(encoding="utf-8"))
    stored["flags"] = stored["flags"][1:]  # an option missing
    copy.write_text(json.dumps(stored), encoding="utf-8")
    monkeypatch.setattr(train_cli, "FLAGS_SNAPSHOT", copy)
    (problem,) = check_records.help_snapshot()
    assert "is not the parser's flag schema" in problem and "write_help_snapshot()" in problem
