"""xlpe-train: arguments, data sources, bad input, every family, auxiliary losses, generation inputs,
checkpoint averaging, resume after interruption, and the multi-process launch. Tiny models, a few steps."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, TINY_MODEL_ARGS
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, MarianConfig, MarianMTModel, TrainerCallback

from xlpe import MODEL_FAMILIES
from xlpe.cli.train import finish_distributed
from xlpe.features.synthetic import generate_pairs
from xlpe.training.arguments import BUILTIN_DATASET
from xlpe.training.checkpoint_averaging import (
    average_checkpoints,
    has_whole_trainer_state,
    last_checkpoints,
    list_checkpoints,
    save_averaged_model,
)
from xlpe.training.errors import UsageError
from xlpe.training.run import main, parse_arguments
from xlpe.training.trainer import generation_inputs

REPO = REPO_ROOT
TINY = [
    *TINY_MODEL_ARGS,
    "--max_train_samples",
    "64",
    "--max_eval_samples",
    "6",
    "--max_predict_samples",
    "6",
    "--tokenizer_vocab_size",
    "300",
    "--per_device_train_batch_size",
    "8",
    "--per_device_eval_batch_size",
    "6",
    "--val_max_target_length",
    "10",
    "--num_beams",
    "2",
    "--logging_steps",
    "2",
    "--save_steps",
    "2",
    "--learning_rate",
    "1e-3",
    "--warmup_steps",
    "0",
    "--report_to",
    "none",
    "--num_translation_examples",
    "1",
]


def tiny(tmp_path, *args, name="run"):
    return ["--output_dir", str(tmp_path / name), "--cache_dir", str(tmp_path / "cache"), *TINY, *args]


def log_history(run_dir):
    return json.loads((Path(run_dir) / "trainer_state.json").read_text())["log_history"]


# ---------------------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------------------


def test_no_arguments_means_builtin_corpus_recipe_and_all_stages(tmp_path):
    model_args, data_args, training_args = parse_arguments(["--output_dir", str(tmp_path)])
    assert data_args.dataset_name == BUILTIN_DATASET and (data_args.source_lang, data_args.target_lang) == ("en", "sov")
    assert training_args.do_train and training_args.do_eval and training_args.do_predict
    assert training_args.predict_with_generate and training_args.report_to in ([], "none", ["none"])
    assert model_args.d_model == 128 and model_args.tokenizer_model == "bpe" and data_args.num_beams == 4


@pytest.mark.parametrize(
    "flags, stages",
    [
        (["--do_train"], (True, False, False)),  # naming stages as true runs only those
        (["--do_train", "--do_predict"], (True, False, True)),
        (["--do_eval", "false"], (True, False, True)),  # switching stages off runs the others
        (["--do_eval", "false", "--do_predict", "false"], (True, False, False)),
        (["--do_train", "false"], (False, True, True)),
    ],
)
def test_stages_named_true_run_alone_and_stages_switched_off_leave_the_others(tmp_path, flags, stages):
    _, _, training_args = parse_arguments(["--output_dir", str(tmp_path), *flags])
    assert (training_args.do_train, training_args.do_eval, training_args.do_predict) == stages


def test_every_stage_switched_off_is_a_usage_error_not_a_run_that_does_nothing(tmp_path):
    off = ["--do_train", "false", "--do_eval", "false", "--do_predict", "false"]
    with pytest.raises(UsageError, match="all false: nothing to do"):
        parse_arguments(["--output_dir", str(tmp_path), *off])


def test_explicit_arguments_win_over_the_recipe_also_from_json(tmp_path):
    _, _, training_args = parse_arguments(["--output_dir", str(tmp_path), "--learning_rate", "5e-5", "--do_train"])
    assert training_args.learning_rate == 5e-5 and not training_args.do_eval
    config = tmp_path / "args.json"
    config.write_text(
        json.dumps({"output_dir": str(tmp_path), "max_steps": 7, "model_type": "dpe", "order_loss_weight": 0.3})
    )
    model_args, _, training_args = parse_arguments([str(config)])
    assert training_args.max_steps == 7 and model_args.model_type == "dpe" and model_args.order_loss_weight == 0.3


# ---------------------------------------------------------------------------------------------------------
# Bad input: a clear ValueError before training starts
# ---------------------------------------------------------------------------------------------------------


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


@pytest.mark.parametrize(
    "make_args, message",
    [
        (
            lambda d: ["--source_lang", "fr"],
            r"--source_lang 'fr' is not a language of the built-in corpus.*\['en', 'sov'\]",
        ),
        (
            lambda d: [
                "--train_file",
                write_jsonl(d / "t.jsonl", [{"translation": {"en": "a b", "de": "c d"}}]),
                "--source_lang",
                "en",
                "--target_lang",
                "fr",
            ],
            r"--target_lang 'fr' is not a language of .*\['de', 'en'\]",
        ),
        (
            lambda d: [
                "--train_file",
                write_jsonl(d / "t.jsonl", [{"en": "a b", "de": "c d"}]),
                "--source_lang",
                "en",
                "--target_lang",
                "de",
            ],
            r'missing column "translation".*\[\'de\', \'en\'\]',
        ),
        (
            lambda d: [
                "--train_file",
                write_jsonl(d / "t.jsonl", [{"translation": {"en": " ", "de": ""}}]),
                "--source_lang",
                "en",
                "--target_lang",
                "de",
            ],
            r"the training set is empty",
        ),
        (lambda d: ["--model_type", "transformer"], r"unknown --model_type 'transformer'.*vanilla"),
        (lambda d: ["--model_type", "dpe", "--xl_heads", "2"], r"--xl_heads does not apply to --model_type dpe"),
        (
            lambda d: [
                "--do_eval",
                "--train_file",
                write_jsonl(d / "t.jsonl", [{"translation": {"en": "a", "de": "b"}}]),
                "--source_lang",
                "en",
                "--target_lang",
                "de",
            ],
            r"--do_eval needs a validation split",
        ),
        (lambda d: ["--prepared_dataset", str(d)], r"--prepared_dataset needs --tokenizer_name"),
        (
            lambda d: ["--average_last_checkpoints", "5", "--save_total_limit", "2"],
            r"--average_last_checkpoints 5 needs at least 5 saved checkpoints.*--save_total_limit is 2",
        ),
        (
            lambda d: ["--embedding_init_std", "0"],
            r"--embedding_init_std must be a positive standard deviation, got 0.0",
        ),
        (
            lambda d: ["--init_std", "0.02", "--model_name_or_path", str(d / "trained")],
            r"--init_std initialises a model built here; .*trained brings trained weights",
        ),
    ],
    ids=[
        "builtin-language",
        "jsonl-language",
        "missing-column",
        "empty-train",
        "unknown-family",
        "foreign-field",
        "missing-validation",
        "prepared-without-tokenizer",
        "averaging-without-checkpoints",
        "init-std-not-positive",
        "init-std-with-trained-weights",
    ],
)
def test_bad_input_fails_before_training(tmp_path, make_args, message):
    with pytest.raises(ValueError, match=message):
        main(tiny(tmp_path, "--max_steps", "2", *make_args(tmp_path)))
    assert not list((tmp_path / "run").glob("checkpoint-*"))


def test_dataset_directory_with_wrong_language_lists_its_languages(tmp_path):
    from datasets import Dataset, DatasetDict

    rows = {"translation": [{"en": "the dog", "de": "der hund"}] * 4}
    DatasetDict({"train": Dataset.from_dict(rows)}).save_to_disk(str(tmp_path / "data"))
    with pytest.raises(ValueError, match=r"--source_lang 'fr' gave no source text .*\['de', 'en'\]"):
        main(tiny(tmp_path, "--dataset_name", str(tmp_path / "data"), "--source_lang", "fr", "--target_lang", "de"))


def test_tokenizer_larger_than_model_vocabulary_is_named(tmp_path, toy_tokenizer):
    config = MarianConfig(
        vocab_size=10,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        pad_token_id=0,
        eos_token_id=1,
    )
    MarianMTModel(config).save_pretrained(tmp_path / "small")
    toy_tokenizer.save_pretrained(tmp_path / "tok")
    with pytest.raises(
        ValueError,
        match=rf"tokenizer \({tmp_path / 'tok'}\) has {len(toy_tokenizer)} tokens but the model's vocab_size is 10",
    ):
        main(tiny(tmp_path, "--model_name_or_path", str(tmp_path / "small"), "--tokenizer_name", str(tmp_path / "tok")))


def test_init_options_set_the_linear_and_embedding_std_of_a_model_built_here(tmp_path):
    """--init_std is HF's init_std (every linear layer); --embedding_init_std redraws the (tied) token embeddings
    alone, padding row zero. Defaults: both d_model^-1/2."""
    main(
        tiny(
            tmp_path,
            "--do_train",
            "--max_steps",
            "1",
            "--learning_rate",
            "1e-9",
            "--model_type",
            "vanilla",
            "--init_std",
            "0.05",
            "--embedding_init_std",
            "0.4",
        )
    )
    model = MarianMTModel.from_pretrained(tmp_path / "run")
    embeddings = model.get_input_embeddings()
    assert model.config.init_std == 0.05 and embeddings.weight.std().item() == pytest.approx(0.4, rel=0.05)
    assert (
        embeddings.weight[model.config.pad_token_id].abs().max() < 1e-6 and model.lm_head.weight is embeddings.weight
    )  # drawn 0
    assert model.model.encoder.layers[0].fc1.weight.std().item() == pytest.approx(0.05, rel=0.15)
    main(
        tiny(
            tmp_path,
            "--do_train",
            "--max_steps",
            "1",
            "--learning_rate",
            "1e-9",
            "--model_type",
            "vanilla",
            name="default",
        )
    )
    default = MarianMTModel.from_pretrained(tmp_path / "default")
    assert default.config.init_std == pytest.approx(16**-0.5)
    assert default.get_input_embeddings().weight.std().item() == pytest.approx(16**-0.5, rel=0.05)


def test_output_dir_with_checkpoints_needs_resume_or_overwrite(tmp_path):
    (tmp_path / "run" / "checkpoint-3").mkdir(parents=True)
    with pytest.raises(
        ValueError, match="already holds checkpoints.*--resume_from_checkpoint last.*--overwrite_output_dir"
    ):
        main(tiny(tmp_path, "--max_steps", "2"))


# ---------------------------------------------------------------------------------------------------------
# Training runs
# ---------------------------------------------------------------------------------------------------------


def test_builtin_run_logs_auxiliary_losses_scores_and_saves_everything(tmp_path):
    metrics = main(
        tiny(
            tmp_path,
            "--max_steps",
            "4",
            "--average_last_checkpoints",
            "2",
            "--report_to",
            "tensorboard",
            "--eval_strategy",
            "steps",
            "--eval_steps",
            "2",
        )
    )
    run = tmp_path / "run"
    assert list((run / "runs").rglob("events.out.tfevents.*"))  # tensorboard, asked for explicitly
    periodic = [entry for entry in log_history(run) if "eval_bleu" in entry]  # evaluations during training
    assert [e["step"] for e in periodic] == [2, 4] and all(
        e["eval_gen_len"] <= 10 and "eval_reorder_loss" in e for e in periodic
    )
    train_logs = [entry for entry in log_history(run) if "loss" in entry]
    assert train_logs and all({"translation_loss", "reorder_loss"} <= set(entry) for entry in train_logs)
    for stage in ("eval", "predict"):
        assert {f"{stage}_bleu", f"{stage}_chrf", f"{stage}_translation_loss", f"{stage}_reorder_loss"} <= set(metrics)
    assert metrics["predict_samples"] == 6
    # the length rule's report: --val_max_target_length 10 caps every sentence; an untrained model reaches it
    assert metrics["predict_inputs_truncated"] == 0 and 0 <= metrics["predict_outputs_at_limit"] <= 6
    assert "eval_outputs_at_limit" in metrics and "predict_outputs_at_limit" in json.loads(
        (run / "predict_results.json").read_text()
    )
    assert len((run / "generated_predictions.txt").read_text().splitlines()) == 6
    assert "nrefs:1" in json.loads((run / "test_scores.json").read_text())["bleu"]["signature"]
    assert json.loads((run / "averaged_checkpoints.json").read_text())["checkpoints"] == [
        "checkpoint-2",
        "checkpoint-4",
    ]
    card = (run / "README.md").read_text()
    assert "xlpe" in card and "BLEU" in card
    model = AutoModelForSeq2SeqLM.from_pretrained(run)
    assert type(model).__name__ == "XLPEMarianMTModel" and model.generation_config.num_beams == 2
    saved_tokenizer = json.loads((run / "tokenizer_config.json").read_text())
    assert saved_tokenizer["model_max_length"] == model.config.max_position_embeddings  # the limits agree
    assert not model.get_encoder().word_starts.flags.all()  # xlpe-train gave the reorderer the tokenizer's words
    averaged = load_file(run / "model.safetensors")
    two = [load_file(run / f"checkpoint-{s}" / "model.safetensors") for s in (2, 4)]
    name = "model.encoder.xl_position.gate"
    assert torch.allclose(averaged[name], (two[0][name] + two[1][name]) / 2)


def test_tensorboard_of_an_evaluation_only_run_is_written_in_its_output_dir(tmp_path, monkeypatch):
    """The stock `TensorBoardCallback` picks its directory at `on_train_begin`; without training it would write
    `./runs` of the working directory. xlpe-train gives it `output_dir/runs` for an evaluation-only run too."""
    main(tiny(tmp_path, "--max_steps", "1", "--do_train", name="trained"))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    evaluated = tmp_path / "evaluated"
    main(
        [
            *("--output_dir", str(evaluated), "--cache_dir", str(tmp_path / "cache")),
            *("--model_name_or_path", str(tmp_path / "trained"), "--do_eval", "--max_eval_samples", "4"),
            *("--val_max_target_length", "5", "--report_to", "tensorboard"),
        ]
    )
    assert list((evaluated / "runs").rglob("events.out.tfevents.*"))
    assert not list((tmp_path / "cwd").iterdir())


FAMILIES = sorted({"vanilla", *MODEL_FAMILIES} - {"xlpe"})  # xlpe: the run above


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_trains_and_logs_its_own_losses(tmp_path, family, shared_dir):
    nltk_data = str(shared_dir / "data" / "nltk_data")  # the mvPE+POS source tagger, offline
    extra = ["--config_overrides", "pos_dim=8"] if family == "mvpe_pos" else []  # d_PoST < d_model=16
    metrics = main(
        tiny(
            tmp_path,
            "--model_type",
            family,
            "--max_steps",
            "2",
            "--do_train",
            "--do_eval",
            "--nltk_data",
            nltk_data,
            *extra,
        )
    )
    expected = {"dpe": "eval_order_loss", "mvpe_pos": "eval_tag_loss"}.get(family)
    assert "eval_bleu" in metrics and (expected is None or expected in metrics), sorted(metrics)


def test_plain_text_files_are_aligned_with_eflomal(tmp_path):
    pairs = generate_pairs(80, seed=5)
    for side in ("source", "target"):
        (tmp_path / f"train.{side}").write_text("".join(getattr(p, side) + "\n" for p in pairs))
    metrics = main(
        tiny(
            tmp_path,
            "--train_source_file",
            str(tmp_path / "train.source"),
            "--train_target_file",
            str(tmp_path / "train.target"),
            "--source_lang",
            "en",
            "--target_lang",
            "sov",
            "--max_steps",
            "2",
        )
    )
    report = json.loads((tmp_path / "run" / "preparation_report.json").read_text())["train"]
    assert report["alignments"] == "eflomal" and report["pairs_kept"] == 64
    assert metrics["train_samples"] == 64


def test_stock_marian_checkpoint_is_upgraded_to_a_family(tmp_path, toy_tokenizer):
    config = MarianConfig(
        vocab_size=len(toy_tokenizer),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        pad_token_id=toy_tokenizer.pad_token_id,
        eos_token_id=toy_tokenizer.eos_token_id,
        decoder_start_token_id=toy_tokenizer.pad_token_id,
        max_position_embeddings=64,
    )
    MarianMTModel(config).save_pretrained(tmp_path / "stock")
    toy_tokenizer.save_pretrained(tmp_path / "stock")
    jsonl = write_jsonl(
        tmp_path / "t.jsonl",
        [
            {
                "translation": {"en": "the cat sees the dog", "de": "die katze sieht den hund"},
                "alignment": "0-0 1-1 2-2 3-3 4-4",
            }
        ]
        * 16,
    )
    main(
        tiny(
            tmp_path,
            "--model_name_or_path",
            str(tmp_path / "stock"),
            "--model_type",
            "xlpe",
            "--train_file",
            jsonl,
            "--source_lang",
            "en",
            "--target_lang",
            "de",
            "--max_steps",
            "2",
            "--do_train",
        )
    )
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["model_type"] == "xlpe_marian" and saved["xl_gate_init"] == 0.0


# ---------------------------------------------------------------------------------------------------------
# Generation sees predicted, not gold, reorderings
# ---------------------------------------------------------------------------------------------------------


def test_generation_inputs_withhold_oracle_and_target_side_inputs():
    batch = {
        k: torch.zeros(1, 3, dtype=torch.long)
        for k in (
            "input_ids",
            "attention_mask",
            "labels",
            "reorder_positions",
            "target_positions",
            "pos_tag_ids",
            "decoder_pos_tag_ids",
            "decoder_input_ids",
        )
    }
    assert set(generation_inputs(batch)) == {"input_ids", "attention_mask", "pos_tag_ids"}
    assert set(generation_inputs(batch, True)) == {
        "input_ids",
        "attention_mask",
        "pos_tag_ids",
        "reorder_positions",
        "target_positions",
    }


@pytest.mark.parametrize("oracle", [False, True])
def test_evaluation_generates_with_predicted_positions_unless_asked(tmp_path, oracle, monkeypatch):
    from xlpe import XLPEMarianMTModel

    seen = []
    original_generate = XLPEMarianMTModel.generate

    def generate(self, *args, **kwargs):
        seen.append(set(kwargs))
        return original_generate(self, *args, **kwargs)

    monkeypatch.setattr(XLPEMarianMTModel, "generate", generate)
    extra = ["--eval_with_oracle_positions"] if oracle else []
    metrics = main(tiny(tmp_path, "--max_steps", "1", "--do_train", "--do_eval", *extra))
    assert seen and all(("reorder_positions" in keys) == oracle for keys in seen)
    assert "labels" not in set().union(*seen) and "eval_reorder_loss" in metrics


# ---------------------------------------------------------------------------------------------------------
# Checkpoint averaging
# ---------------------------------------------------------------------------------------------------------


def fake_checkpoint(directory: Path, value: float, step: int) -> Path:
    path = directory / f"checkpoint-{step}"
    path.mkdir(parents=True)
    save_file({"w": torch.full((2, 2), value), "count": torch.tensor([step])}, str(path / "model.safetensors"))
    (path / "config.json").write_text("{}")
    (path / "optimizer.pt").write_bytes(b"x")
    return path


def test_average_of_the_last_checkpoints(tmp_path):
    for value, step in ((100.0, 9), (1.0, 10), (3.0, 20)):
        fake_checkpoint(tmp_path, value, step)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint-9", "checkpoint-10", "checkpoint-20"]
    chosen = last_checkpoints(tmp_path, 2)
    averaged = average_checkpoints(chosen)
    assert torch.equal(averaged["w"], torch.full((2, 2), 2.0)) and averaged["count"].tolist() == [20]
    save_averaged_model(chosen, tmp_path / "avg")
    assert sorted(p.name for p in (tmp_path / "avg").iterdir()) == [
        "averaged_checkpoints.json",
        "config.json",
        "model.safetensors",
    ]
    with pytest.raises(ValueError, match="last 4 checkpoints but .* has 3"):
        last_checkpoints(tmp_path, 4)


# ---------------------------------------------------------------------------------------------------------
# Resume after interruption
# ---------------------------------------------------------------------------------------------------------


class StopAt(TrainerCallback):
    """An interruption: stop after `step` (its checkpoint is saved by save_steps)."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = True
        return control


