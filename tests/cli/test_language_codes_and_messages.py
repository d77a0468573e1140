"""Language codes are checked against langcodes' registry (with a "did you mean") by every
command that takes one, before any work; the end-of-run line says what really ended training."""

from __future__ import annotations

import pytest
from test_help import ENV, run_script

from xlpe.features.language_codes import (
    check_language_code,
    is_language_code,
    suggest_language_code,
)
from xlpe.training.callbacks import RunOutcome, describe_run_end


@pytest.mark.parametrize("code", ["en", "fr", "de", "sov", "fra", "zh-Hans", "pt-BR", "en_US"])
def test_valid_codes_pass_unchanged(code):
    assert is_language_code(code) and check_language_code(code, "--source_lang") == code


@pytest.mark.parametrize("given, meant", [("french", "fr"), ("English", "en"), ("Deutsch", "de"), ("ffr", "fr")])
def test_names_and_typos_are_refused_with_the_likely_code(given, meant):
    assert suggest_language_code(given) == meant
    with pytest.raises(
        ValueError, match=rf"--source_lang '{given}' is not a language code: expected .*did you mean '{meant}'\?"
    ):
        check_language_code(given, "--source_lang")


def test_no_suggestion_when_nothing_is_close():
    with pytest.raises(ValueError) as error:
        check_language_code("q9z7", "--lang")
    assert "did you mean" not in str(error.value) and "'q9z7' is not a language code" in str(error.value)
    assert check_language_code(None, "--lang") is None


@pytest.mark.parametrize(
    "target, args",
    [
        ("xlpe.cli.train:cli", ["--source_lang", "french", "--target_lang", "en", "--output_dir", "never"]),
        (
            "xlpe.cli.prepare:main",
            ["--source", "a", "--target", "b", "--source-lang", "french", "--target-lang", "en", "--output", "never"],
        ),
        ("xlpe.cli.evaluate:main", ["bleu", "--hyp", "h", "--ref", "r", "--lang", "english"]),
        ("xlpe.cli.push:main", [".", "user/repo", "--language", "french", "en", "--dry-run"]),
    ],
)
def test_every_command_refuses_a_language_name_in_one_line_before_any_work(target, args, tmp_path):
    result, seconds = run_script(target, *args, env={**ENV, "XDG_CACHE_HOME": str(tmp_path)})
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert "is not a language code" in lines[0] and "did you mean" in lines[0]
    assert seconds < 5.0  # (no torch: the check runs before the heavy imports; < 2 s on a quiet machine)


def test_library_arguments_refuse_a_language_name():
    from xlpe.training.errors import UsageError
    from xlpe.training.run_config import parse_arguments

    with pytest.raises(UsageError, match="--target_lang 'english' is not a language code.*did you mean 'en'"):
        parse_arguments(
            [
                "--output_dir",
                "x",
                "--train_source_file",
                "a",
                "--train_target_file",
                "b",
                "--source_lang",
                "fr",
                "--target_lang",
                "english",
            ]
        )


# ---------------------------------------------------------------------------------------------------------
# What ended the run
# ---------------------------------------------------------------------------------------------------------


def test_max_steps_ending_a_rising_run_is_not_called_early_stopping():
    """The issue's log: --max_steps 300 ended a run whose BLEU rose from 5.96 to 14.23; it said "early stopping"."""
    text = describe_run_end(300, 300, [(100, 5.96), (200, 9.5), (300, 14.23)], "bleu", None, 3)
    assert text == (
        "training ended at step 300: --max_steps 300 reached; eval_bleu rose from 5.96 (step 100) to "
        "14.23 (step 300) over 3 evaluations, best 14.23 at step 300 (still improving: more steps may help)"
    )
    assert "early stopping" not in text


def test_early_stopping_and_epochs_are_named():
    text = describe_run_end(500, 1200, [(100, 3.0), (200, 7.0), (300, 6.0), (400, 6.5), (500, 5.0)], "bleu", 500, 3)
    assert text.startswith("training ended at step 500: early stopping: eval_bleu did not improve for 3 evaluations")
    assert "best 7 at step 200" in text and "still improving" not in text
    assert (
        describe_run_end(40, -1, [], None, None)
        == "training ended at step 40: the last epoch (--num_train_epochs) done"
    )
    loss = describe_run_end(30, 30, [(10, 2.0), (30, 1.5)], "loss", None, greater_is_better=False)
    assert "eval_loss fell from 2 (step 10) to 1.5 (step 30)" in loss and "best 1.5 at step 30" in loss


def test_a_flat_metric_is_said_to_stay():
    assert describe_run_end(60, 60, [(30, 0.01), (60, 0.01)], "bleu", None, 3) == (
        "training ended at step 60: --max_steps 60 reached; eval_bleu stayed at 0.01 from step 30 to step 60 over 2 "
        "evaluations, best 0.01 at step 30"
    )


def test_history_comes_from_the_whole_log_including_before_a_resume():
    log = [
        {"loss": 3.0, "step": 50},
        {"eval_bleu": 5.96, "step": 100},
        {"eval_bleu": 9.0, "step": 200},
        {"eval_bleu": 14.23, "step": 300},
        {"train_runtime": 9.0, "step": 300},
    ]
    assert RunOutcome.history(log, "bleu") == [(100, 5.96), (200, 9.0), (300, 14.23)]
