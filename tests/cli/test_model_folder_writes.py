"""Every command that writes into an existing model folder takes the folder's lock, and `xlpe-reorder attach` writes
atomically (docs/command_line.md, "What a command may write"): a second writer stops at once naming the first, a
failed attach leaves the folder as it was, and a folder whose config names an attached reorderer its weights lack is
refused at load, never run with random reorderer weights."""

from __future__ import annotations

import hashlib
import random
import shutil
from pathlib import Path

import pytest

from xlpe.cli.push import main as push_main
from xlpe.cli.reorder import main as _reorder_main
from xlpe.features.artefacts import directory_lock

WORDS = "the cat dog sees chases small red ball man reads book garden".split()


def reorder_main(argv) -> int:
    """xlpe-reorder's exit status (its errors exit through argparse)."""
    try:
        return _reorder_main(argv)
    except SystemExit as stop:
        return stop.code


def fingerprint(directory: Path) -> dict:
    """{relative path: sha256} of every file under `directory` but its lock file."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != ".xlpe.lock"
    }


def one_error_line(capsys, prog: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(f"{prog}: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def reorderer(tmp_path_factory):
    """A tiny reorderer (1 epoch: only its files matter here)."""
    rng = random.Random(0)
    folder = tmp_path_factory.mktemp("attach_corpus")
    sources = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(40)]
    targets = [" ".join(reversed(s.split())).upper() for s in sources]
    links = [" ".join(f"{i}-{len(s.split()) - 1 - i}" for i in range(len(s.split()))) for s in sources]
    for name, lines in (("src", sources), ("tgt", targets), ("align", links)):
        (folder / f"train.{name}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    output = folder / "reorderer"
    argv = ["train", "--source", str(folder / "train.src"), "--target", str(folder / "train.tgt")]
    argv += ["--alignments", str(folder / "train.align"), "--output_dir", str(output), "--epochs", "1"]
    argv += ["--d-model", "16", "--token-layers", "1", "--word-layers", "1", "--vocab-size", "60"]
    assert reorder_main(argv) == 0
    return output


@pytest.fixture(scope="module")
def plain_model(reorderer, tmp_path_factory):
    """A tiny XL PE model with the reorderer's tokenizer, no reorderer attached yet."""
    from conftest import save_tiny_xlpe_model
    from transformers import AutoTokenizer

    return save_tiny_xlpe_model(AutoTokenizer.from_pretrained(reorderer), tmp_path_factory.mktemp("plain") / "model")


@pytest.fixture
def model(plain_model, tmp_path):
    shutil.copytree(plain_model, tmp_path / "model")
    return tmp_path / "model"


def attach(reorderer, model, *extra) -> list[str]:
    return ["attach", "--reorderer", str(reorderer), "--model", str(model), *extra]


# ---------------------------------------------------------------------------------------------------------
# The folder's lock: a second writer stops at once, naming the first
# ---------------------------------------------------------------------------------------------------------


def test_attach_into_a_model_folder_a_run_is_writing_stops_at_once(reorderer, model, capsys):
    before = fingerprint(model)
    capsys.readouterr()
    with directory_lock(model, "xlpe-train --output_dir model (resumed)"):
        assert reorder_main(attach(reorderer, model)) == 2
    line = one_error_line(capsys, "xlpe-reorder attach")
    assert f"--model {model} is in use by xlpe-train --output_dir model (resumed)" in line, line
    assert fingerprint(model) == before
    assert not [p for p in model.parent.iterdir() if p.name.startswith(".model.")]  # no staging left behind


def test_attach_to_an_output_dir_in_use_stops_at_once(reorderer, model, tmp_path, capsys):
    (tmp_path / "out").mkdir()
    with directory_lock(tmp_path / "out", "xlpe-reorder attach (the first)"):
        assert reorder_main(attach(reorderer, model, "--output_dir", str(tmp_path / "out"))) == 2
    assert "--output_dir" in one_error_line(capsys, "xlpe-reorder attach")
    assert fingerprint(tmp_path / "out") == {}


