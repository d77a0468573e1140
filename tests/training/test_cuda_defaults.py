"""Fast `xlpe-train` on CUDA: the defaults decided from a (fake) device description, explicit flags
winning, the decision going through the argument parser, and the throughput fields (target tokens/s; MFU only
where a GPU's peak is known) in the training log and the run report. All on CPU."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from test_train import log_history, tiny
from transformers import MarianConfig

from xlpe.training import run_config
from xlpe.training.recipes import (
    CUDA_DEFAULT_MAX_TOKENS,
    cuda_fast_defaults,
    describe_fast_defaults,
)
from xlpe.training.run import main
from xlpe.training.throughput import TrainingReport, peak_tflops, train_flops_per_token

H100 = {"type": "cuda", "name": "NVIDIA H100 80GB HBM3", "capability": (9, 0), "compile": True, "cpus": 16}
V100 = {"type": "cuda", "name": "Tesla V100-SXM2-16GB", "capability": (7, 0), "compile": True, "cpus": 8}


def test_on_an_h100_every_fast_switch_is_on_by_default():
    decision = cuda_fast_defaults(H100, given=set())
    assert decision["applied"] == {
        "bf16": True,
        "optim": "adamw_torch_fused",
        "torch_compile": True,
        "max_tokens": CUDA_DEFAULT_MAX_TOKENS,
        "dataloader_num_workers": 2,
    }
    assert decision["kept"] == {}
    line = describe_fast_defaults(decision, H100)
    assert "NVIDIA H100" in line and "--torch_compile True" in line and "--torch_compile False" in line


@pytest.mark.parametrize("device", [None, {"type": "cpu"}])
def test_nothing_changes_off_cuda(device):
    assert cuda_fast_defaults(device, given=set()) == {"applied": {}, "kept": {}}
    assert describe_fast_defaults({"applied": {}, "kept": {}}, device) == ""


def test_explicit_flags_and_recipe_batching_win_and_are_named():
    given = {"torch_compile", "bf16", "optim", "per_device_train_batch_size", "dataloader_num_workers"}
    decision = cuda_fast_defaults(H100, given)
    assert decision["applied"] == {}
    assert set(decision["kept"]) == {"bf16", "optim", "torch_compile", "max_tokens", "dataloader_num_workers"}
    assert "per_device_train_batch_size" in decision["kept"]["max_tokens"]
    assert cuda_fast_defaults(H100, {"fp16"})["kept"]["bf16"] == "precision given (--fp16)"
    assert "torch_compile" not in cuda_fast_defaults(H100, {"torch_compile_mode"})["applied"]
    assert "max_tokens" not in cuda_fast_defaults(H100, {"max_tokens"})["applied"]  # a recipe's 4096 stays its own


def test_old_gpus_sharding_and_missing_triton_keep_the_safe_choice():
    old = cuda_fast_defaults(V100, set())
    assert "bf16" not in old["applied"] and "7.0 < 8.0" in old["kept"]["bf16"] and old["applied"]["torch_compile"]
    assert "FSDP" in cuda_fast_defaults(H100, set(), sharded=True)["kept"]["torch_compile"]
    assert "triton" in cuda_fast_defaults({**H100, "compile": False}, set())["kept"]["torch_compile"]
    assert "dataloader_num_workers" not in cuda_fast_defaults({**H100, "cpus": 2}, set())["applied"]


def test_the_parser_applies_the_decision_and_explicit_flags_override_it(tmp_path, monkeypatch):
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
    ]  # use_cpu: bf16 on this CPU
    config = run_config.parse_run_config(data)
    args = config.training
    assert (args.bf16, args.optim, args.torch_compile, args.max_tokens) == (
        True,
        "adamw_torch_fused",
        True,
        CUDA_DEFAULT_MAX_TOKENS,
    )
    assert config.cuda_defaults["device"]["name"] == H100["name"] and config.cuda_defaults["kept"] == {}
    config = run_config.parse_run_config(
        [
            *data,
            "--torch_compile",
            "False",
            "--bf16",
            "False",
            "--optim",
            "adamw_torch",
            "--per_device_train_batch_size",
            "16",
        ]
    )
    args = config.training
    assert (args.bf16, args.optim, args.torch_compile, args.max_tokens) == (False, "adamw_torch", False, None)
    assert set(config.cuda_defaults["kept"]) >= {"bf16", "optim", "torch_compile", "max_tokens"}
    _, _, args = run_config.parse_arguments(
        [*data, "--recipe", "base"]
    )  # the recipe's token batches, fitted to the H100
    assert args.max_tokens == 16384 and args.torch_compile and args.bf16  # (recipes.fit_recipe_to_device)


def test_flops_per_token_of_transformer_base():
    config = MarianConfig(
        d_model=512, encoder_layers=6, decoder_layers=6, encoder_ffn_dim=2048, decoder_ffn_dim=2048, vocab_size=32000
    )
    source, target = train_flops_per_token(config)
    d = 512
    assert source == 6 * (6 * (4 * d * d + 2 * d * 2048) + 6 * 2 * d * d)
    assert target == 6 * (6 * (6 * d * d + 2 * d * 2048) + d * 32000)
    deeper = train_flops_per_token(SimpleNamespace(**config.to_dict(), dpe_layers=2))  # DPE's block: encoder layers
    assert deeper[0] == source + 6 * 2 * (4 * d * d + 2 * d * 2048) and deeper[1] == target
    assert train_flops_per_token(SimpleNamespace(d_model=8)) is None


def test_peak_table_names_the_h100_h200_and_a100_figures():
    assert peak_tflops("NVIDIA H100 80GB HBM3") == 989.4 and peak_tflops("NVIDIA H200") == 989.4
    assert peak_tflops("NVIDIA H100 PCIe") == 756.0 and peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert peak_tflops("NVIDIA A10") == 125.0 and peak_tflops("Some GPU") is None and peak_tflops(None) is None
    assert peak_tflops("NVIDIA A10G") is None  # not the A10 (tests/training/test_mfu_table.py: exact names)


def test_throughput_meter_gives_mfu_only_with_a_peak():
    config = MarianConfig(
        d_model=32, encoder_layers=1, decoder_layers=1, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=100
    )
    args = SimpleNamespace(device=torch.device("cpu"), world_size=1)
    for peak, has_mfu in ((None, False), (1e-6, True)):
        meter = TrainingReport(config, peak=peak)
        meter.on_train_begin(args, None, None)
        logs = meter.interval(source_tokens=1000, target_tokens=800)
        assert logs["target_tokens_per_second"] > 0 and ("mfu" in logs) is has_mfu
        meter.on_evaluate(args, None, None)  # evaluation time is not training time
        meter.on_train_end(args, None, None)
        totals = meter.totals(2000, 1600)
        assert totals["train_target_tokens_per_second"] > 0 and ("train_mfu" in totals) is has_mfu


def test_training_log_and_report_carry_the_throughput_on_cpu(tmp_path):
    """A tiny CPU run: every training log line has target tokens/s, the report (train_results.json) has the
    training throughput; MFU is omitted on CPU (no peak), not zero. No cuda_defaults.json off CUDA."""
    main(tiny(tmp_path, "--max_steps", "4", "--do_train", "--save_strategy", "no"))
    run = tmp_path / "run"
    lines = [entry for entry in log_history(run) if "loss" in entry]
    assert lines and all(entry["target_tokens_per_second"] > 0 and "mfu" not in entry for entry in lines)
    results = json.loads((run / "train_results.json").read_text())
    assert results["train_target_tokens_per_second"] > 0 and results["train_target_tokens"] > 0
    assert "train_mfu" not in results and not (run / "cuda_defaults.json").exists()
