"""The README is part of the interface: its commands are what CI runs, its Python example must run as is."""

from __future__ import annotations

import re

from conftest import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def test_readme_starts_with_install_and_test_commands():
    first_block = code_blocks("bash")[0].strip().splitlines()
    assert len(first_block) == 2
    assert first_block[0].startswith("pip install") and "xlpe-" in first_block[0]
    assert first_block[1].startswith("pip install") and "pytest" in first_block[1]
    ci_script = (REPO_ROOT / ".ci" / "run").read_text()
    assert first_block[1] in ci_script  # CI runs exactly the README's test command


def test_readme_python_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the example saves to ./xlpe-tiny
    example = code_blocks("python")[0]
    namespace: dict = {}
    exec(compile(example, "README.md", "exec"), namespace)
    printed = capsys.readouterr().out
    assert "[0, 1, 4, 2, 3, 5]" in printed  # the oracle reordering the comment promises
    assert "translation_text" in printed
    assert (tmp_path / "xlpe-tiny" / "pipeline_translation.py").is_file()
    assert namespace["out"].reorder_loss is not None
