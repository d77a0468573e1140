"""The error discipline of every console script (`xlpe.cli.console_script`, docs/command_line.md "Errors and exit
codes"), as a table: each command through each class of condition (a device this machine lacks, a malformed flag
value, a damaged input file, a missing input, a full disk, an interrupt, an unexpected bug). Every row asserts the
exit status, that stderr ends in exactly one error line naming the flag or file, and that no traceback is printed;
a bug's line names the file its traceback was written to, and that file holds it. The entry points are called in
process (`main(argv)`); two real signals go to a subprocess."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import REPO_ROOT, save_tiny_xlpe_model

ENTRY_POINTS = {  # setup.cfg console_scripts
    "xlpe-demo": "xlpe.cli.demo:main",
    "xlpe-prepare": "xlpe.cli.prepare:main",
    "xlpe-train": "xlpe.cli.train:cli",
    "xlpe-translate": "xlpe.cli.translate:main",
    "xlpe-evaluate": "xlpe.cli.evaluate:main",
    "xlpe-reorder": "xlpe.cli.reorder:main",
    "xlpe-push": "xlpe.cli.push:main",
    "xlpe-tagger": "xlpe.cli.tagger:main",
    "xlpe-export": "xlpe.cli.export:main",
    "xlpe-compare": "xlpe.cli.compare:main",
}


def entry_point(prog: str):
    import importlib

    module, name = ENTRY_POINTS[prog].split(":")
    return getattr(importlib.import_module(module), name)


@pytest.fixture(scope="module")
def files(toy_tokenizer, tmp_path_factory) -> dict[str, str]:
    """The inputs the rows name: a tiny model, good and damaged text and JSON, a missing path, fake folders."""
    root = tmp_path_factory.mktemp("inputs")
    model = save_tiny_xlpe_model(toy_tokenizer, root / "model")
    (root / "good.en").write_text("the cat sees the dog\nchildren play\n", encoding="utf-8")
    (root / "good.de").write_text("die katze sieht den hund\nkinder spielen\n", encoding="utf-8")
    (root / "bad.de").write_bytes(b"die katze\n\xff\xfe kinder\n")  # not UTF-8 on line 2
    (root / "bad.json").write_text('{"bleu": 3', encoding="utf-8")  # cut short
    export = root / "export-cut"  # an export whose tokenizer.json was cut short
    export.mkdir()
    text = (model / "tokenizer.json").read_text(encoding="utf-8")
    (export / "tokenizer.json").write_text(text[: len(text) // 2], encoding="utf-8")
    stream_export = root / "export-streams"  # the translator itself is replaced (`fake_onnx_translator`)
    stream_export.mkdir()
    from datasets import Dataset, DatasetDict

    no_report = root / "prepared-no-report"  # an xlpe-prepare output (train split only) whose report.json is gone
    DatasetDict({"train": Dataset.from_dict({"input_ids": [[5, 2]], "labels": [[7, 2]]})}).save_to_disk(str(no_report))
    toy_tokenizer.save_pretrained(str(no_report / "tokenizer"))
    cut_report = root / "prepared-cut-report"
    shutil.copytree(no_report, cut_report)
    (cut_report / "report.json").write_text('{\n  "train": {', encoding="utf-8")
    return {
        "model": str(model),
        "good": str(root / "good.en"),
        "good_de": str(root / "good.de"),
        "bad": str(root / "bad.de"),
        "bad_json": str(root / "bad.json"),
        "missing": str(root / "no-such-file.txt"),
        "export-cut": str(export),
        "export-streams": str(stream_export),
        "no-report": str(no_report),
        "cut-report": str(cut_report),
        "root": str(root),
    }


# ---------------------------------------------------------------------------------------------------------
# Simulated conditions (monkeypatch helpers)
# ---------------------------------------------------------------------------------------------------------


def raising(error: BaseException) -> Callable:
    def function(*args, **kwargs):
        raise error

    return function


class FullDiskFile:
    """What `os.fdopen` gives on a full disk: a file whose write raises ENOSPC."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")


