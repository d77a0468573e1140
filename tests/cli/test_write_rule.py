"""The write rule on its own (docs/command_line.md, "What a command may write"; `xlpe.features.outputs`): for every
command that writes, an output that is, holds or lies inside one of its inputs (directly or through a symlink) is
refused with one line and exit status 2, with and without --overwrite_output, and every input file is unchanged
(a SHA-256 fingerprint of the whole working folder); an unwritable destination is refused before any work; a
command replaces its own earlier output; two writers of one --output file never both run; a failed final write is
one line and leaves no partial file."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest
from conftest import TOY_SENTENCES, save_tiny_xlpe_model

from xlpe.cli import evaluate, export, prepare, reorder, tagger, train, translate
from xlpe.features.outputs import output_file_lock

CONLLU = "1\tthe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tcat\tcat\tNOUN\tNN\t_\t0\troot\t_\t_\n\n"


def fingerprint(directory: Path) -> dict:
    """{relative path: sha256} of every file under `directory` (lock files aside): what a refusal must keep."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.name.endswith(".xlpe.lock")
    }


def run(main, argv) -> int:
    try:
        return main([str(a) for a in argv])
    except SystemExit as exit:  # prepare, reorder and tagger leave through parser.exit
        return exit.code


def one_line_error(capsys, prog: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(prog) and "error:" in line]
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    return lines[0]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, toy_tokenizer):
    return save_tiny_xlpe_model(toy_tokenizer, tmp_path_factory.mktemp("model") / "M")


@pytest.fixture
def world(tmp_path, model_dir):
    """A working folder: runs/M (a tiny model), data/in.txt and data/ref.txt, data/t.conllu, data/prepared/."""
    import shutil

    shutil.copytree(model_dir, tmp_path / "runs" / "M")
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("\n".join(TOY_SENTENCES[:3]) + "\n", encoding="utf-8")
    (data / "ref.txt").write_text("\n".join(TOY_SENTENCES[1:4]) + "\n", encoding="utf-8")
    (data / "t.conllu").write_text(CONLLU, encoding="utf-8")
    (data / "prepared").mkdir()
    (data / "prepared" / "dataset_dict.json").write_text('{"splits": ["train"]}', encoding="utf-8")
    return tmp_path


# command -> (prog, main, argv for an output, the input it must not touch, what kind of output, overwrite flag)
COMMANDS = {
    "translate-input": (
        "xlpe-translate",
        translate.main,
        lambda w, out: ["--model", w / "runs/M", "--input", w / "data/in.txt", "--output", out, "--quiet"],
        "data/in.txt",
        "--overwrite_output",
    ),
    "translate-model": (
        "xlpe-translate",
        translate.main,
        lambda w, out: ["--model", w / "runs/M", "--input", w / "data/in.txt", "--output", out, "--quiet"],
        "runs/M",
        "--overwrite_output",
    ),
    "export": (
        "xlpe-export",
        export.main,
        lambda w, out: ["--model", w / "runs/M", "--output", out],
        "runs/M",
        "--overwrite_output",
    ),
    "prepare": (
        "xlpe-prepare",
        prepare.main,
        lambda w, out: ["--source", w / "data/in.txt", "--target", w / "data/ref.txt", "--output", out],
        "data/in.txt",
        "--overwrite-output",
    ),
    "evaluate-bleu": (
        "xlpe-evaluate",
        evaluate.main,
        lambda w, out: ["bleu", "--hyp", w / "data/in.txt", "--ref", w / "data/ref.txt", "--output", out],
        "data/ref.txt",
        "--overwrite_output",
    ),
    "evaluate-compare-mt": (
        "xlpe-evaluate",
        evaluate.main,
        lambda w, out: ["compare-mt", "--hyp", w / "data/in.txt", "--ref", w / "data/ref.txt", "--output_dir", out],
        "data/in.txt",
        "--overwrite_output",
    ),
    "reorder-predict": (
        "xlpe-reorder",
        reorder.main,
        lambda w, out: ["predict", "--reorderer", w / "runs/M", "--input", w / "data/in.txt", "--output", out],
        "data/in.txt",
        "--overwrite_output",
    ),
    "reorder-train": (
        "xlpe-reorder",
        reorder.main,
        lambda w, out: ["train", "--source", w / "data/in.txt", "--target", w / "data/ref.txt", "--output_dir", out],
        "data/ref.txt",
        "--overwrite_output",
    ),
    "reorder-jackknife": (
        "xlpe-reorder",
        reorder.main,
        lambda w, out: [
            "jackknife",
            "--prepared",
            w / "data/prepared",
            "--tokenizer",
            w / "runs/M",
            "--output_dir",
            out,
        ],
        "data/prepared",
        "--overwrite_output",
    ),
    "reorder-attach": (
        "xlpe-reorder",
        reorder.main,
        lambda w, out: ["attach", "--reorderer", w / "data/prepared", "--model", w / "runs/M", "--output_dir", out],
        "data/prepared",
        None,
    ),
    "tagger-train": (
        "xlpe-tagger",
        tagger.main,
        lambda w, out: ["train", "--conllu", w / "data/t.conllu", "--output", out],
        "data/t.conllu",
        None,
    ),
    "tagger-tag": (
        "xlpe-tagger",
        tagger.main,
        lambda w, out: ["tag", "--tagger", w / "data/t.conllu", "--input", w / "data/in.txt", "--output", out],
        "data/in.txt",
        None,
    ),
    "train": (
        "xlpe-train",
        train.cli,
        lambda w, out: ["--prepared_dataset", w / "data/prepared", "--output_dir", out],
        "data/prepared",
        "--overwrite_output_dir",
    ),
}


