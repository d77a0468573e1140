"""The resume rule: one comparison of the whole run record (every argument) with the saved one. The arguments
`reuse.RESUME_MAY_CHANGE` names are applied and listed; any other difference, inherited transformers arguments
included, is refused by name in one line. A record written by an earlier xlpe-train (some arguments only) is
refused with what to do."""

from __future__ import annotations

import dataclasses
import enum

import pytest
from transformers import Seq2SeqTrainingArguments

from xlpe.features.artefacts import ArtefactRecord, write_record
from xlpe.training import run_config
from xlpe.training.errors import UsageError
from xlpe.training.reuse import RESUME_CHANGEABLE, resume_differences, run_record, verify_resume

BASE = ["--recipe", "none", "--max_steps", "4", "--report_to", "none"]


def base_config(tmp_path, *extra):
    return run_config.parse_run_config(["--output_dir", str(tmp_path / "run"), *BASE, *extra])


def other_value(value):
    """A value of the same kind that differs from `value` (what a user's flag would change it to)."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 1.5
    if isinstance(value, str):
        return value + "_other"
    if isinstance(value, (list, tuple)):
        return [*value, "other"]
    if isinstance(value, dict):
        return {**value, "other": 1}
    return "other"


TRAINING_FIELDS = [
    field.name
    for field in dataclasses.fields(Seq2SeqTrainingArguments)
    if field.init and field.name not in RESUME_CHANGEABLE
]


def test_the_inherited_fields_a_resume_may_not_change_are_most_of_them():
    assert len(TRAINING_FIELDS) > 60
    assert {"neftune_noise_alpha", "dataloader_drop_last", "ignore_data_skip", "auto_find_batch_size"} <= set(
        TRAINING_FIELDS
    )


def test_every_inherited_training_argument_outside_the_allow_list_is_refused_by_name(tmp_path):
    config = base_config(tmp_path)
    saved = run_record(config)
    missed = []
    for name in TRAINING_FIELDS:
        changed = dataclasses.replace(config, training=_with(config.training, name))
        _, refused = resume_differences(saved, run_record(changed))
        if [flag for flag, _, _ in refused] != [f"--{name}"]:
            missed.append(name)
    assert missed == []


def _with(training_args, name):
    """A copy of `training_args` with `name` set to another value (set after construction: the rule compares
    values, whatever transformers' checks would say of the combination)."""
    import copy

    changed = copy.copy(training_args)
    object.__setattr__(changed, name, other_value(getattr(training_args, name)))
    return changed


@pytest.mark.parametrize(
    "flags",
    [
        ["--neftune_noise_alpha", "5"],
        ["--dataloader_drop_last", "true"],
        ["--ignore_data_skip", "true"],
        ["--auto_find_batch_size", "true"],
        ["--d_model", "32"],
        ["--warmup_steps", "3"],
    ],
)
def test_a_resume_that_adds_a_training_flag_is_refused_in_one_line_naming_it(tmp_path, flags):
    write_record(tmp_path / "run", run_record(base_config(tmp_path)))
    resumed = base_config(tmp_path, *flags, "--resume_from_checkpoint", str(tmp_path / "run" / "checkpoint-2"))
    with pytest.raises(UsageError) as error:
        verify_resume(resumed, str(tmp_path / "run" / "checkpoint-2"))
    message = str(error.value)
    assert "\n" not in message and f"{flags[0]} " in message and "1 argument(s) differ" in message, message
    assert "--overwrite_output_dir" in message


def test_a_resume_may_change_what_the_allow_list_names_and_lists_it(tmp_path, capsys):
    write_record(tmp_path / "run", run_record(base_config(tmp_path)))
    checkpoint = str(tmp_path / "run" / "checkpoint-2")
    extra = ["--max_steps", "8", "--logging_steps", "1", "--save_steps", "2", "--num_beams", "2", "--bf16", "false"]
    resumed = base_config(tmp_path, *extra, "--resume_from_checkpoint", checkpoint)
    record = verify_resume(resumed, checkpoint)
    out = capsys.readouterr().out
    assert "resuming: applying changed" in out and "--max_steps 4 -> 8" in out and "--logging_steps" in out
    assert record.options["--max_steps"] == 8


def test_a_record_written_by_an_earlier_xlpe_train_is_refused_with_what_to_do(tmp_path):
    """An earlier xlpe-train recorded only the arguments its facts table listed (format 1, `--flag` keys, no
    `--record`): the others cannot be checked, so the resume is refused, naming the way on."""
    old = ArtefactRecord("training-run", options={"--d_model": 16, "--learning_rate": 0.002, "--max_steps": 20})
    write_record(tmp_path / "run", old)
    checkpoint = str(tmp_path / "run" / "checkpoint-10")
    with pytest.raises(UsageError) as error:
        verify_resume(base_config(tmp_path, "--resume_from_checkpoint", checkpoint), checkpoint)
    message = str(error.value)
    assert "older xlpe-train" in message and "keeps only some arguments" in message and "\n" not in message
    assert "--overwrite_output_dir" in message