def full_disk_on_write(monkeypatch, files):
    """Every atomic output file (`text_files.write_bytes_atomic`) meets a full disk while it is written."""
    import xlpe.features.text_files as text_files

    real = os.fdopen

    def fdopen(fd, mode="r", *args, **kwargs):
        if "w" in mode:
            os.close(fd)
            return FullDiskFile()
        return real(fd, mode, *args, **kwargs)

    monkeypatch.setattr(text_files.os, "fdopen", fdopen)


def no_cuda(monkeypatch, files):
    """A CPU-only build of torch, whatever this machine has."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.version, "cuda", None)


def fake_onnx_translator(error: BaseException):
    """`OnnxTranslator` replaced by one whose second batch raises `error` (from a worker thread of --streams 2)."""

    class Translator:
        def __init__(self, directory, precision=None, threads=None, streams=1):
            self.streams = streams
            self.calls = 0

        def source_limit(self):
            return 64

        def translate_with_report(self, batch, **kwargs):
            self.calls += 1
            if self.calls >= 2:
                raise error
            time.sleep(0.05)
            return list(batch), [], []

    def patch(monkeypatch, files):
        import xlpe.export.runtime as runtime

        monkeypatch.setattr(runtime, "OnnxTranslator", Translator)

    return patch


def disk_full_while_staging(monkeypatch, files):
    """The export's directory meets a full disk while it is written beside its name (`atomic_output_dir`)."""
    import xlpe.export.exporter as exporter
    from xlpe.features.text_files import atomic_output_dir

    def export_directory(model, output, *args, **kwargs):
        with atomic_output_dir(output) as staging:
            (staging / "encoder_model.onnx").write_bytes(b"")
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(exporter, "export_directory", export_directory)


def patched(target: str, error: BaseException):
    """A row's simulation: the library function `module:name` raises `error`."""

    def patch(monkeypatch, files):
        import importlib

        module, name = target.split(":")
        owner, _, name = name.rpartition(".")
        holder = importlib.import_module(module)
        for part in filter(None, owner.split(".")):
            holder = getattr(holder, part)
        monkeypatch.setattr(holder, name, raising(error))

    return patch


# ---------------------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------------------

INTERRUPT = KeyboardInterrupt()
BUG = RuntimeError("a deliberate bug for the test")
FULL = OSError(errno.ENOSPC, "No space left on device", "/data/out/part-7")


@dataclass
class Row:
    prog: str
    condition: str
    argv: Callable[[dict, Path], list[str]]
    status: int
    names: tuple[str, ...]  # what the error line must name (flag, file), {key} filled from `files`, {out}
    setup: Callable | None = None
    extra: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.prog}-{self.condition}"


def translate_argv(**change):
    def argv(f, out):
        given = {"--model": f["model"], "--input": f["good"], "--output": str(out / "hyp.txt"), **change}
        return [item for pair in given.items() for item in pair] + ["--quiet", "--overwrite_output"]

    return argv


def prepare_argv(**change):
    def argv(f, out):
        given = {
            "--source": f["good"],
            "--target": f["good_de"],
            "--tokenizer": f["model"],
            "--output": str(out / "prepared"),
            **change,
        }
        return [item for pair in given.items() for item in pair]

    return argv


def bleu_argv(*more, hyp="good"):
    return lambda f, out: ["bleu", "--hyp", f[hyp], "--ref", f["good"], *more]


def perplexity_argv(device):
    return lambda f, out: [
        "perplexity",
        "--model",
        f["model"],
        "--source",
        f["good"],
        "--ref",
        f["good_de"],
        "--device",
        device,
    ]


def export_translate_argv(folder, *more):
    return lambda f, out: ["--translate", f[folder], "--input", f["good"], *more]


TRAIN_OUT = ["--max_steps", "1"]