def test_push_of_a_model_folder_a_run_is_writing_stops_at_once(model, capsys):
    before = fingerprint(model)
    with directory_lock(model, "xlpe-train --output_dir model (resumed)"):
        assert push_main([str(model), "me/model", "--dry_run", "--language", "en", "de"]) == 2
    line = one_error_line(capsys, "xlpe-push")
    assert f"model_dir {model} is in use by xlpe-train --output_dir model (resumed)" in line, line
    assert fingerprint(model) == before and not (model / "README.md").exists()


# ---------------------------------------------------------------------------------------------------------
# Atomic attach; an incomplete reorderer is refused at load
# ---------------------------------------------------------------------------------------------------------


def test_attach_in_place_keeps_the_folder_and_adds_the_reorderer(reorderer, model, capsys):
    from xlpe import XLPEMarianMTModel

    (model / "train_results.json").write_text("{}")  # what a run left there stays
    assert reorder_main(attach(reorderer, model)) == 0
    loaded, info = XLPEMarianMTModel.from_pretrained(model, output_loading_info=True)
    assert loaded.get_encoder().reorderer is not None
    assert not any("reorderer" in key for key in info["missing_keys"]), info["missing_keys"]
    assert (model / "train_results.json").read_text() == "{}"
    assert not [p for p in model.parent.iterdir() if p.name.startswith(".model.")]


def test_a_failed_attach_leaves_the_folder_as_it_was(reorderer, model, capsys, monkeypatch):
    import xlpe.training.reorderer as reorderer_module

    def full_disk(source, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(reorderer_module, "copy_training_report", full_disk)  # after the weights are staged
    before = fingerprint(model)
    assert reorder_main(attach(reorderer, model)) == 2
    assert "No space left on device" in one_error_line(capsys, "xlpe-reorder attach")
    assert fingerprint(model) == before
    assert not [p for p in model.parent.iterdir() if p.name.startswith(".model.")]


def test_a_swap_failing_half_way_puts_every_file_back(tmp_path, monkeypatch):
    import os

    from xlpe.features import text_files

    folder = tmp_path / "m"
    folder.mkdir()
    for name in ("a.txt", "config.json", "keep.txt"):
        (folder / name).write_text(f"old {name}")
    before = fingerprint(folder)
    real = os.replace
    calls = []

    def failing(source, target):
        calls.append(target)
        if Path(target).name == "config.json" and Path(source).parent.name.endswith(".tmp"):
            raise OSError(5, "Input/output error")
        return real(source, target)

    monkeypatch.setattr(text_files.os, "replace", failing)
    with pytest.raises(OSError), text_files.files_swapped_into(folder) as staging:
        (staging / "a.txt").write_text("new a")
        (staging / "b.txt").write_text("new b")
        (staging / "config.json").write_text("new config")
    assert fingerprint(folder) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_a_config_naming_a_reorderer_its_weights_lack_is_refused_at_load(reorderer, model, tmp_path, capsys):
    """A save cut short after config.json: the new config (reorderer_config) over the old weights."""
    from xlpe import XLPEMarianMTModel
    from xlpe.cli.translate import main as translate_main

    attached = tmp_path / "attached"
    assert reorder_main(attach(reorderer, model, "--output_dir", str(attached))) == 0
    half = tmp_path / "half"
    shutil.copytree(model, half)
    shutil.copy(attached / "config.json", half / "config.json")
    with pytest.raises(ValueError, match=f"{half}: config.json has an attached reorderer but the weights lack"):
        XLPEMarianMTModel.from_pretrained(half)
    (tmp_path / "in.txt").write_text("the cat sees the dog\n")
    capsys.readouterr()
    assert translate_main(["--model", str(half), "--input", str(tmp_path / "in.txt"), "--quiet"]) == 2
    line = one_error_line(capsys, "xlpe-translate")
    assert str(half) in line and "attached reorderer" in line, line
