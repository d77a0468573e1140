"""Bad input on the command line: every bad input gets a clear error (one line, exit 2, naming the argument, file
or line) or a counted, visible decision; nothing is lost, nothing silently changed. One test per case,
driven through the console scripts' `main` (in process) or the public API."""

from __future__ import annotations

import contextlib
import json
import logging
from types import SimpleNamespace

import pytest
from conftest import save_tiny_xlpe_model

from xlpe import XLPEMarianMTModel
from xlpe.features.corpus import ParallelSplit, read_parallel_files
from xlpe.features.prepare import prepare_splits


def one_error_line(capsys, prog: str) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("[transformers]")]
    assert len(err) == 1 and err[0].startswith(f"{prog}"), err
    assert "error: " in err[0]
    return err[0]


@pytest.fixture(scope="module")
def model_dir(toy_tokenizer, tmp_path_factory):
    """A tiny XL PE model (position table of 64) whose tokenizer claims a smaller limit (model_max_length 8)."""
    return save_tiny_xlpe_model(toy_tokenizer, tmp_path_factory.mktemp("model"), model_max_length=8)


def translate(model_dir, tmp_path, data: bytes, *extra: str) -> tuple[int, list[str]]:
    from xlpe.cli.translate import main

    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_bytes(data)
    status = main(
        [
            "--model",
            str(model_dir),
            "--input",
            str(source),
            "--output",
            str(output),
            "--num_beams",
            "1",
            "--max_new_tokens",
            "4",
            "--quiet",
            "--overwrite_output",
            *extra,
        ]
    )
    return status, output.read_text(encoding="utf-8").split("\n")[:-1] if status == 0 else []


# ------------------------------------------------------------------------------ wrong results with no error


def test_translate_never_splits_a_line_at_a_bare_carriage_return(model_dir, tmp_path):
    status, crlf = translate(model_dir, tmp_path, b"the cat sees the dog\r\nchildren play\r\n")
    assert status == 0 and len(crlf) == 2
    status, bare = translate(model_dir, tmp_path, b"the cat\rsees the dog\nchildren play\n")
    assert status == 0 and bare == crlf  # 2 lines in, 2 out, aligned; the \r is whitespace between words


def test_translate_long_inputs_in_full_when_the_model_takes_them_else_warns_with_line_numbers(
    model_dir, tmp_path, capsys
):
    from xlpe.cli.translate import load_pipeline

    translator = load_pipeline(str(model_dir))
    saved = json.loads((model_dir / "tokenizer_config.json").read_text())["model_max_length"]
    assert saved == 8 and translator.tokenizer.model_max_length == 64 == translator.source_limit()  # the model's
    long = " ".join(["the cat sees the dog"] * 4)  # ~20 tokens: over the saved tokenizer's 8, within the model's 64
    assert len(translator.tokenizer(long)["input_ids"]) > 8
    full = translator(long, num_beams=1, max_new_tokens=4, truncation=False)[0]["translation_text"].strip()
    cut = translator(long, num_beams=1, max_new_tokens=4, truncation=True)[0]["translation_text"].strip()
    assert cut == full  # the model's limit, not the tokenizer's
    too_long = " ".join(["the cat sees the dog"] * 20)  # ~100 tokens: over the model's 64
    status, output = translate(model_dir, tmp_path, f"{long}\n\n{too_long}\n".encode())
    assert status == 0 and output[0] == full and output[1] == "" and len(output) == 3
    err = capsys.readouterr().err
    long_lines = [line for line in err.splitlines() if "lines are longer than the model's limit" in line]
    assert len(long_lines) == 1 and long_lines[0].startswith("xlpe-translate: warning: 1 of 2 lines")
    assert "(64 tokens" in long_lines[0] and long_lines[0].endswith(": line 3")
    assert err.count("xlpe-translate: warning") == 2  # + the translations cut at their budget (untrained model)


