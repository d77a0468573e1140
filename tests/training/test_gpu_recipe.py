"""A recipe fitted to the GPU: the token batch and, for `small`, the width chosen from the device's
peak, SMs and memory (fake device descriptions, on CPU), and persistent dataloader workers whenever there are
workers."""

from __future__ import annotations

import pytest

from xlpe.training import run_config
from xlpe.training.recipes import (
    GPU_MAX_TOKENS,
    SMALL_WIDE_MODEL,
    device_token_batch,
    fit_recipe_to_device,
    recipe_settings,
)

GiB = 2**30
H100 = {
    "type": "cuda",
    "name": "NVIDIA H100 80GB HBM3",
    "capability": (9, 0),
    "compile": True,
    "cpus": 16,
    "multi_processor_count": 132,
    "memory": 80 * GiB,
}
A100 = {**H100, "name": "NVIDIA A100-SXM4-40GB", "capability": (8, 0), "multi_processor_count": 108, "memory": 40 * GiB}
L4 = {**H100, "name": "NVIDIA L4", "capability": (8, 9), "multi_processor_count": 58, "memory": 22 * GiB}
MIG = {**H100, "name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "multi_processor_count": 16, "memory": 10 * GiB}
UNKNOWN = {"type": "cuda", "name": "Some GPU", "capability": (7, 5)}


@pytest.mark.parametrize(
    "device, d_model, max_tokens, lr",
    [
        (H100, 512, 16384, 7e-4),  # d 256 would need ~38k tokens a step: widened, then 16k fill it
        (A100, 256, 16384, 1e-3),
        (L4, 256, 8192, 1e-3),
        (MIG, 256, 8192, 1e-3),  # 16 of 132 SMs: an eighth of the H100's peak
        (UNKNOWN, 256, 2048, 1e-3),  # nothing known: the recipe as it is
    ],
)
def test_small_recipe_fits_the_device(device, d_model, max_tokens, lr):
    settings = recipe_settings("small", from_scratch=True, device=device)
    assert (settings["d_model"], settings["max_tokens"], settings["learning_rate"]) == (d_model, max_tokens, lr)
    if d_model == 512:
        assert {key: settings[key] for key in SMALL_WIDE_MODEL} == SMALL_WIDE_MODEL
    assert settings["encoder_layers"] == settings["decoder_layers"] == 3  # depth and schedule stay the recipe's
    assert settings["max_steps"] == 1200 and settings["warmup_steps"] == 400


def test_base_and_big_get_a_device_batch_and_keep_their_model():
    base = recipe_settings("base", from_scratch=True, device=H100)
    assert (base["d_model"], base["max_tokens"], base["dropout"]) == (512, 16384, 0.1)
    assert recipe_settings("base", from_scratch=True, device=A100)["max_tokens"] == 4096  # 2,975 fill an A100
    big = recipe_settings("big", from_scratch=True, device=H100)
    assert (big["d_model"], big["max_tokens"]) == (1024, 4096)
    # not from scratch (a checkpoint's architecture): the batch for the recipe's width, no widening
    finetune = recipe_settings("small", from_scratch=False, device=H100)
    assert "d_model" not in finetune and finetune["max_tokens"] == GPU_MAX_TOKENS
    assert recipe_settings("small", from_scratch=True) == recipe_settings(
        "small", from_scratch=True, device={"type": "cpu"}
    )


def test_memory_caps_the_batch_and_notes_say_why():
    small_memory = {**H100, "memory": 2 * GiB}
    tokens, why = device_token_batch(small_memory, 512, 2048, 12, 16000, floor=4096)
    assert tokens == 4096 and "fit in 50% of 2 GiB" in why  # never below the recipe's own batch
    settings, notes = fit_recipe_to_device("small", recipe_settings("small", True), H100)
    assert settings["max_tokens"] == 16384 and any("d 256 would need" in note for note in notes)
    assert any("max_tokens 16,384 instead of 2,048" in note for note in notes)
    without = {key: value for key, value in recipe_settings("small", True).items() if key != "max_tokens"}
    assert fit_recipe_to_device("small", without, H100) == (without, [])  # a sentence batching: left alone


def test_the_parser_fits_the_recipe_to_the_device_and_explicit_flags_win(tmp_path, monkeypatch):
    monkeypatch.setattr(run_config, "describe_device", lambda training_args: dict(H100))
    data = [
        "--train_source_file",
        "a.en",
        "--train_target_file",
        "a.de",
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--do_train",
        "--use_cpu",
        "--output_dir",
        str(tmp_path),
        "--recipe",
        "small",
    ]
    _, _, args = run_config.parse_arguments(data)
    assert args.max_tokens == 16384
    model_args, _, args = run_config.parse_arguments([*data, "--max_tokens", "3000", "--d_model", "384"])
    assert args.max_tokens == 3000 and model_args.d_model == 384


@pytest.mark.parametrize(
    "flags, persistent",
    [
        ([], False),
        (["--dataloader_num_workers", "2"], True),
        (["--dataloader_num_workers", "2", "--dataloader_persistent_workers", "False"], False),
    ],
)
def test_dataloader_workers_persist_across_epochs(tmp_path, flags, persistent):
    _, _, args = run_config.parse_arguments(["--output_dir", str(tmp_path), "--recipe", "small", *flags])
    assert args.dataloader_persistent_workers is persistent
