"""Shared fixtures: where ../shared is, a tiny tokenizer trained once per test session, and a Multi30k slice
written as the raw files a user starts from."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = Path(os.environ.get("XLPE_SHARED_DIR", REPO_ROOT.parent / "shared"))

# The smallest model xlpe-train builds (its model flags), for runs that only need training to happen
TINY_MODEL_ARGS = [
    "--d_model",
    "16",
    "--ffn_dim",
    "32",
    "--attention_heads",
    "2",
    "--encoder_layers",
    "1",
    "--decoder_layers",
    "1",
]

# A small vocabulary of words that every tiny model test uses (no corpus text is stored in the repo).
TOY_SENTENCES = [
    "the cat sees the dog",
    "a dog chases the small cat",
    "die katze sieht den hund",
    "ein hund jagt die kleine katze",
    "the man reads a book in the garden",
    "der mann liest ein buch im garten",
    "children play with a red ball",
    "kinder spielen mit einem roten ball",
]


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED_DIR.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"shared data directory {SHARED_DIR} is missing (CI must have ../shared beside the repo)")
        pytest.skip(f"shared data directory {SHARED_DIR} not found (set XLPE_SHARED_DIR)")
    return SHARED_DIR


@pytest.fixture(scope="session")
def toy_tokenizer():
    from xlpe.features.tokenization import train_joint_tokenizer

    return train_joint_tokenizer(TOY_SENTENCES * 4, vocab_size=120)


MULTI30K_RAW = SHARED_DIR / "data" / "multi30k" / "raw"
MULTI30K_SPLITS = {
    "train": ("train", 120),
    "dev": ("val", 12),
    "test": ("test_2016_flickr", 12),
}  # file name -> Multi30k


def write_multi30k_slice(folder: Path, lines_per_split: dict | None = None) -> None:
    """`train.de/.en`, `dev.*`, `test.*` in `folder`: the first lines of Multi30k's raw splits (skips the test
    when the shared data is missing)."""
    if not MULTI30K_RAW.is_dir():
        pytest.skip(f"{MULTI30K_RAW} not found")
    for name, (source, count) in MULTI30K_SPLITS.items():
        count = (lines_per_split or {}).get(name, count)
        for lang in ("de", "en"):
            with gzip.open(MULTI30K_RAW / f"{source}.{lang}.gz", "rt", encoding="utf-8") as handle:
                (folder / f"{name}.{lang}").write_text("".join(next(handle) for _ in range(count)), encoding="utf-8")


def save_tiny_xlpe_model(tokenizer, directory: Path, model_max_length: int | None = None) -> Path:
    """A tiny untrained XL PE translation model (position table of 64) and `tokenizer` saved in `directory`
    (`model_max_length`: what the saved tokenizer claims as its limit, when given)."""
    import json

    import torch

    from xlpe import XLPEMarianConfig, XLPEMarianMTModel

    torch.manual_seed(0)
    config = XLPEMarianConfig(
        vocab_size=len(tokenizer),
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        dropout=0.0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
        forced_eos_token_id=tokenizer.eos_token_id,
        init_std=0.3,
    )
    XLPEMarianMTModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    if model_max_length is not None:
        config_file = directory / "tokenizer_config.json"
        config_file.write_text(
            json.dumps({**json.loads(config_file.read_text()), "model_max_length": model_max_length})
        )
    return directory


# ---------------------------------------------------------------------------------------------------------
# Markers and collection. A test that can never run in this run is deselected, not skipped (pytest reports it as
# "N deselected"), so that a skip in the summary means something: a missing optional package or shared-data file,
# or a model attribute upstream's test looks for.
# `gpu`: tests that need a CUDA device (tests/gpu): deselected without one, skipped with a reason when `-m gpu`
#     asks for them anyway; XLPE_TEST_DEVICE=cpu runs them on the CPU.
# `slow`: the long end-to-end variants of a test whose short version runs by default (the suite stays within about
#     ten minutes on CI's two cores): deselected unless XLPE_SLOW_TESTS=1 (or `-m slow`).
# Stock-baseline classes of tests/models/test_transformers_common.py: deselected unless XLPE_STOCK_BASELINE=1 (which
#     also collects every upstream test below, so that the baseline compares stock and families test by test).
# Upstream's mixin tests (tests/transformers_testing/) that need hardware, packages or an architecture these
#     encoder-decoder families never have: deselected by name (UPSTREAM_NEVER_HERE).
# ---------------------------------------------------------------------------------------------------------

# transformers' ModelTesterMixin / GenerationTesterMixin tests that skip for every family and for stock
# Marian/BART alike on a CPU-only machine with the test extras (tests/transformers_testing/README.md, "Baseline").
UPSTREAM_NEVER_HERE = {
    # an accelerator, several accelerators, device maps and offloading to one: CI has one CPU
    "accelerator": (
        "test_can_load_with_device_context_manager",
        "test_can_load_with_global_device_set",
        "test_cpu_offload",
        "test_disk_offload_bin",
        "test_disk_offload_safetensors",
        "test_flex_attention_with_grads",
        "test_model_parallel_beam_search",
        "test_model_parallelism",
    ),
    # flash attention 2/3/4 and the Hub kernels: CUDA-only packages, never installed here
    "flash attention, kernels": (
        "*flash_attn*",
        "*flash_attention*",
        "test_eager_matches_fa?_generate",
        "test_kernels_can_load_without_crashing",
    ),
    # deepspeed and optimum-quanto: not dependencies of the package or its tests
    "deepspeed, quanto": ("*deepspeed*", "test_generate_with_quant_cache"),
    # tensor parallelism: the families (like Marian and BART) declare no TP plan
    "tensor parallel": ("test_tp_plan_matches_params", "test_tied_head_has_a_tp_plan_entry"),
    # mixture of experts: no sparse experts, no router logits, no grouped expert matmuls
    "MoE": (
        "test_moe_models_record_router_logits",
        "test_output_router_logits_from_config",
        "test_eager_matches_batched_and_grouped_inference_*",
    ),
    # architectures these encoder-decoder models are not: RoPE scaling (their RoPE option has no scaling config),
    # composite/multimodal, decoder-only generation from embeddings or with a static cache, multi-token prediction,
    # recurrent layers, sliding windows, position_ids, logits_to_keep, padding-free attention masks
    "architecture": (
        "test_model_rope_scaling_*",
        "test_model_rope_with_partial_rotation",
        "test_vision_axial_rope",
        "test_attn_implementation_composite_models",
        "test_can_set_attention_dynamically_composite_model",
        "test_sdpa_can_dispatch_composite_models",
        "test_internal_model_config_and_subconfig_are_same",
        "test_causal_lm_loss_honors_shift_labels",
        "test_left_padding_compatibility",
        "test_generate_continue_from_inputs_embeds",
        "test_generate_from_inputs_embeds_with_static_cache",
        "test_generate_with_static_cache",
        "test_generate_with_mtp",
        "test_recurrent_layers_mask_padding_on_continued_forward",
        "test_sliding_window_mask",
        "test_generate_with_and_without_position_ids",
        "test_forward_with_logits_to_keep",
        "test_generate_methods_with_logits_to_keep",
        "test_eager_padding_matches_padding_free_with_position_ids",
        "test_sdpa_padding_matches_padding_free_with_position_ids",
    ),
}


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "gpu: needs a CUDA device, deselected without one (run: python -m pytest tests/gpu "
        "-m gpu, or bench/gpu_session.sh tests; XLPE_TEST_DEVICE=cpu runs them on the CPU)",
    )
    config.addinivalue_line(
        "markers",
        "slow: a long end-to-end variant whose short version runs by default; deselected unless "
        "XLPE_SLOW_TESTS=1 (or -m slow)",
    )


def run_slow_tests(config) -> bool:
    return os.environ.get("XLPE_SLOW_TESTS") == "1" or "slow" in (config.getoption("-m", default="") or "")


def upstream_never_here(item) -> bool:
    """One of upstream's vendored mixin tests named in UPSTREAM_NEVER_HERE."""
    from fnmatch import fnmatchcase

    module = getattr(getattr(item, "obj", None), "__module__", "") or ""
    if not module.startswith("transformers_testing"):
        return False
    name = getattr(item, "originalname", None) or item.name
    return any(fnmatchcase(name, pattern) for patterns in UPSTREAM_NEVER_HERE.values() for pattern in patterns)