def test_translate_pipeline_default_warns_when_it_cuts(model_dir, caplog):
    from xlpe.cli.translate import load_pipeline

    translator = load_pipeline(str(model_dir))
    logger = logging.getLogger("xlpe.models.pipeline_translation")
    logger.propagate = True
    with caplog.at_level(logging.WARNING):
        translator(" ".join(["the cat"] * 50), num_beams=1, max_new_tokens=2)
    assert any("longer than the model's limit of 64" in record.getMessage() for record in caplog.records)


def test_source_and_target_lengths_filter_each_side_by_its_own_limit(toy_tokenizer, monkeypatch):
    split = ParallelSplit(
        ["the cat", "the cat sees the dog in the garden with a small red ball"],
        ["die katze sieht den hund im garten mit dem kleinen ball", "der hund"],
        "<s>",
        "<t>",
    )
    prepared, reports = prepare_splits({"train": split}, toy_tokenizer, features=[], max_length=6, max_target_length=40)
    assert reports["train"]["pairs_kept"] == 1 and len(prepared["train"]) == 1
    assert reports["train"]["pairs_skipped"]["source_too_long"] == 1  # the second: source over 6 tokens
    assert reports["train"]["pairs_skipped"]["target_too_long"] == 0  # the first: target under 40, over 6
    from xlpe.training import data
    from xlpe.training.run_config import RunConfig

    captured = {}
    monkeypatch.setattr(
        data,
        "run_preparation",
        lambda splits, tokenizer, options: captured.update(options) or ({"train": [1]}, {"train": {"pairs_read": 1}}),
    )
    args = SimpleNamespace(
        prepared_dataset=None,
        nltk_data=None,
        max_source_length=16,
        max_target_length=64,
        preprocessing_num_workers=None,
        overwrite_cache=False,
        cache_dir=None,
    )
    training = SimpleNamespace(seed=0, do_train=False, main_process_first=lambda **_: contextlib.nullcontext())
    data.prepare_features({}, toy_tokenizer, [], {}, RunConfig(args, args, training), None)
    assert (captured["max_length"], captured["max_target_length"]) == (16, 64)


# ------------------------------------------------------------------------------ opaque errors


def test_non_utf8_inputs_name_file_line_and_byte_offset(model_dir, tmp_path, capsys):
    from xlpe.cli.evaluate import main as evaluate
    from xlpe.cli.translate import main as translate_main

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nbro\xffken\n")
    assert translate_main(["--model", str(model_dir), "--input", str(bad), "--output", str(tmp_path / "o.txt")]) == 2
    assert f"{bad}:2: invalid UTF-8 at byte offset 8 " in one_error_line(capsys, "xlpe-translate: error:")
    assert not (tmp_path / "o.txt").exists()
    (tmp_path / "ref.txt").write_text("fine\nbroken\n")
    assert evaluate(["bleu", "--hyp", str(bad), "--ref", str(tmp_path / "ref.txt")]) == 2
    assert f"{bad}:2: invalid UTF-8 at byte offset 8 " in one_error_line(capsys, "xlpe-evaluate: error:")
    assert evaluate(["bleu", "--hyp", str(tmp_path / "ref.txt"), "--ref", str(bad)]) == 2
    assert f"{bad}:2: invalid UTF-8" in one_error_line(capsys, "xlpe-evaluate: error:")


