"""Recipes (`--recipe tiny|small|base|big`): what they set, that explicit flags win (command line and JSON), the
automatic choice for a from-scratch run (data size, device; logged and recorded), early stopping on
validation BLEU, and the averaged last checkpoints as the final model."""

from __future__ import annotations

import json
import logging
import os

import pytest
import torch
from safetensors.torch import load_file
from test_token_batching import without_batch_size
from test_train import log_history, tiny

from xlpe.features.synthetic import generate_pairs
from xlpe.training.errors import UsageError
from xlpe.training.recipes import (
    BIG_DATA_PAIRS,
    RECIPE_NAMES,
    SMALL_DATA_PAIRS,
    TINY_DATA_PAIRS,
    choose_recipe,
    recipe_settings,
    sized_epochs,
)
from xlpe.training.run import main
from xlpe.training.run_config import parse_arguments


def test_small_recipe_sets_the_papers_recipe_at_cpu_size(tmp_path):
    model_args, data_args, args = parse_arguments(["--output_dir", str(tmp_path), "--recipe", "small"])
    assert (model_args.d_model, model_args.encoder_layers, model_args.decoder_layers, model_args.ffn_dim) == (
        256,
        3,
        3,
        1024,
    )
    assert args.lr_scheduler_type == "inverse_sqrt" and args.warmup_steps > 0 and args.label_smoothing_factor == 0.1
    assert args.adam_beta2 == 0.98 and args.max_tokens and args.eval_strategy == "steps" and args.recipe == "small"
    assert args.metric_for_best_model == "bleu" and args.greater_is_better and args.early_stopping_patience
    assert args.average_last_checkpoints <= args.save_total_limit and args.save_steps == args.eval_steps
    assert data_args.num_beams == 4 and (data_args.source_lang, data_args.target_lang) == ("en", "sov")  # built-in kept


def test_explicit_flags_override_the_recipe_also_from_json(tmp_path):
    model_args, _, args = parse_arguments(
        [
            "--output_dir",
            str(tmp_path),
            "--recipe",
            "base",
            "--learning_rate",
            "3e-4",
            "--d_model",
            "384",
            "--lr_scheduler_type",
            "linear",
        ]
    )
    assert (args.learning_rate, model_args.d_model, args.lr_scheduler_type) == (3e-4, 384, "linear")
    assert model_args.encoder_layers == 6 and args.warmup_steps == 4000  # the rest is the recipe's
    config = tmp_path / "args.json"
    config.write_text(json.dumps({"output_dir": str(tmp_path), "recipe": "big", "max_tokens": 1000, "dropout": 0.2}))
    model_args, _, args = parse_arguments([str(config)])
    assert (model_args.d_model, args.max_tokens, model_args.dropout) == (1024, 1000, 0.2)


def test_explicit_sentence_batches_replace_the_recipe_token_batches_and_both_conflict(tmp_path):
    _, _, args = parse_arguments(
        ["--output_dir", str(tmp_path), "--recipe", "small", "--per_device_train_batch_size", "32"]
    )
    assert args.max_tokens is None and args.per_device_train_batch_size == 32
    with pytest.raises(UsageError, match="--max_tokens .* conflicts with --per_device_train_batch_size"):
        parse_arguments(["--output_dir", str(tmp_path), "--max_tokens", "500", "--per_device_train_batch_size", "32"])
    with pytest.raises(
        UsageError, match=r"--recipe 'huge' is not a recipe; choose one of \['tiny', 'small', 'base', 'big'\] or 'none'"
    ):
        parse_arguments(["--output_dir", str(tmp_path), "--recipe", "huge"])
    with pytest.raises(UsageError, match="--early_stopping_patience 2 needs periodic evaluation"):
        parse_arguments(["--output_dir", str(tmp_path), "--early_stopping_patience", "2"])


def test_recipe_keeps_a_checkpoint_architecture_and_drops_evaluation_without_validation():
    assert "d_model" not in recipe_settings("base", from_scratch=False) and "learning_rate" in recipe_settings(
        "base", False
    )
    settings = recipe_settings("small", from_scratch=True, with_validation=False)
    assert "eval_strategy" not in settings and "early_stopping_patience" not in settings and "max_tokens" in settings
    assert recipe_settings("small", True, with_bleu=False)["metric_for_best_model"] == "loss"