ROWS = [
    # xlpe-demo (no files, no device)
    Row("xlpe-demo", "malformed-flag", lambda f, out: ["--steps", "0"], 2, ("--steps",)),
    Row(
        "xlpe-demo",
        "interrupt",
        lambda f, out: ["--steps", "1"],
        130,
        (),
        patched("xlpe.training.demo:run_demo", INTERRUPT),
    ),
    Row(
        "xlpe-demo",
        "full-disk",
        lambda f, out: ["--steps", "1"],
        2,
        ("/data/out/part-7",),
        patched("xlpe.training.demo:run_demo", FULL),
    ),
    Row("xlpe-demo", "bug", lambda f, out: ["--steps", "1"], 1, (), patched("xlpe.training.demo:run_demo", BUG)),
    # xlpe-prepare
    Row("xlpe-prepare", "malformed-flag", prepare_argv(**{"--max-length": "many"}), 2, ("max", "many")),
    Row("xlpe-prepare", "missing-input", prepare_argv(**{"--source": "{missing}"}), 2, ("--source", "{missing}")),
    Row("xlpe-prepare", "damaged-input", prepare_argv(**{"--target": "{bad}"}), 2, ("{bad}:2",)),
    Row(
        "xlpe-prepare",
        "mistyped-tokenizer-path",
        prepare_argv(**{"--tokenizer": "{root}/modle"}),
        2,
        ("--tokenizer", "no such local directory", "did you mean"),
    ),
    Row(
        "xlpe-prepare",
        "full-disk",
        prepare_argv(),
        2,
        ("{out}/prepared", "No space left"),
        patched("datasets:DatasetDict.save_to_disk", OSError(errno.ENOSPC, "No space left on device")),
    ),
    Row(
        "xlpe-prepare",
        "full-disk-tokenizers",
        prepare_argv(),
        2,
        ("{out}/prepared", "No space left"),
        patched(
            "transformers:PreTrainedTokenizerBase.save_pretrained", Exception("No space left on device (os error 28)")
        ),
    ),
    Row(
        "xlpe-prepare", "interrupt", prepare_argv(), 130, (), patched("xlpe.features.prepare:prepare_splits", INTERRUPT)
    ),
    Row("xlpe-prepare", "bug", prepare_argv(), 1, (), patched("xlpe.features.prepare:prepare_splits", BUG)),
    # xlpe-train (the run itself replaced where a row needs it to start)
    Row(
        "xlpe-train",
        "malformed-flag",
        lambda f, out: ["--learning_rate", "fast", "--output_dir", str(out / "run")],
        2,
        ("--learning_rate", "fast"),
    ),
    Row(
        "xlpe-train",
        "missing-input",
        lambda f, out: [
            "--train_source_file",
            f["missing"],
            "--train_target_file",
            f["good"],
            "--output_dir",
            str(out / "run"),
        ],
        2,
        ("{missing}",),
    ),
    Row(
        "xlpe-train",
        "damaged-input-no-report",
        lambda f, out: ["--prepared_dataset", f["no-report"], "--output_dir", str(out / "run"), *TRAIN_OUT],
        2,
        ("{no-report}", "report.json"),
    ),
    Row(
        "xlpe-train",
        "damaged-input-cut-report",
        lambda f, out: ["--prepared_dataset", f["cut-report"], "--output_dir", str(out / "run"), *TRAIN_OUT],
        2,
        ("{cut-report}/report.json:2",),
    ),
    Row(
        "xlpe-train",
        "interrupt",
        lambda f, out: ["--output_dir", str(out / "run"), *TRAIN_OUT],
        130,
        ("interrupted",),
        patched("xlpe.training.run:main", INTERRUPT),
    ),
    Row(
        "xlpe-train",
        "full-disk",
        lambda f, out: ["--output_dir", str(out / "run"), *TRAIN_OUT],
        2,
        ("/data/out/part-7",),
        patched("xlpe.training.run:main", FULL),
    ),
    Row(
        "xlpe-train",
        "bug",
        lambda f, out: ["--output_dir", str(out / "run"), *TRAIN_OUT],
        1,
        (),
        patched("xlpe.training.run:main", BUG),
    ),
    # xlpe-translate
    Row("xlpe-translate", "bad-device", translate_argv(**{"--device": "bogus"}), 2, ("--device bogus", "cpu")),
    Row("xlpe-translate", "bad-device-index", translate_argv(**{"--device": "cuda:99"}), 2, ("--device cuda:99",)),
    Row(
        "xlpe-translate",
        "cuda-on-cpu-build",
        translate_argv(**{"--device": "cuda"}),
        2,
        ("--device cuda", "without CUDA", "--device cpu"),
        no_cuda,
    ),
    Row("xlpe-translate", "malformed-flag", translate_argv(**{"--batch_size": "0"}), 2, ("--batch_size",)),
    Row("xlpe-translate", "missing-input", translate_argv(**{"--input": "{missing}"}), 2, ("--input", "{missing}")),
    Row("xlpe-translate", "damaged-input", translate_argv(**{"--input": "{bad}"}), 2, ("{bad}:2",)),
    Row("xlpe-translate", "full-disk", translate_argv(), 2, ("{out}/hyp.txt", "No space left"), full_disk_on_write),
    Row(
        "xlpe-translate",
        "interrupt",
        translate_argv(),
        130,
        (),
        patched("xlpe.cli.translate:translate_lines", INTERRUPT),
    ),
    Row("xlpe-translate", "bug", translate_argv(), 1, (), patched("xlpe.cli.translate:translate_lines", BUG)),
    # xlpe-evaluate
    Row("xlpe-evaluate", "bad-device", perplexity_argv("bogus"), 2, ("--device bogus",)),
    Row("xlpe-evaluate", "cuda-on-cpu-build", perplexity_argv("cuda"), 2, ("--device cuda", "without CUDA"), no_cuda),
    Row("xlpe-evaluate", "malformed-flag", bleu_argv("--lang", "english"), 2, ("--lang", "english")),
    Row("xlpe-evaluate", "missing-input", bleu_argv(hyp="missing"), 2, ("--hyp", "{missing}")),
    Row("xlpe-evaluate", "damaged-input", bleu_argv(hyp="bad"), 2, ("{bad}:2",)),
    Row(
        "xlpe-evaluate",
        "damaged-json",
        lambda f, out: ["plot", "tau", "--input", f["bad_json"], "--output", str(out / "p.png")],
        2,
        ("--input", "{bad_json}:1"),
    ),
    Row(
        "xlpe-evaluate",
        "full-disk",
        lambda f, out: ["bleu", "--hyp", f["good"], "--ref", f["good"], "--output", str(out / "bleu.json")],
        2,
        ("{out}/bleu.json", "No space left"),
        full_disk_on_write,
    ),
    Row("xlpe-evaluate", "interrupt", bleu_argv(), 130, (), patched("xlpe.cli.evaluate:run_bleu", INTERRUPT)),
    Row("xlpe-evaluate", "bug", bleu_argv(), 1, (), patched("xlpe.cli.evaluate:run_bleu", BUG)),
    # xlpe-reorder
    Row(
        "xlpe-reorder",
        "malformed-flag",
        lambda f, out: ["predict", "--reorderer", f["model"], "--input", f["good"], "--long_lines", "drop"],
        2,
        ("--long_lines", "drop"),
    ),
    Row(
        "xlpe-reorder",
        "missing-input",
        lambda f, out: ["predict", "--reorderer", f["model"], "--input", f["missing"]],
        2,
        ("{missing}",),
    ),
    Row(
        "xlpe-reorder",
        "interrupt",
        lambda f, out: ["predict", "--reorderer", f["model"], "--input", f["good"]],
        130,
        ("interrupted",),
        patched("xlpe.cli.reorder:run_predict", INTERRUPT),
    ),
    Row(
        "xlpe-reorder",
        "full-disk",
        lambda f, out: ["predict", "--reorderer", f["model"], "--input", f["good"]],
        2,
        ("/data/out/part-7",),
        patched("xlpe.cli.reorder:run_predict", FULL),
    ),
    Row(
        "xlpe-reorder",
        "bug",
        lambda f, out: ["predict", "--reorderer", f["model"], "--input", f["good"]],
        1,
        (),
        patched("xlpe.cli.reorder:run_predict", BUG),
    ),
    # xlpe-push (never reaches the Hub: --dry_run, and the upload replaced where a row needs it)
    Row("xlpe-push", "missing-input", lambda f, out: [f["missing"], "me/model", "--dry_run"], 2, ("{missing}",)),
    Row(
        "xlpe-push",
        "damaged-input",
        lambda f, out: [f["model"], "me/model", "--dry_run", "--eval_results", f["bad_json"]],
        2,
        ("--eval_results", "{bad_json}:1"),
    ),
    Row(
        "xlpe-push",
        "malformed-flag",
        lambda f, out: [f["model"], "me/model", "--dry_run", "--language", "english"],
        2,
        ("english",),
    ),
    Row(
        "xlpe-push",
        "interrupt",
        lambda f, out: [f["model"], "me/model", "--dry_run"],
        130,
        (),
        patched("xlpe.cli.push:_push", INTERRUPT),
    ),
    Row(
        "xlpe-push",
        "full-disk",
        lambda f, out: [f["model"], "me/model", "--dry_run"],
        2,
        ("/data/out/part-7",),
        patched("xlpe.cli.push:_push", FULL),
    ),
    Row(
        "xlpe-push",
        "bug",
        lambda f, out: [f["model"], "me/model", "--dry_run"],
        1,
        (),
        patched("xlpe.cli.push:_push", BUG),
    ),
    # xlpe-tagger
    Row(
        "xlpe-tagger",
        "missing-input",
        lambda f, out: ["tag", "--tagger", f["missing"], "--input", f["good"]],
        2,
        ("--tagger", "{missing}"),
    ),
    Row(
        "xlpe-tagger",
        "malformed-flag",
        lambda f, out: ["train", "--conllu", f["good"], "--output", str(out / "t.json"), "--iterations", "0"],
        2,
        ("--iterations",),
    ),
    Row(
        "xlpe-tagger",
        "interrupt",
        lambda f, out: ["tag", "--tagger", f["good"], "--input", f["good"]],
        130,
        (),
        patched("xlpe.cli.tagger:run_tag", INTERRUPT),
    ),
    Row(
        "xlpe-tagger",
        "full-disk",
        lambda f, out: ["tag", "--tagger", f["good"], "--input", f["good"]],
        2,
        ("/data/out/part-7",),
        patched("xlpe.cli.tagger:run_tag", FULL),
    ),
    Row(
        "xlpe-tagger",
        "bug",
        lambda f, out: ["tag", "--tagger", f["good"], "--input", f["good"]],
        1,
        (),
        patched("xlpe.cli.tagger:run_tag", BUG),
    ),
    # xlpe-export
    Row("xlpe-export", "malformed-flag", export_translate_argv("export-streams", "--streams", "0"), 2, ("--streams",)),
    Row(
        "xlpe-export",
        "missing-input",
        lambda f, out: ["--model", f["missing"], "--output", str(out / "onnx")],
        2,
        ("--model", "{missing}"),
    ),
    Row(
        "xlpe-export",
        "damaged-tokenizer-translate",
        export_translate_argv("export-cut"),
        2,
        ("{export-cut}/tokenizer.json:",),
    ),
    Row(
        "xlpe-export",
        "damaged-tokenizer-verify",
        lambda f, out: ["--verify", f["export-cut"]],
        2,
        ("--verify", "{export-cut}/tokenizer.json:"),
    ),
    Row(
        "xlpe-export",
        "interrupt-streams-2",
        export_translate_argv("export-streams", "--streams", "2", "--batch_size", "1"),
        130,
        (),
        fake_onnx_translator(KeyboardInterrupt()),
    ),
    Row(
        "xlpe-export",
        "bug-streams-2",
        export_translate_argv("export-streams", "--streams", "2", "--batch_size", "1"),
        1,
        (),
        fake_onnx_translator(RuntimeError("a deliberate bug")),
    ),
    Row(
        "xlpe-export",
        "full-disk",
        lambda f, out: ["--model", f["model"], "--output", str(out / "onnx")],
        2,
        ("{out}/onnx", "No space left"),
        disk_full_while_staging,
    ),
    Row(
        "xlpe-compare",
        "missing-input",
        lambda f, out: [
            *("--source", f["missing"], "--target", f["good_de"], "--test_source", f["good"]),
            *(
                "--test_target",
                f["good_de"],
                "--source_lang",
                "en",
                "--target_lang",
                "de",
                "--output_dir",
                str(out / "c"),
            ),
        ],
        2,
        ("{missing}",),
    ),
    Row(
        "xlpe-compare",
        "malformed-flag",
        lambda f, out: [
            "--prepared_dataset",
            f["no-report"],
            "--variant",
            "no colon here",
            "--output_dir",
            str(out / "c"),
        ],
        2,
        ("--variant",),
    ),
    Row(
        "xlpe-compare",
        "interrupt",
        lambda f, out: ["--prepared_dataset", f["no-report"], "--output_dir", str(out / "cmp")],
        130,
        (),
        patched("xlpe.training.compare:run_compare", INTERRUPT),
    ),
    Row(
        "xlpe-compare",
        "bug",
        lambda f, out: ["--prepared_dataset", f["no-report"], "--output_dir", str(out / "cmp")],
        1,
        (),
        patched("xlpe.training.compare:run_compare", BUG),
    ),
]