def _output_for(world: Path, source: Path, relation: str) -> Path:
    if relation == "is":
        return source
    if relation == "inside":
        return source / "sub" if source.is_dir() else source / "x"
    if relation == "contains":
        return source.parent
    link = world / "link"  # through a symlink
    link.symlink_to(source)
    return link


@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "overwrite"])
@pytest.mark.parametrize("relation", ["is", "inside", "contains", "symlink"])
@pytest.mark.parametrize("case", sorted(COMMANDS))
def test_output_over_an_input_is_refused(world, capsys, case, relation, overwrite):
    prog, main, argv, source, overwrite_flag = COMMANDS[case]
    if overwrite and overwrite_flag is None:
        pytest.skip(f"{prog} has no overwrite flag")
    output = _output_for(world, world / source, relation)
    before = fingerprint(world)
    code = run(main, [*argv(world, output), *([overwrite_flag] if overwrite else [])])
    line = one_line_error(capsys, prog)
    assert code == 2
    assert "writing there would destroy the input" in line and "choose another" in line, line
    assert fingerprint(world) == before


@pytest.mark.parametrize(
    "case,output,words",
    [
        ("export", "runs/M", "is the --model directory"),
        ("export", "runs/M/", "is the --model directory"),
        ("export", "runs", "contains the --model directory"),
        ("translate-input", "data/in.txt", "is the --input file"),
    ],
)
def test_the_message_names_both_flags(world, capsys, monkeypatch, case, output, words):
    prog, main, argv, _, overwrite_flag = COMMANDS[case]
    monkeypatch.chdir(world)
    code = run(main, [*[str(a).replace(f"{world}/", "") for a in argv(world, output)], overwrite_flag])
    line = one_line_error(capsys, prog)
    assert code == 2 and f"--output {output} {words}" in line, line
    assert line.endswith("choose another --output")


def test_export_over_another_kind_of_directory_is_refused(world, capsys):
    """A trained model (or any folder xlpe-export did not write) is no export: refused even with --overwrite_output."""
    other = world / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine\n")
    save_dir = world / "model-copy"
    import shutil

    shutil.copytree(world / "runs/M", save_dir)
    for output, holds in ((save_dir, "holds a model (config.json)"), (other, "holds 1 entry that no xlpe command")):
        before = fingerprint(world)
        code = run(export.main, ["--model", world / "runs/M", "--output", output, "--overwrite_output"])
        line = one_line_error(capsys, "xlpe-export")
        assert code == 2 and holds in line and "even with --overwrite_output" in line, line
        assert fingerprint(world) == before


def test_prepare_over_a_model_directory_is_refused(world, capsys):
    before = fingerprint(world)
    argv = ["--source", world / "data/in.txt", "--target", world / "data/ref.txt", "--output", world / "runs/M"]
    code = run(prepare.main, [*argv, "--overwrite-output"])
    line = one_line_error(capsys, "xlpe-prepare")
    assert code == 2 and "holds a model" in line, line
    assert fingerprint(world) == before


