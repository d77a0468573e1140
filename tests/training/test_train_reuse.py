"""`xlpe-train` never silently reuses or loses a run: each test plays a user's sequence (resume with
changed flags, rerun into a finished directory, a checkpoint with a missing or truncated file, a damaged
arguments file / config / prepared dataset, a bogus device, two runs into one directory) and checks the exit
status, the one-line error and that the first run's files are intact. Tiny models, 2-4 steps."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from conftest import save_tiny_xlpe_model
from test_run_translation_flags import write_corpus
from test_train import TINY, StopAt, log_history
from transformers import TrainerCallback

from xlpe.cli.train import cli
from xlpe.features.artefacts import RECORD_NAME, ArtefactRecord, directory_lock, read_record, write_record
from xlpe.training.run import main


def argv(run_dir, cache, *extra):
    return ["--output_dir", str(run_dir), "--cache_dir", str(cache), *TINY, "--max_steps", "4", "--do_train", *extra]


def fingerprint(directory: Path) -> dict:
    """{relative path: sha256} of every file under `directory` (what must survive a refused command)."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != ".xlpe.lock"
    }


def run_cli(capsys, arguments) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli([str(a) for a in arguments])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("xlpe-train: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A run of 4 steps stopped after step 2 (checkpoint-2 saved): what a killed job leaves."""
    root = tmp_path_factory.mktemp("interrupted")
    main(argv(root / "run", root / "cache"), callbacks=[StopAt(2)])
    assert [p.name for p in (root / "run").glob("checkpoint-*")] == ["checkpoint-2"]
    return root


@pytest.fixture
def stopped(interrupted, tmp_path):
    """A private copy of the interrupted run (each test may damage it)."""
    shutil.copytree(interrupted / "run", tmp_path / "run")
    return tmp_path / "run"


# ---------------------------------------------------------------------------------------------------------
# Resume with changed flags
# ---------------------------------------------------------------------------------------------------------


def test_a_training_run_records_what_made_it(stopped):
    record = read_record(stopped)
    assert (
        record.kind == "training-run"
        and record.options["--d_model"] == 16
        and record.options["--learning_rate"] == 1e-3
    )
    assert record.options["--dataset_name"] == "builtin:synthetic" and record.options["--max_steps"] == 4


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--d_model", "32"),
        ("--model_type", "vanilla"),
        ("--xl_strategy", "head"),
        ("--learning_rate", "5e-3"),
        ("--per_device_train_batch_size", "4"),
        ("--neftune_noise_alpha", "5"),
        ("--dataloader_drop_last", "true"),
        ("--ignore_data_skip", "true"),
    ],
)
def test_resume_with_a_flag_that_shapes_the_model_or_run_is_refused(stopped, capsys, flag, value):
    before = fingerprint(stopped)
    code, _, err = run_cli(
        capsys, [*argv(stopped, stopped.parent / "cache"), "--resume_from_checkpoint", "last", flag, value]
    )
    line = one_line_error(err)
    assert code == 2 and f"({flag} " in line and "1 argument(s) differ" in line and "--overwrite_output_dir" in line
    assert fingerprint(stopped) == before  # nothing written, nothing lost


def test_resume_applies_and_lists_the_flags_that_may_change(stopped, capsys):
    code, out, err = run_cli(
        capsys,
        [
            *argv(stopped, stopped.parent / "cache"),
            "--resume_from_checkpoint",
            "last",
            "--max_steps",
            "5",
            "--logging_steps",
            "1",
        ],
    )
    assert code == 0, err[-3000:]
    line = next(line for line in out.splitlines() if "resuming: applying changed" in line)
    assert "--logging_steps 2 -> 1; --max_steps 4 -> 5" in line  # (and the copied run's --output_dir, --cache_dir)
    steps = [entry["step"] for entry in log_history(stopped) if "loss" in entry]
    assert steps == [2, 3, 4, 5]  # logged every step after the resume (not the checkpoint's 2), up to the new 5
    assert read_record(stopped).options["--max_steps"] == 5  # the next resume compares with what this one did


def test_resume_of_a_run_trained_on_other_data_is_refused(tmp_path, capsys):
    data = write_corpus(tmp_path)
    first = argv(tmp_path / "run", tmp_path / "cache", *data, "--model_type", "xlpe", "--recipe", "none")
    main(first, callbacks=[StopAt(2)])
    (tmp_path / "train.de").write_text((tmp_path / "train.de").read_text().replace("hund", "katze"))
    before = fingerprint(tmp_path / "run")
    code, _, err = run_cli(capsys, [*first, "--resume_from_checkpoint", "last"])
    line = one_line_error(err)
    assert code == 2 and "(--train_target_file: other content now)" in line, line
    assert fingerprint(tmp_path / "run") == before