def call(prog: str, argv: list[str], capsys) -> tuple[int, list[str]]:
    """(exit status, stderr lines other than progress bars and log lines of the libraries) of `prog`'s entry point."""
    try:
        status = entry_point(prog)(argv)
    except SystemExit as exit:  # argparse's own usage errors
        status = exit.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return status, [line for line in err.splitlines() if line.strip()]


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_every_command_through_every_condition(row: Row, files, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XLPE_TRACEBACK_DIR", str(tmp_path / "tracebacks"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("XLPE_RAISE_ERRORS", raising=False)
    if row.setup is not None:
        row.setup(monkeypatch, files)
    argv = [item.format(**files, out=tmp_path) if "{" in item else item for item in row.argv(files, tmp_path)]
    status, err = call(row.prog, argv, capsys)
    assert status == row.status, err
    assert err, "nothing said"
    last = err[-1]
    assert last.startswith(row.prog), err  # (`xlpe-reorder predict: ...`, `xlpe-tagger tag: ...` too)
    problems = [line for line in err if " error: " in line or "interrupted" in line]
    assert problems == [last], err  # one line, the last
    for name in row.names:
        assert name.format(**files, out=tmp_path) in last, last
    if row.status == 130:
        assert "interrupted" in last
    if row.status == 1:  # a bug: said to be one, its traceback in the file named
        assert "a bug" in last and "RuntimeError" in last
        written = sorted((tmp_path / "tracebacks").glob("*.traceback.txt"))
        assert len(written) == 1 and str(written[0]) in last
        text = written[0].read_text()
        assert "Traceback" in text and "deliberate bug" in text and row.prog in text.splitlines()[0]
    if row.status == 2 and "interrupted" not in last:
        assert " error: " in last
    left = sorted(path.name for path in tmp_path.iterdir() if path.name != "tracebacks")
    assert left == [], f"left behind: {left}"  # no output, no partial file, no lock, no staging directory


def test_every_console_script_is_in_the_table():
    import configparser

    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "setup.cfg")
    scripts = dict(
        line.replace(" ", "").split("=", 1)
        for line in config["options.entry_points"]["console_scripts"].strip().splitlines()
    )
    assert {prog: target for prog, target in scripts.items() if prog in ENTRY_POINTS} == ENTRY_POINTS
    for prog in scripts:  # a console script added later goes through the wrapper too
        module, name = scripts[prog].split(":")
        import importlib

        entry = getattr(importlib.import_module(module), name)
        assert getattr(entry, "console_script", None) == prog, f"{prog}: its entry point is not @console_script"
    conditions = {(row.prog, row.condition.split("-")[0]) for row in ROWS}
    for prog in ENTRY_POINTS:
        assert {(prog, "interrupt"), (prog, "bug")} <= conditions, prog