@pytest.mark.parametrize(
    "pairs, gpu, expected",
    [
        (29_000, False, "small"),
        (10_000_000, False, "small"),
        (12_000, False, "tiny"),
        (TINY_DATA_PAIRS - 1, False, "tiny"),
        (TINY_DATA_PAIRS, False, "small"),
        (None, False, "small"),
        (12_000, True, "small"),
        (29_000, True, "small"),
        (SMALL_DATA_PAIRS, True, "base"),
        (BIG_DATA_PAIRS - 1, True, "base"),
        (BIG_DATA_PAIRS, True, "big"),
        (None, True, "base"),
    ],
)
def test_automatic_choice_follows_device_and_data_size(pairs, gpu, expected):
    name, reason = choose_recipe(pairs, gpu)
    assert name == expected and name in RECIPE_NAMES and reason


def text_files(tmp_path, count: int, splits=("train", "validation")) -> list[str]:
    flags = []
    for split, seed in zip(splits, (5, 6)):
        pairs = generate_pairs(count if split == "train" else 8, seed=seed)
        for side, lang in (("source", "en"), ("target", "sov")):
            (tmp_path / f"{split}.{lang}").write_text("".join(getattr(p, side) + "\n" for p in pairs))
            flags += [f"--{split}_{side}_file", str(tmp_path / f"{split}.{lang}")]
    return [*flags, "--source_lang", "en", "--target_lang", "sov", "--model_type", "vanilla"]


def test_from_scratch_without_recipe_picks_one_and_says_why(tmp_path, capsys):
    tiny_recipe = [
        "--max_steps",
        "2",
        "--eval_steps",
        "1",
        "--save_steps",
        "1",
        "--do_train",
        "--average_last_checkpoints",
        "2",
    ]
    main(without_batch_size(tiny(tmp_path, *text_files(tmp_path, 40), *tiny_recipe)))
    assert "xlpe-train: recipe tiny (no GPU, 40 training pairs" in capsys.readouterr().out  # CPU, a small corpus
    recorded = json.loads((tmp_path / "run" / "recipe.json").read_text())
    assert recorded["recipe"] == "tiny" and recorded["with_validation"]
    results = json.loads((tmp_path / "run" / "train_results.json").read_text())
    assert results["train_token_batches_per_epoch"] > 0  # the recipe's token batches (its --max_tokens 2048)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["d_model"] == 16  # the explicit size won
    assert json.loads((tmp_path / "run" / "averaged_checkpoints.json").read_text())["checkpoints"] == [
        "checkpoint-1",
        "checkpoint-2",
    ]
    periodic = [e for e in log_history(tmp_path / "run") if "eval_chrf" in e and "eval_bleu" in e]
    assert [e["step"] for e in periodic] == [1, 2]  # the recipe's evaluation, at the explicit --eval_steps


def test_recipe_none_keeps_transformers_defaults_from_scratch(tmp_path, capsys):
    _, _, args = parse_arguments(["--output_dir", str(tmp_path), "--recipe", "none", "--train_source_file", "a"])
    assert args.label_smoothing_factor == 0.0 and args.lr_scheduler_type == "linear" and args.max_tokens is None
    main(
        tiny(
            tmp_path, *text_files(tmp_path, 40, splits=("train",)), "--recipe", "none", "--max_steps", "2", "--do_train"
        )
    )
    assert "xlpe-train: recipe" not in capsys.readouterr().out and not (tmp_path / "run" / "recipe.json").exists()
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "run" / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~umask  # stock model: not 0600


def test_recipe_without_validation_split_trains_without_periodic_evaluation(tmp_path, capsys):
    main(
        without_batch_size(
            tiny(
                tmp_path,
                *text_files(tmp_path, 40, splits=("train",)),
                "--recipe",
                "small",
                "--max_steps",
                "2",
                "--do_train",
                "--average_last_checkpoints",
                "1",
            )
        )
    )
    assert "without periodic evaluation and early stopping (no validation split)" in capsys.readouterr().out
    assert not [e for e in log_history(tmp_path / "run") if "eval_bleu" in e]