def test_evaluate_empty_and_mismatched_files_are_named(tmp_path, capsys):
    from xlpe.cli.evaluate import main

    empty, ref, hyp = tmp_path / "empty.txt", tmp_path / "ref.txt", tmp_path / "hyp.txt"
    empty.write_text("")
    ref.write_text("a b c\nd e f\n")
    hyp.write_text("a b c\n")
    assert main(["bleu", "--hyp", str(empty), "--ref", str(ref)]) == 2
    assert f"--hyp {empty}: the file is empty" in one_error_line(capsys, "xlpe-evaluate: error:")
    assert main(["bleu", "--hyp", str(ref), "--ref", str(empty)]) == 2
    assert f"--ref {empty}: the file is empty" in one_error_line(capsys, "xlpe-evaluate: error:")
    assert main(["significance", "--hyp", str(ref), "--baseline", str(hyp), "--ref", str(ref)]) == 2
    assert f"--hyp {ref} has 2 lines, --baseline {hyp} has 1" in one_error_line(capsys, "xlpe-evaluate: error:")
    assert main(["bleu", "--hyp", str(hyp), "--ref", str(ref), str(ref)]) == 2
    assert f"--hyp {hyp} has 1 lines, --ref {ref} has 2" in one_error_line(capsys, "xlpe-evaluate: error:")


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--max-length", "0"], "--max_length must be >= 1, got 0"),
        (["--num_proc", "0"], "--num_proc must be >= 1, got 0"),
        (["--eflomal-options", "[1]"], "--eflomal_options must be a JSON object"),
        (["--noise-ratio", "2"], r"--noise_ratio must be in [0, 1], got 2.0"),
    ],
)
def test_prepare_numbers_are_checked_before_any_work(tmp_path, capsys, extra, message):
    from xlpe.cli.prepare import main

    (tmp_path / "s").write_text("ein hund\n")
    (tmp_path / "t").write_text("a dog\n")
    with pytest.raises(SystemExit) as info:
        main(
            ["--source", str(tmp_path / "s"), "--target", str(tmp_path / "t"), "--output", str(tmp_path / "o"), *extra]
        )
    assert info.value.code == 2 and message in one_error_line(capsys, "xlpe-prepare: error:")


# ------------------------------------------------------------------------------ data safety


def test_existing_outputs_need_overwrite_output(model_dir, tmp_path, capsys):
    from xlpe.cli.evaluate import main as evaluate
    from xlpe.cli.prepare import main as prepare
    from xlpe.cli.reorder import main as reorder
    from xlpe.cli.translate import main as translate_main

    (tmp_path / "in.txt").write_text("the cat\n")
    existing = tmp_path / "existing.txt"
    existing.write_text("keep me\n")
    argv = [
        "--model",
        str(model_dir),
        "--input",
        str(tmp_path / "in.txt"),
        "--output",
        str(existing),
        "--num_beams",
        "1",
        "--max_new_tokens",
        "2",
        "--quiet",
    ]
    assert translate_main(argv) == 2
    assert f"--output {existing}: the file exists; pass --overwrite_output" in one_error_line(capsys, "xlpe-translate")
    assert existing.read_text() == "keep me\n"
    assert translate_main([*argv, "--overwrite-output"]) == 0 and existing.read_text() != "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.txt", "in.txt"]  # no temporary file left
    capsys.readouterr()

    assert (
        evaluate(
            ["bleu", "--hyp", str(tmp_path / "in.txt"), "--ref", str(tmp_path / "in.txt"), "--output", str(existing)]
        )
        == 2
    )
    assert "pass --overwrite_output" in one_error_line(capsys, "xlpe-evaluate")
    assert (
        evaluate(
            [
                "bleu",
                "--hyp",
                str(tmp_path / "in.txt"),
                "--ref",
                str(tmp_path / "in.txt"),
                "--output",
                str(existing),
                "--overwrite_output",
            ]
        )
        == 0
    )
    assert "bleu" in json.loads(existing.read_text())

    with pytest.raises(SystemExit) as info:
        reorder(
            [  # (a --reorderer holding --output would be refused as an input: writing there destroys it)
                "predict",
                "--reorderer",
                str(tmp_path / "reorderer"),
                "--input",
                str(tmp_path / "in.txt"),
                "--output",
                str(existing),
            ]
        )
    assert info.value.code == 2 and "pass --overwrite_output" in one_error_line(capsys, "xlpe-reorder")

    (tmp_path / "prepared").mkdir()
    with pytest.raises(SystemExit) as info:
        prepare(
            [
                "--source",
                str(tmp_path / "in.txt"),
                "--target",
                str(tmp_path / "in.txt"),
                "--output",
                str(tmp_path / "prepared"),
            ]
        )
    assert info.value.code == 2
    assert f"--output {tmp_path / 'prepared'}: the directory exists; pass --overwrite_output" in one_error_line(
        capsys, "xlpe-prepare"
    )