# ---------------------------------------------------------------------------------------------------------
# Real signals, and the rules of the wrapper itself
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_real_signal_is_one_line_and_status_130(signal_number, files, tmp_path):
    """`xlpe-translate` reading stdin (that never ends) gets Ctrl-C or SIGTERM: one line, status 130."""
    code = (
        "import sys\nfrom xlpe.cli.translate import main\nprint('ready', flush=True)\n"
        f"sys.exit(main(['--model', {files['model']!r}, '--input', '-', '--quiet']))"
    )
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    try:
        assert process.stdout.readline().strip() == "ready"
        time.sleep(1.5)  # inside main, reading stdin (a signal amid the import of a C extension can crash it)
        process.send_signal(signal_number)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    name = "SIGTERM" if signal_number == signal.SIGTERM else "Ctrl-C"
    assert lines == [f"xlpe-translate: interrupted ({name}); the command stopped before it finished"], err


def test_the_wrapper_keeps_system_exit_and_can_let_a_bug_through(monkeypatch, capsys):
    from xlpe.cli import console_script

    @console_script("xlpe-x")
    def exits(argv=None):
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        exits([])

    @console_script("xlpe-x")
    def broken(argv=None):
        raise KeyError("k")

    monkeypatch.setenv("XLPE_RAISE_ERRORS", "1")
    with pytest.raises(KeyError):
        broken([])