def _no_work(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded: the destination was not checked first")

    monkeypatch.setattr(translate, "load_pipeline", refuse)


def test_unwritable_destinations_are_refused_before_any_work(world, capsys, monkeypatch):
    _no_work(monkeypatch)
    argv = ["--model", world / "runs/M", "--input", world / "data/in.txt", "--quiet", "--overwrite_output"]
    (world / "a-dir").mkdir()
    cases = [(world / "a-dir", "is a directory, expected a file name"), (world / "none/out.txt", "no such directory")]
    if os.geteuid() != 0:  # root writes anywhere
        locked = world / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        cases.append((locked / "out.txt", "permission denied"))
    for output, words in cases:
        code = run(translate.main, [*argv, "--output", output])
        line = one_line_error(capsys, "xlpe-translate")
        assert code == 2 and words in line, line
    (world / "a-file").write_text("x")
    code = run(export.main, ["--model", world / "runs/M", "--output", world / "a-file", "--overwrite_output"])
    assert code == 2 and "is a file, expected a directory" in one_line_error(capsys, "xlpe-export")


def test_a_command_replaces_its_own_earlier_output(world, capsys):
    out = world / "out.txt"
    argv = ["--model", world / "runs/M", "--input", world / "data/in.txt", "--output", out, "--quiet"]
    assert run(translate.main, argv) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 3
    out.write_text("old\n")
    assert run(translate.main, argv) == 2 and "--overwrite_output" in one_line_error(capsys, "xlpe-translate")
    assert run(translate.main, [*argv, "--overwrite_output"]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 3
    assert sorted(p.name for p in world.iterdir()) == ["data", "out.txt", "runs"]  # no lock or temporary file left
    scores = world / "bleu.json"
    bleu = ["bleu", "--hyp", world / "data/in.txt", "--ref", world / "data/ref.txt", "--output", scores]
    assert run(evaluate.main, bleu) == 0
    assert run(evaluate.main, [*bleu, "--overwrite_output"]) == 0
    assert '"bleu"' in scores.read_text().lower()


def test_a_second_translate_onto_one_output_stops_at_once(world, capsys, monkeypatch):
    _no_work(monkeypatch)
    out = world / "out.txt"
    argv = ["--model", world / "runs/M", "--input", world / "data/in.txt", "--output", out, "--quiet"]
    with output_file_lock(out, "xlpe-translate --output out.txt"):  # the first run, still writing
        code = run(translate.main, argv)
    line = one_line_error(capsys, "xlpe-translate")
    assert code == 2 and f"pid {os.getpid()}" in line and "in use by" in line, line
    assert not out.exists()


def test_a_failed_final_write_is_one_line_and_leaves_nothing(world, capsys, monkeypatch):
    out = world / "out.txt"
    real_replace = os.replace

    def full_disk(source, target, *args, **kwargs):
        if str(target) == str(out):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full_disk)
    argv = ["--model", world / "runs/M", "--input", world / "data/in.txt", "--output", out, "--quiet"]
    code = run(translate.main, argv)
    line = one_line_error(capsys, "xlpe-translate")
    assert code == 2 and "No space left on device" in line and str(out) in line, line
    assert [p.name for p in world.iterdir() if p.name.startswith(".out.txt") and p.suffix == ".tmp"] == []
    assert not out.exists()


def test_export_and_prepare_replace_their_own_earlier_output_and_only_that(world, capsys):
    """--overwrite_output replaces what the command wrote before (an export, a prepared dataset), and the same
    folder holding another command's output is still refused."""
    pytest.importorskip("onnxruntime")
    exported = world / "onnx"
    argv = ["--model", world / "runs/M", "--output", exported]
    assert run(export.main, argv) == 0 and (exported / "export_manifest.json").is_file()
    assert run(export.main, argv) == 2 and "--overwrite_output" in one_line_error(capsys, "xlpe-export")
    assert run(export.main, [*argv, "--overwrite_output"]) == 0 and (exported / "export_manifest.json").is_file()
    prepared = world / "prepared-out"
    source, target = world / "data/in.txt", world / "data/ref.txt"
    prepare_argv = ["--source", source, "--target", target, "--output", prepared, "--tokenizer", world / "runs/M"]
    assert run(prepare.main, prepare_argv) == 0 and (prepared / "dataset_dict.json").is_file()
    assert run(prepare.main, [*prepare_argv, "--overwrite-output"]) == 0
    before = fingerprint(prepared)  # an export is not a prepared dataset: not replaced, even with the flag
    assert run(export.main, ["--model", world / "runs/M", "--output", prepared, "--overwrite_output"]) == 2
    assert "prepared dataset" in one_line_error(capsys, "xlpe-export") and fingerprint(prepared) == before
