"""The speed rows were measured on the code as it is (bench/hot_paths.py): a change to a forward or generation path
without re-running the rows it touches fails here, with the command that fixes it."""

from __future__ import annotations

import importlib.util
import shutil

from conftest import REPO_ROOT

spec = importlib.util.spec_from_file_location("hot_paths", REPO_ROOT / "bench" / "hot_paths.py")
hot_paths = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hot_paths)


def test_speed_rows_were_measured_on_this_code():
    problem = hot_paths.check()
    assert problem is None, problem


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