def test_a_value_error_of_a_bug_is_not_a_user_error(tmp_path, monkeypatch, capsys):
    """The wrapper classifies by type: a plain ValueError (or TypeError, KeyError) that no command turned into a
    one-line message is a bug (status 1, traceback written), not `error: <message>` with status 2."""
    from xlpe.cli import CommandLineError, console_script

    monkeypatch.setenv("XLPE_TRACEBACK_DIR", str(tmp_path))
    for error, status in ((ValueError("x"), 1), (TypeError("y"), 1), (CommandLineError("--flag z: bad"), 2)):

        @console_script("xlpe-x")
        def main(argv=None, error=error):
            raise error

        assert main([]) == status
        line = capsys.readouterr().err.strip()
        assert ("a bug" in line) == (status == 1), line


def test_an_os_error_naming_a_path_is_a_user_error(capsys):
    from xlpe.cli import console_script

    for error in (
        PermissionError(errno.EACCES, "Permission denied", "/data/in.txt"),
        OSError(errno.EDQUOT, "Disk quota exceeded", "/data/out"),
    ):

        @console_script("xlpe-x")
        def main(argv=None, error=error):
            raise error

        assert main([]) == 2
        assert capsys.readouterr().err.strip().startswith("xlpe-x: error: /data/")


# ---------------------------------------------------------------------------------------------------------
# The cases that came with the rule
# ---------------------------------------------------------------------------------------------------------