def test_resume_of_a_run_recorded_by_an_earlier_xlpe_train_is_refused(stopped, capsys):
    """A record as xlpe-train wrote it before every argument was recorded (the flags of a facts table only)."""
    record = read_record(stopped)
    kept = ("--d_model", "--learning_rate", "--max_steps", "--seed", "--dataset_name")
    write_record(
        stopped, ArtefactRecord(record.kind, inputs=record.inputs, options={k: record.options[k] for k in kept})
    )
    before = fingerprint(stopped)
    code, _, err = run_cli(capsys, [*argv(stopped, stopped.parent / "cache"), "--resume_from_checkpoint", "last"])
    line = one_line_error(err)
    assert code == 2 and "made by an older xlpe-train" in line and "--overwrite_output_dir" in line, line
    assert fingerprint(stopped) == before


def test_resume_of_a_run_without_a_record_is_refused(stopped, capsys):
    (stopped / RECORD_NAME).unlink()
    code, _, err = run_cli(capsys, [*argv(stopped, stopped.parent / "cache"), "--resume_from_checkpoint", "last"])
    assert code == 2 and f"holds no record of what made it ({RECORD_NAME})" in one_line_error(err)


# ---------------------------------------------------------------------------------------------------------
# A rerun into a directory that holds results
# ---------------------------------------------------------------------------------------------------------


def test_plain_rerun_into_a_finished_run_is_refused_unless_overwrite(tmp_path, capsys):
    first = argv(tmp_path / "run", tmp_path / "cache", "--save_strategy", "no")
    first[first.index("--max_steps") + 1] = "2"
    assert run_cli(capsys, first)[0] == 0
    before = fingerprint(tmp_path / "run")
    code, _, err = run_cli(capsys, first)
    line = one_line_error(err)
    assert code == 2 and "already holds a finished run" in line and "--overwrite_output_dir" in line, line
    assert fingerprint(tmp_path / "run") == before
    code, _, err = run_cli(capsys, [*first, "--overwrite_output_dir"])
    assert code == 0, err[-3000:]


def test_plain_rerun_into_an_interrupted_run_is_refused(stopped, capsys):
    before = fingerprint(stopped)
    code, _, err = run_cli(capsys, argv(stopped, stopped.parent / "cache"))
    assert code == 2 and "--resume_from_checkpoint last" in one_line_error(err)
    assert fingerprint(stopped) == before


# ---------------------------------------------------------------------------------------------------------
# Damaged checkpoints
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pth"])
def test_a_checkpoint_missing_its_state_is_refused(stopped, capsys, name):
    (stopped / "checkpoint-2" / name).unlink()
    before = fingerprint(stopped)
    code, _, err = run_cli(capsys, [*argv(stopped, stopped.parent / "cache"), "--resume_from_checkpoint", "last"])
    line = one_line_error(err)
    assert code == 2 and f"checkpoint-2 lacks {name}" in line and "--model_name_or_path" in line, line
    assert fingerprint(stopped) == before


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.pt", "trainer_state.json", "config.json"])
def test_a_truncated_checkpoint_file_is_named(stopped, capsys, name):
    path = stopped / "checkpoint-2" / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    code, _, err = run_cli(capsys, [*argv(stopped, stopped.parent / "cache"), "--resume_from_checkpoint", "last"])
    line = one_line_error(err)
    assert code == 2 and str(path) in line, line


# ---------------------------------------------------------------------------------------------------------
# Damaged inputs: the arguments file, a model's config, a prepared dataset; a bogus device
# ---------------------------------------------------------------------------------------------------------


def test_an_arguments_file_with_a_wrong_type_names_file_and_line(tmp_path, capsys):
    arguments = tmp_path / "args.json"
    arguments.write_text(f'{{"output_dir": "{tmp_path / "run"}",\n "max_steps": "many",\n "do_train": true}}\n')
    code, _, err = run_cli(capsys, [arguments])
    assert code == 2 and f"{arguments}:2: 'max_steps' must be an integer, got \"many\"" in one_line_error(err)
    arguments.write_text('["--max_steps", "2"]\n')
    code, _, err = run_cli(capsys, [arguments])
    assert code == 2 and "JSON object" in one_line_error(err)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: c.replace('"d_model": 32', '"d_model": "wide"'), r":\d+: d_model must be a positive integer"),
        (lambda c: c[: len(c) // 2], r":\d+: not valid JSON"),
    ],
)
def test_a_hand_edited_config_is_named_with_its_line(tmp_path, capsys, toy_tokenizer, edit, message):
    import re

    model = save_tiny_xlpe_model(toy_tokenizer, tmp_path / "model")
    config = model / "config.json"
    config.write_text(edit(config.read_text()))
    code, _, err = run_cli(capsys, [*argv(tmp_path / "run", tmp_path / "cache", "--model_name_or_path", model)])
    line = one_line_error(err)
    assert code == 2 and re.search(re.escape(str(config)) + message, line), line