def test_corrupt_cache_entries_are_rebuilt_and_failures_leave_no_temporary_directory(
    toy_tokenizer, tmp_path, caplog, monkeypatch
):
    from xlpe.features import cache

    split = ParallelSplit(["the cat sees the dog", "a dog"], ["die katze sieht den hund", "ein hund"], "<s>", "<t>")
    options = dict(features=[], cache_dir=str(tmp_path))
    _, first = prepare_splits({"train": split}, toy_tokenizer, **options)
    _, second = prepare_splits({"train": split}, toy_tokenizer, **options)
    assert not first["train"]["cache_hit"] and second["train"]["cache_hit"]
    entry = next(tmp_path.glob("xlpe-prepare-*"))
    arrow = next(entry.rglob("*.arrow"))
    arrow.write_bytes(arrow.read_bytes()[:-7] + b"garbage")
    with caplog.at_level(logging.WARNING, logger="xlpe.features.cache"):
        prepared, third = prepare_splits({"train": split}, toy_tokenizer, **options)
    assert not third["train"]["cache_hit"] and len(prepared["train"]) == 2
    assert any(
        f"cache entry {entry} is corrupt" in r.getMessage() and arrow.name in r.getMessage() for r in caplog.records
    )
    assert prepare_splits({"train": split}, toy_tokenizer, **options)[1]["train"]["cache_hit"]  # rebuilt, verified

    def fail(path):
        raise OSError("disk full")

    monkeypatch.setattr(cache, "write_checksum", fail)
    with pytest.raises(OSError, match="disk full"):
        prepare_splits({"train": split}, toy_tokenizer, **options, overwrite_cache=True)
    assert [p.name for p in tmp_path.iterdir()] == [entry.name]  # no temporary directory left behind


def test_bom_is_not_glued_to_the_first_word(tmp_path):
    (tmp_path / "s").write_bytes(b"\xef\xbb\xbfthe cat\r\n")
    (tmp_path / "t").write_bytes(b"die katze\n")
    assert read_parallel_files(tmp_path / "s", tmp_path / "t").sources == ["the cat"]


def test_reorder_max_length_zero(tmp_path, capsys):
    from xlpe.cli.reorder import main

    (tmp_path / "s").write_text("a b\n")
    with pytest.raises(SystemExit) as info:
        main(
            [
                "train",
                "--source",
                str(tmp_path / "s"),
                "--target",
                str(tmp_path / "s"),
                "--output_dir",
                str(tmp_path / "r"),
                "--max-length",
                "0",
            ]
        )
    assert info.value.code == 2 and "--max_length must be >= 1, got 0" in one_error_line(capsys, "xlpe-reorder")


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--max_steps", "-5"],
            "--max_steps must be a positive number of optimizer steps, or -1 to train for --num_train_epochs",
        ),
        (["--max_steps", "0"], "got 0"),
        (["--max_steps", "-1", "--num_train_epochs", "0"], "--num_train_epochs must be > 0 when --max_steps is -1"),
        (["--max_source_length", "0"], "--max_source_length must be >= 1, got 0"),
    ],
)
def test_train_numbers_that_would_do_nothing(tmp_path, capsys, extra, message):
    from xlpe.cli.train import cli

    assert cli(["--output_dir", str(tmp_path / "run"), *extra]) == 2
    assert message in one_error_line(capsys, "xlpe-train: error:")


