"""bench/hot_paths.py: the record of the code the speed rows were measured on sees code changes (not prose) and says
how to refresh it. Whether the record is current is checked by `bench/check_records.py`, CI's own step."""

from __future__ import annotations

import importlib.util
import json
import shutil

from conftest import REPO_ROOT

spec = importlib.util.spec_from_file_location("hot_paths", REPO_ROOT / "bench" / "hot_paths.py")
hot_paths = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hot_paths)


def test_a_changed_hot_path_is_reported_with_the_command_that_refreshes_the_record(tmp_path):
    """Whether the rows were re-run is a record, checked by `bench/check_records.py` (CI's own step), not here:
    this tests that the check sees a hot-path change in a copy of the tree."""
    for path in hot_paths.HOT_PATHS:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / path, tmp_path / path)
    record = tmp_path / "hot_paths.json"
    shutil.copy(hot_paths.RECORD, record)
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "digest": hot_paths.hot_path_digest(tmp_path)}))
    assert hot_paths.check(record, tmp_path) is None
    target = tmp_path / "xlpe/models/sinusoid.py"
    target.write_text(target.read_text() + "\nUNUSED = 1\n")
    problem = hot_paths.check(record, tmp_path)
    assert problem and "bench/hot_paths.py --record" in problem


def test_the_digest_ignores_prose_and_sees_code(tmp_path):
    for path in hot_paths.HOT_PATHS:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / path, tmp_path / path)
    before = hot_paths.hot_path_digest(tmp_path)
    target = tmp_path / "xlpe/models/sinusoid.py"
    text = target.read_text()
    target.write_text(text.replace('"""', '"""Reworded. ', 1) + "\n# a comment\n")  # docstring and comment only
    assert hot_paths.hot_path_digest(tmp_path) == before
    target.write_text(text + "\nUNUSED = 1\n")  # code
    assert hot_paths.hot_path_digest(tmp_path) != before