def test_an_output_that_is_a_symlink_is_written_through_to_its_target(files, tmp_path, capsys):
    """`--output link --overwrite_output`: the file the link points to gets the translations, the link stays."""
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old\n")
    link.symlink_to(target)
    status, err = call("xlpe-translate", translate_argv(**{"--output": str(link)})(files, tmp_path), capsys)
    assert status == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() != "old\n" and len(target.read_text().splitlines()) == 2
    assert not list(tmp_path.glob(".*.xlpe.lock")) and not list(tmp_path.glob(".*.tmp"))


def test_a_symlinked_output_directory_is_replaced_at_its_target(tmp_path):
    from xlpe.features.text_files import atomic_output_dir

    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    (real / "old.txt").write_text("old")
    link.symlink_to(real, target_is_directory=True)
    with atomic_output_dir(link) as staging:
        (staging / "new.txt").write_text("new")
    assert link.is_symlink() and sorted(p.name for p in real.iterdir()) == ["new.txt"]


def test_the_collator_names_the_key_and_example_of_a_missing_value(toy_tokenizer):
    from xlpe.training.collator import ExtraInputsDataCollator

    features = [
        {"input_ids": [5, 6, 2], "labels": [7, 2], "reorder_positions": [0, 1, 2]},
        {"input_ids": [5, 2], "labels": [7, 2], "reorder_positions": None},
    ]
    with pytest.raises(ValueError, match=r"example 1: `reorder_positions` is NoneType"):
        ExtraInputsDataCollator(tokenizer=toy_tokenizer)(features)


def test_a_prepared_dataset_without_validation_and_periodic_evaluation_is_one_line(files, tmp_path, capsys):
    """A prepared dataset holding only a train split, with `--eval_strategy steps`: the Trainer would refuse it in
    a traceback; xlpe-train says which split is missing and what to do before any work."""
    import json

    prepared = tmp_path / "prepared"
    shutil.copytree(files["no-report"], prepared)
    (prepared / "report.json").write_text(json.dumps({"train": {"pairs_read": 2}}))
    argv = ["--prepared_dataset", str(prepared), "--output_dir", str(tmp_path / "run"), "--eval_strategy", "steps"]
    status, err = call("xlpe-train", [*argv, *TRAIN_OUT], capsys)
    assert status == 2, err
    assert "--eval_strategy steps" in err[-1] and str(prepared) in err[-1] and "--eval_strategy no" in err[-1]