def test_early_stopping_on_bleu_and_the_final_model_is_the_average_of_the_last_checkpoints(tmp_path, caplog, capsys):
    """lr ~0: BLEU never improves after the first evaluation, so patience 2 stops at the third of 20 steps; the
    final model is the average of the last checkpoints saved (3 of the 5 asked: the run stopped early); the
    end-of-run line says so."""
    with caplog.at_level(logging.INFO, logger="xlpe.train"):
        main(
            tiny(
                tmp_path,
                "--do_train",
                "--do_eval",
                "--max_steps",
                "20",
                "--eval_strategy",
                "steps",
                "--eval_steps",
                "1",
                "--save_steps",
                "1",
                "--save_total_limit",
                "5",
                "--average_last_checkpoints",
                "5",
                "--learning_rate",
                "1e-12",
                "--early_stopping_patience",
                "2",
                "--max_eval_samples",
                "4",
            )
        )
    run = tmp_path / "run"
    state = json.loads((run / "trainer_state.json").read_text())
    assert state["global_step"] == 3 and "early stopping at step 3" in caplog.text
    assert (
        "xlpe-train: training ended at step 3: early stopping: eval_bleu did not improve for 2 evaluations"
        in capsys.readouterr().out
    )
    averaged = json.loads((run / "averaged_checkpoints.json").read_text())["checkpoints"]
    assert averaged == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    final = load_file(run / "model.safetensors")
    saved = [load_file(run / name / "model.safetensors") for name in averaged]
    name = "model.encoder.xl_position.gate"
    assert torch.allclose(final[name], sum(s[name] for s in saved) / 3)


def test_a_run_that_max_steps_ends_is_not_reported_as_early_stopping(tmp_path, caplog, capsys):
    """--max_steps ended a run (early stopping armed, patience not used up); the log must not say
    "early stopping", and the end-of-run line names --max_steps."""
    with caplog.at_level(logging.INFO, logger="xlpe.train"):
        main(
            tiny(
                tmp_path,
                "--do_train",
                "--do_eval",
                "--max_steps",
                "2",
                "--eval_strategy",
                "steps",
                "--eval_steps",
                "1",
                "--save_steps",
                "1",
                "--early_stopping_patience",
                "5",
                "--max_eval_samples",
                "4",
            )
        )
    assert "early stopping at step" not in caplog.text
    out = capsys.readouterr().out
    assert (
        "xlpe-train: training ended at step 2: --max_steps 2 reached; eval_bleu" in out and "over 2 evaluations" in out
    )


def test_the_small_recipe_trains_epochs_sized_to_the_corpus():
    """`small` trains a budget of sentence passes in epochs, more of them the smaller the corpus; without a
    known size it keeps its fixed steps."""
    from xlpe.training.recipes import SMALL_SENTENCE_PASSES, small_epochs

    assert [small_epochs(n) for n in (40, 10_000, 12_000, 29_000, 50_000, SMALL_DATA_PAIRS, 10**6)] == [
        15.0,
        15.0,
        12.5,
        5.2,
        3.0,
        2.0,
        2.0,
    ]
    assert small_epochs(29_000) * 29_000 == pytest.approx(SMALL_SENTENCE_PASSES, rel=0.01)
    news = recipe_settings("small", True, train_pairs=12_000)
    assert (news["num_train_epochs"], news["max_steps"], news["dropout"]) == (12.5, -1, 0.1)
    multi30k = recipe_settings("small", True, train_pairs=29_000)
    assert (multi30k["num_train_epochs"], multi30k["max_steps"]) == (5.2, -1)
    assert "dropout" not in recipe_settings("small", False, train_pairs=12_000)  # a checkpoint keeps its own
    assert recipe_settings("small", True)["max_steps"] == 1200  # size unknown
    assert "num_train_epochs" not in recipe_settings("base", True, train_pairs=12_000)  # base/big: their steps