def test_train_builtin_dataset_and_files_name_both(tmp_path, capsys):
    from xlpe.cli.train import cli

    for name in ("train.en", "train.de"):
        (tmp_path / name).write_text("a b\n")
    assert (
        cli(
            [
                "--dataset_name",
                "builtin:synthetic",
                "--train_source_file",
                str(tmp_path / "train.en"),
                "--train_target_file",
                str(tmp_path / "train.de"),
                "--output_dir",
                str(tmp_path / "run"),
            ]
        )
        == 2
    )
    line = one_error_line(capsys, "xlpe-train: error:")
    assert (
        "--dataset_name builtin:synthetic and --train_source_file, --train_target_file both name training data" in line
    )


def test_train_model_flags_out_of_range_and_a_model_folder_without_tokenizer(model_dir, tmp_path, capsys):
    """Config values given as flags are checked like the config's own (config_checks.py): one line, exit 2."""
    from xlpe.cli.train import cli

    assert (
        cli(
            [
                "--output_dir",
                str(tmp_path / "a"),
                "--model_name_or_path",
                str(model_dir),
                "--model_type",
                "xlpe",
                "--xl_heads",
                "99",
                "--max_steps",
                "1",
            ]
        )
        == 2
    )
    assert "xl_heads (tau, of encoder_attention_heads=4) must be an integer >= 0 and <= 4, got 99" in one_error_line(
        capsys, "xlpe-train: error:"
    )
    bare = tmp_path / "bare"
    XLPEMarianMTModel.from_pretrained(model_dir).save_pretrained(bare)  # weights and config, no tokenizer files
    capsys.readouterr()
    assert cli(["--output_dir", str(tmp_path / "b"), "--model_name_or_path", str(bare), "--max_steps", "1"]) == 2
    assert f"no tokenizer could be loaded from {bare}" in one_error_line(capsys, "xlpe-train: error:")


# ------------------------------------------------------------------------------ outputs written whole: the rest


def leftovers(folder) -> list[str]:
    """Temporary files or directories of the atomic writers (`.NAME.*.tmp`, `.NAME.*.old`) anywhere under folder."""
    return sorted(str(p) for p in folder.rglob(".*") if p.name.endswith((".tmp", ".old")))


def test_compare_mt_output_dir_is_refused_replaced_whole_and_never_left_half_written(tmp_path, capsys, monkeypatch):
    pytest.importorskip("compare_mt")
    from xlpe.cli.evaluate import main

    for name, text in (("ref", "the cat sees the dog\na dog runs\n"), ("hyp", "the cat sees a dog\na dog runs\n")):
        (tmp_path / f"{name}.txt").write_text(text)
    report = tmp_path / "cmt"
    report.mkdir()
    (report / "old.txt").write_text("keep me\n")
    (report / "report.txt").write_text("an earlier compare-mt report\n")  # else not compare-mt's to replace
    argv = [
        "compare-mt",
        "--ref",
        str(tmp_path / "ref.txt"),
        "--hyp",
        f"sys={tmp_path / 'hyp.txt'}",
        "--output_dir",
        str(report),
    ]
    assert main(argv) == 2
    line = one_error_line(capsys, "xlpe-evaluate: error:")
    assert f"--output_dir {report}: the directory exists; pass --overwrite_output to replace it" in line
    assert sorted(p.name for p in report.iterdir()) == ["old.txt", "report.txt"]

    import compare_mt.reporters

    def disk_full(*args, **kwargs):
        raise OSError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr(compare_mt.reporters, "generate_html_report", disk_full)
        assert main([*argv, "--overwrite_output"]) == 2
    assert "disk full" in one_error_line(capsys, "xlpe-evaluate: error:")
    assert sorted(p.name for p in report.iterdir()) == ["old.txt", "report.txt"] and leftovers(tmp_path) == []

    assert main([*argv, "--overwrite-output"]) == 0  # the dash alias
    assert json.loads(capsys.readouterr().out)["html"] == str(report / "index.html")
    names = {p.name for p in report.iterdir()}
    assert {"index.html", "report.txt"} <= names and "old.txt" not in names  # replaced as a whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmt", "hyp.txt", "ref.txt"] and leftovers(tmp_path) == []

    (tmp_path / "afile").write_text("x")
    assert main([*argv[:-1], str(tmp_path / "afile"), "--overwrite_output"]) == 2
    assert f"--output_dir {tmp_path / 'afile'}: is a file, expected a directory" in one_error_line(
        capsys, "xlpe-evaluate"
    )