def prepared_dataset(path: Path) -> Path:
    from datasets import Dataset, DatasetDict

    rows = {"input_ids": [[5, 6, 1]] * 8, "labels": [[7, 1]] * 8}
    DatasetDict({"train": Dataset.from_dict(rows)}).save_to_disk(str(path))
    return path


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            lambda d: (d / "dataset_dict.json").write_text('{"splits": ["train"\n'),
            "dataset_dict.json:2: not valid JSON",
        ),
        (lambda d: (d / "train" / "state.json").unlink(), "split train lacks"),
        (
            lambda d: [p.write_bytes(p.read_bytes()[:-100]) for p in (d / "train").glob("*.arrow")],
            "damaged or truncated Arrow file",
        ),
        (lambda d: [p.unlink() for p in (d / "train").glob("*.arrow")], "is missing (named by"),
    ],
    ids=["dataset_dict-json", "state-json", "truncated-arrow", "missing-arrow"],
)
def test_a_damaged_prepared_dataset_is_named(tmp_path, capsys, toy_tokenizer, damage, message):
    prepared = prepared_dataset(tmp_path / "prepared")
    toy_tokenizer.save_pretrained(tmp_path / "tok")
    damage(prepared)
    code, _, err = run_cli(
        capsys,
        [
            "--output_dir",
            tmp_path / "run",
            "--prepared_dataset",
            prepared,
            "--tokenizer_name",
            tmp_path / "tok",
            "--do_train",
            "--max_steps",
            "2",
        ],
    )
    line = one_line_error(err)
    assert code == 2 and message in line and "--prepared_dataset" in line, line


@pytest.mark.parametrize("flags", [["--device", "bogus"], ["--tf32", "true"]], ids=["device", "tf32-without-cuda"])
def test_a_bogus_device_request_is_one_line(tmp_path, capsys, flags):
    import torch

    if flags[0] == "--tf32" and torch.cuda.is_available():
        pytest.skip("a CUDA machine may support tf32")
    code, _, err = run_cli(capsys, ["--output_dir", tmp_path / "run", *flags])
    assert code == 2 and flags[0] in one_line_error(err)


# ---------------------------------------------------------------------------------------------------------
# Two runs into one output directory at once
# ---------------------------------------------------------------------------------------------------------


def test_a_second_run_into_a_directory_in_use_stops_at_once(stopped, capsys):
    before = fingerprint(stopped)
    with directory_lock(stopped, "xlpe-train --output_dir run (the first run)"):  # the first run, still going
        code, _, err = run_cli(capsys, [*argv(stopped, stopped.parent / "cache"), "--resume_from_checkpoint", "last"])
    line = one_line_error(err)
    assert code == 2 and "is in use by xlpe-train --output_dir run (the first run)" in line, line
    assert fingerprint(stopped) == before


# ---------------------------------------------------------------------------------------------------------
# Ctrl-C: one line, exit status 130
# ---------------------------------------------------------------------------------------------------------


class InterruptAt(TrainerCallback):
    """Ctrl-C at the end of training step `step` (KeyboardInterrupt, as the terminal's SIGINT raises it)."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt


def test_ctrl_c_ends_in_one_line_naming_the_step_and_the_checkpoint_to_resume(tmp_path, capsys):
    run_dir = tmp_path / "run"
    capsys.readouterr()
    code = cli([str(a) for a in argv(run_dir, tmp_path / "cache")], callbacks=[InterruptAt(3)])
    err = capsys.readouterr().err
    assert code == 130 and "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if "interrupted" in line]
    assert lines == [
        f"xlpe-train: interrupted at step 3 of 4; newest checkpoint {run_dir / 'checkpoint-2'} "
        "(resume with --resume_from_checkpoint last)"
    ]
    assert err.strip().splitlines()[-1] == lines[0]
    code, _, err = run_cli(capsys, [*argv(run_dir, tmp_path / "cache"), "--resume_from_checkpoint", "last"])
    assert code == 0, err[-3000:]  # what the line says works