def test_the_tiny_recipe_is_a_smaller_model_for_more_passes_on_chrf():
    """On a CPU a corpus under TINY_DATA_PAIRS gets `tiny` (d 128, 2+2, rate 2e-3), 480,000 sentence passes
    in 10 to 40 epochs, early stopping on validation chrF; a checkpoint keeps its own architecture."""
    from xlpe.training.recipes import TINY_SENTENCE_PASSES, sized_epochs

    assert [sized_epochs("tiny", n) for n in (40, 10_000, 12_000, 19_999, 100_000)] == [40.0, 40.0, 40.0, 24.0, 10.0]
    assert sized_epochs("tiny", 12_000) * 12_000 == TINY_SENTENCE_PASSES
    news = recipe_settings("tiny", True, train_pairs=12_000)
    assert (news["d_model"], news["encoder_layers"], news["decoder_layers"], news["ffn_dim"]) == (128, 2, 2, 256)
    assert (news["learning_rate"], news["num_train_epochs"], news["max_steps"]) == (2e-3, 40.0, -1)
    assert (news["metric_for_best_model"], news["greater_is_better"], news["early_stopping_patience"]) == (
        "chrf",
        True,
        5,
    )
    assert "d_model" not in recipe_settings("tiny", False, train_pairs=12_000)
    assert recipe_settings("tiny", True, with_bleu=False)["metric_for_best_model"] == "loss"
    assert recipe_settings("tiny", True)["max_steps"] == 4000  # size unknown


def test_a_small_corpus_gets_its_epochs_and_says_so(tmp_path, capsys):
    main(
        without_batch_size(
            tiny(
                tmp_path,
                *text_files(tmp_path, 40),
                "--do_train",
                "--do_eval",
                "false",
                "--do_predict",
                "false",
                "--max_tokens",
                "256",
                "--average_last_checkpoints",
                "1",
                "--save_steps",
                "1",
                "--save_total_limit",
                "1",
                "--eval_strategy",
                "no",
            )
        )
    )
    out = capsys.readouterr().out
    assert "xlpe-train: recipe tiny (no GPU, 40 training pairs < 20,000" in out, out
    assert "; 40 epochs for 40 training pairs (about 480,000 sentences seen" in out, out
    assert "= 40.0 epochs of" in out
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    results = json.loads((tmp_path / "run" / "train_results.json").read_text())
    assert state["global_step"] == 40 * results["train_token_batches_per_epoch"]


def test_the_recipe_is_chosen_by_the_pairs_trained_on_not_the_lines_read(tmp_path, capsys):
    """19,998 pairs, 4 with an empty side and 1 with more source words than --max_source_length allows tokens
    (dropped before training, as the preparation drops them): `tiny` (< 20,000 pairs trained on), its epochs sized
    to 19,998, and the dropped pairs counted by reason in the output."""
    from types import SimpleNamespace

    from xlpe.training.run import apply_recipe
    from xlpe.training.run_config import parse_run_config

    sources = ["the cat sees the dog"] * 19_998 + ["", "a dog", "  ", "the cat", "word " * 5000]
    targets = ["die katze sieht den hund"] * 19_998 + ["ein hund", "", "die katze", " ", "wort"]
    files = ["--train_source_file", "a.en", "--train_target_file", "a.de", "--source_lang", "en", "--target_lang", "de"]
    run = parse_run_config([*files, "--output_dir", str(tmp_path / "run")])
    assert run.recipe_pending
    chosen = apply_recipe(run, {"train": SimpleNamespace(sources=sources, targets=targets)}, None)
    out = capsys.readouterr().out
    assert chosen.recipe == "tiny"
    dropped = "2 empty source, 2 empty target, 1 source too long: dropped before training"
    assert f"19,998 training pairs of 20,003 read ({dropped})" in out, out
    assert "recipe tiny (no GPU, 19,998 training pairs < 20,000" in out and "for 19,998 training pairs" in out, out
    assert chosen.training.num_train_epochs == sized_epochs("tiny", 19_998)