def test_plot_png_is_refused_replaced_whole_and_never_left_half_written(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    from xlpe.cli.evaluate import main
    from xlpe.features import text_files

    (tmp_path / "tau.json").write_text(json.dumps({"0": 27.1, "2": 27.6, "4": 27.9}))
    png = tmp_path / "tau.png"
    png.write_bytes(b"old")
    argv = ["plot", "tau", "--input", str(tmp_path / "tau.json"), "--output", str(png)]
    assert main(argv) == 2
    assert f"--output {png}: the file exists; pass --overwrite_output to replace it" in one_error_line(
        capsys, "xlpe-evaluate"
    )
    assert png.read_bytes() == b"old"

    real_replace = text_files.os.replace

    def fail_on_png(source, target):
        if str(target).endswith(".png"):
            raise OSError("disk full")
        return real_replace(source, target)

    with monkeypatch.context() as patch:
        patch.setattr(text_files.os, "replace", fail_on_png)
        assert main([*argv, "--overwrite_output"]) == 2
    assert "disk full" in one_error_line(capsys, "xlpe-evaluate")
    assert png.read_bytes() == b"old" and leftovers(tmp_path) == []

    assert main([*argv, "--overwrite-output"]) == 0
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tau.json", "tau.png"]


@pytest.fixture(scope="module")
def jackknife_inputs(toy_tokenizer, tmp_path_factory):
    """(prepared dataset dir with reorder_positions, tokenizer dir): 16 toy pairs whose targets reverse the source."""
    import datasets

    folder = tmp_path_factory.mktemp("jackknife_inputs")
    sources = [
        "the cat sees the dog",
        "a dog chases the small cat",
        "the man reads a book in the garden",
        "children play with a red ball",
    ] * 4
    targets = [" ".join(reversed(s.split())) for s in sources]
    links = [[x for i in range(len(s.split())) for x in (i, len(s.split()) - 1 - i)] for s in sources]
    split = ParallelSplit(sources, targets, "<s>", "<t>", alignments=links, alignment_origin="<a>")
    prepared, _ = prepare_splits({"train": split}, toy_tokenizer, features=["reorder_positions"])
    datasets.DatasetDict({"train": prepared["train"]}).save_to_disk(str(folder / "prepared"))
    toy_tokenizer.save_pretrained(folder / "tokenizer")
    return folder / "prepared", folder / "tokenizer"


def test_jackknife_refuses_a_finished_output_dir_resumes_an_unfinished_one(
    jackknife_inputs, tmp_path, capsys, monkeypatch
):
    import datasets

    from xlpe.cli.reorder import JACKKNIFE_UNFINISHED
    from xlpe.cli.reorder import main as reorder

    prepared, tokenizer = jackknife_inputs
    output = tmp_path / "jk"
    argv = [
        "jackknife",
        "--prepared",
        str(prepared),
        "--tokenizer",
        str(tokenizer),
        "--folds",
        "2",
        "--output_dir",
        str(output),
        "--epochs",
        "1",
        "--d-model",
        "32",
        "--token-layers",
        "1",
        "--word-layers",
        "1",
        "--batch-size",
        "8",
    ]

    def resumed_from(fold: int):
        return json.loads((output / "folds" / f"fold-{fold}" / "reorderer_training.json").read_text())["resumed_from"]

    assert reorder(argv) == 0
    assert json.loads(capsys.readouterr().out)["train_pairs"] == 16 and resumed_from(0) is None
    assert sorted(p.name for p in output.iterdir()) == ["data", "folds"] and leftovers(tmp_path) == []
    assert not (output / "folds" / JACKKNIFE_UNFINISHED).exists()

    # finished: refused before any work (no dataset is read: --prepared may even be missing)
    with pytest.raises(SystemExit) as info:
        reorder([*argv[:2], str(tmp_path / "missing"), *argv[3:]])
    assert info.value.code == 2
    line = one_error_line(capsys, "xlpe-reorder: error:")
    assert f"--output_dir {output / 'data'}: the directory exists; pass --overwrite_output to replace it" in line

    # --overwrite_output: the folds trained afresh, data/ replaced as a whole
    (output / "data" / "stale.txt").write_text("old\n")
    assert reorder([*argv, "--overwrite-output"]) == 0
    capsys.readouterr()
    assert resumed_from(0) is None and not (output / "data" / "stale.txt").exists()
    assert len(datasets.load_from_disk(str(output / "data"))["train"]) == 16 and leftovers(tmp_path) == []

    # a failure while writing data/: nothing half-written, the run stays unfinished, and a rerun resumes its folds
    def disk_full(self, *args, **kwargs):
        raise OSError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr(datasets.DatasetDict, "save_to_disk", disk_full)
        with pytest.raises(SystemExit) as info:
            reorder([*argv, "--overwrite_output"])
    last = capsys.readouterr().err.strip().splitlines()[-1]  # (after the folds' progress bars)
    assert info.value.code == 2 and last == "xlpe-reorder jackknife: error: disk full"
    assert (output / "folds" / JACKKNIFE_UNFINISHED).is_file() and leftovers(tmp_path) == []
    assert len(datasets.load_from_disk(str(output / "data"))["train"]) == 16  # the old data/, whole
    assert reorder([*argv, "--overwrite_output"]) == 0
    capsys.readouterr()
    assert "checkpoint-" in resumed_from(0) and "checkpoint-" in resumed_from(1)  # resumed, not retrained
    assert not (output / "folds" / JACKKNIFE_UNFINISHED).exists() and leftovers(tmp_path) == []

    # an output_dir without data/ (interrupted before writing it) is resumed without the flag
    import shutil

    shutil.rmtree(output / "data")
    assert reorder(argv) == 0
    capsys.readouterr()
    assert "checkpoint-" in resumed_from(0) and (output / "data").is_dir()


def test_train_writes_its_own_json_files_whole(tmp_path, monkeypatch, capsys):
    import inspect

    from xlpe.features import text_files
    from xlpe.training import checkpoint_averaging, reorderer, run, run_evaluation
    from xlpe.training.run_config import RunConfig

    for module in (
        run,
        run_evaluation,
        reorderer,
        checkpoint_averaging,
    ):  # every file xlpe-train writes goes through it
        assert ".write_text(" not in inspect.getsource(module), module.__name__
    output = tmp_path / "run"
    output.mkdir()
    (output / "recipe.json").write_text('{"recipe": "old"}')
    parsed = RunConfig(
        SimpleNamespace(model_name_or_path=None, config_name=None),
        SimpleNamespace(uses_builtin_corpus=lambda: False, prepared_dataset=None),
        SimpleNamespace(recipe="small", output_dir=str(output), do_train=True, process_index=0),
    )
    real_replace = text_files.os.replace

    def disk_full(source, target):
        raise OSError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr(text_files.os, "replace", disk_full)
        with pytest.raises(OSError, match="disk full"):
            run.apply_recipe(parsed, {"validation": object()}, None)
    assert (output / "recipe.json").read_text() == '{"recipe": "old"}' and leftovers(tmp_path) == []
    assert text_files.os.replace is real_replace
    run.apply_recipe(parsed, {"validation": object()}, None)  # replaced without a flag: xlpe-train's semantics
    assert json.loads((output / "recipe.json").read_text())["recipe"] == "small"
    assert [p.name for p in output.iterdir()] == ["recipe.json"]