def test_resume_continues_exactly_where_training_stopped(tmp_path):
    common = ["--max_steps", "6", "--do_train"]
    main(tiny(tmp_path, *common, name="straight"))
    main(tiny(tmp_path, *common, name="interrupted"), callbacks=[StopAt(4)])
    assert [p.name for p in list_checkpoints(tmp_path / "interrupted")] == ["checkpoint-2", "checkpoint-4"]
    main(tiny(tmp_path, *common, "--resume_from_checkpoint", "last", name="interrupted"))
    straight, resumed = log_history(tmp_path / "straight"), log_history(tmp_path / "interrupted")
    losses = lambda logs: [(e["step"], round(e["loss"], 4)) for e in logs if "loss" in e]
    assert losses(resumed) == losses(straight) and losses(resumed)[-1][0] == 6
    a, b = (load_file(tmp_path / name / "model.safetensors") for name in ("straight", "interrupted"))
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def _decoder_step_lengths(model, **generate_kwargs) -> list[int]:
    """The decoder's input length at each call of one `generate` (1 after the first step when the cache is used)."""
    lengths: list[int] = []
    hook = model.get_decoder().register_forward_pre_hook(
        lambda module, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    try:
        model.generate(torch.tensor([[5, 6, 7, 8, 2]]), max_new_tokens=5, min_new_tokens=5, **generate_kwargs)
    finally:
        hook.remove()
    return lengths


def test_a_resumed_run_saves_the_generation_settings_of_an_uninterrupted_one(tmp_path):
    """A resume (the model rebuilt from a checkpoint the Trainer saved) writes the same config.json and
    generation_config.json as the run it continues, in every checkpoint and the final model, translates the same,
    and decodes with the key/value cache (a checkpoint saved with the Trainer's training-time `use_cache: false`
    once made every resumed model decode without it, 16x slower)."""
    common = ["--max_steps", "4", "--do_train"]
    main(tiny(tmp_path, *common, name="straight"))
    main(tiny(tmp_path, *common, name="interrupted"), callbacks=[StopAt(2)])
    checkpoint = tmp_path / "interrupted" / "checkpoint-2"
    for name in ("config.json", "generation_config.json"):  # as the Trainer of earlier releases saved them
        (checkpoint / name).write_text(json.dumps({**json.loads((checkpoint / name).read_text()), "use_cache": False}))
    main(tiny(tmp_path, *common, "--resume_from_checkpoint", "last", name="interrupted"))
    for relative in ("", "checkpoint-4"):
        for name in ("config.json", "generation_config.json"):
            straight = json.loads((tmp_path / "straight" / relative / name).read_text())
            resumed = json.loads((tmp_path / "interrupted" / relative / name).read_text())
            assert resumed == straight and straight["use_cache"] is True, (relative, name)
    models = [AutoModelForSeq2SeqLM.from_pretrained(tmp_path / name).eval() for name in ("straight", "interrupted")]
    source = torch.tensor([[5, 6, 7, 8, 9, 10, 2], [11, 12, 13, 2, 0, 0, 0]])
    mask = (source != 0).long()
    for beams in (1, 3):
        outputs = [m.generate(source, attention_mask=mask, num_beams=beams, max_new_tokens=8) for m in models]
        assert torch.equal(*outputs), beams
    for model in models:
        assert _decoder_step_lengths(model)[1:] == [1] * 4  # one new token a step: the cache is used


@pytest.mark.parametrize(
    ("text", "whole"),
    [
        (None, False),  # not written yet
        ("", False),  # created, killed before the first byte
        ('{"global_step": 6, "log_hist', False),  # cut short
        ("[6]", False),  # JSON, not a trainer state
        ('{"global_step": "6"}', False),
        ('{"global_step": 6, "log_history": []}', True),
    ],
)
def test_has_whole_trainer_state(tmp_path, text, whole):
    if text is not None:
        (tmp_path / "trainer_state.json").write_text(text)
    assert has_whole_trainer_state(tmp_path) is whole


def test_resume_after_sigkill(tmp_path, caplog):
    """Killed after its first whole checkpoint, a run resumes from the newest checkpoint whose trainer state is
    whole: a newer one cut short mid-save (its trainer_state.json, written last, empty or truncated) is skipped and
    named in a warning, not resumed from (which failed on the damaged JSON) and not silently ignored."""
    argv = [sys.executable, str(REPO / "scripts" / "train.py"), *tiny(tmp_path, "--max_steps", "400", "--do_train")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    run_dir = tmp_path / "run"
    try:
        deadline = time.time() + 240
        while time.time() < deadline and not (
            run_dir.is_dir() and any(has_whole_trainer_state(p) for p in list_checkpoints(run_dir))
        ):
            assert process.poll() is None, "training ended before its first checkpoint"
            time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    whole = [p for p in list_checkpoints(run_dir) if has_whole_trainer_state(p)]
    killed_at = int(whole[-1].name.split("-")[1])
    assert killed_at < 400
    for newer in list_checkpoints(run_dir)[len(whole) :]:  # a save the kill cut short: not resumable either way
        shutil.rmtree(newer)
    cut_short = run_dir / f"checkpoint-{killed_at + 100}"  # as a kill while writing its trainer state leaves it
    shutil.copytree(whole[-1], cut_short)
    state = (cut_short / "trainer_state.json").read_text()
    (cut_short / "trainer_state.json").write_text(state[: len(state) // 2])
    with caplog.at_level(logging.WARNING):
        main(tiny(tmp_path, "--max_steps", str(killed_at + 4), "--do_train", "--resume_from_checkpoint", "last"))
    assert "skipping 1 newer checkpoint(s)" in caplog.text and cut_short.name in caplog.text
    steps = [e["step"] for e in log_history(run_dir) if "loss" in e]
    assert steps[-1] == killed_at + 4 and steps == sorted(set(steps))


# ---------------------------------------------------------------------------------------------------------
# Multi-process (2 CPU processes, gloo)
# ---------------------------------------------------------------------------------------------------------


def test_command_exits_zero_on_success(tmp_path):
    """`xlpe-train` as a shell command: exit status 0, so `pip install ... && xlpe-train ...` chains (the
    Python API `main` returns the metrics dict, which `sys.exit` would turn into status 1)."""
    console_script = (
        "import sys; from importlib.metadata import entry_points; "  # what pip's `xlpe-train` wrapper does
        "(command,) = entry_points(group='console_scripts', name='xlpe-train'); sys.argv[0] = 'xlpe-train'; "
        "sys.exit(command.load()())"
    )
    run = subprocess.run(
        [sys.executable, "-c", console_script, *tiny(tmp_path, "--max_steps", "2", "--max_predict_samples", "4")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert (tmp_path / "run" / "config.json").is_file()


def test_accelerate_launch_with_two_cpu_processes(tmp_path):
    launch = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--num_cpu_threads_per_process",
        "1",
        str(REPO / "scripts" / "train.py"),
        "--use_cpu",
    ]
    args = tiny(tmp_path, "--max_steps", "4", "--max_predict_samples", "7", "--per_device_eval_batch_size", "2")
    run = subprocess.run(
        launch + args,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert run.returncode == 0, run.stderr[-4000:]
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["global_step"] == 4 and state["epoch"] == pytest.approx(1.0)  # 64 pairs / (2 processes x 8)
    first = next(e for e in state["log_history"] if "loss" in e)
    # not x2 (nor x processes): `loss` is the target-token-weighted mean over the processes' batches
    # (weight_by_global_tokens), its logged parts plain means, so they agree to the spread of the token shares
    # (0.0002-0.0055 here, depending on the random stream), not exactly
    assert first["loss"] == pytest.approx(first["translation_loss"] + first["reorder_loss"], rel=1e-2)
    predict = json.loads((tmp_path / "run" / "predict_results.json").read_text())
    assert predict["predict_samples"] == 7  # the sampler's padding duplicates are not scored
    assert len((tmp_path / "run" / "generated_predictions.txt").read_text().splitlines()) == 7


def test_command_destroys_the_process_group_before_exit(tmp_path):
    """A rank that leaves its gloo group to static destructors can abort after a successful run (SIGABRT,
    "terminate called without an active exception"): `cli` joins the ranks and destroys the group."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        assert dist.is_initialized()
        finish_distributed()
        assert not dist.is_initialized()
        finish_distributed()  # no group: nothing to do
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.parametrize(
    "request_tags",
    [["--source_tagger", "nltk-en"], ["--config_overrides", "pos_tagger=nltk-en"]],
    ids=["flag", "config_overrides"],
)
def test_source_tags_stack_on_xl_pe_from_a_flag_or_the_config(tmp_path, request_tags, shared_dir):
    """XL PE + POS: the tagger named either way tags the data, its tag set goes into the config, the
    batches carry pos_tag_ids, and the saved model's pipeline tags raw text itself."""
    from xlpe import XLPETranslationPipeline

    nltk_data = str(shared_dir / "data" / "nltk_data")
    main(
        tiny(
            tmp_path, "--model_type", "xlpe", "--max_steps", "2", "--do_train", "--nltk_data", nltk_data, *request_tags
        )
    )
    run = tmp_path / "run"
    config = json.loads((run / "config.json").read_text())
    assert config["pos_tagger"] == "nltk-en" and len(config["pos_tags"]) == 45
    report = json.loads((run / "preparation_report.json").read_text())["train"]
    assert (
        report["features"] == ["reorder_positions", "pos_tag_ids"]
        and report["tag_vocabularies"]["source"][3:] == config["pos_tags"]
    )
    model = AutoModelForSeq2SeqLM.from_pretrained(run)
    model.config.nltk_data = nltk_data
    tokenizer = AutoTokenizer.from_pretrained(run)
    assert (
        model.prepare_pipeline_inputs(["the cat"], tokenizer, tokenizer(["the cat"], return_tensors="pt"))[
            "pos_tag_ids"
        ].shape[1]
        > 1
    )
    assert XLPETranslationPipeline(model=model, tokenizer=tokenizer)("the cat sees the dog", max_new_tokens=4)


def test_a_model_without_tags_ignores_the_tagger_flags_with_a_warning(tmp_path, caplog):
    main(tiny(tmp_path, "--model_type", "vanilla", "--max_steps", "1", "--do_train", "--source_tagger", "nltk-en"))
    assert "--source_tagger/--target_tagger ignored" in caplog.text