def never_here(item, slow: bool, stock: bool, gpu: bool) -> bool:
    if not slow and item.get_closest_marker("slow") is not None:
        return True
    if not gpu and item.get_closest_marker("gpu") is not None:
        return True
    if (
        not stock
        and item.cls is not None
        and item.cls.__name__.startswith("Stock")
        and "transformers_common" in item.nodeid
    ):
        return True
    return not stock and upstream_never_here(item)  # the baseline run sees every upstream test, as stock does


def gpu_runs(config) -> bool:
    """Whether the gpu tests are collected: a CUDA device, XLPE_TEST_DEVICE=cpu, or `-m gpu` asking for them."""
    if os.environ.get("XLPE_TEST_DEVICE", "cuda") != "cuda" or "gpu" in (config.getoption("-m", default="") or ""):
        return True
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    slow, stock = run_slow_tests(config), os.environ.get("XLPE_STOCK_BASELINE") == "1"
    gpu = gpu_runs(config) if any(item.get_closest_marker("gpu") is not None for item in items) else True
    deselected = [item for item in items if never_here(item, slow, stock, gpu)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        keep = set(map(id, deselected))
        items[:] = [item for item in items if id(item) not in keep]
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items or os.environ.get("XLPE_TEST_DEVICE", "cuda") != "cuda":
        return
    import torch

    if not torch.cuda.is_available():  # asked for with -m gpu on a machine without one
        skip = pytest.mark.skip(
            reason="needs a CUDA device (marker gpu; XLPE_TEST_DEVICE=cpu runs the checks on the CPU)"
        )
        for item in gpu_items:
            item.add_marker(skip)
