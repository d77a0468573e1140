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
# Markers. `gpu`: tests that need a CUDA device (tests/gpu); skipped without one, so CI never depends on it.
# `slow`: the long end-to-end variants of a test whose short version runs by default (the suite stays within about
# ten minutes on CI's two cores); XLPE_SLOW_TESTS=1 (or `-m slow`) runs them too.
# ---------------------------------------------------------------------------------------------------------


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "gpu: needs a CUDA device, skipped without one (run: python -m pytest tests/gpu "
        "-m gpu, or bench/gpu_session.sh tests; XLPE_TEST_DEVICE=cpu runs them on the CPU)",
    )
    config.addinivalue_line(
        "markers",
        "slow: a long end-to-end variant whose short version runs by default; run with XLPE_SLOW_TESTS=1 (or -m slow)",
    )


def run_slow_tests(config) -> bool:
    return os.environ.get("XLPE_SLOW_TESTS") == "1" or "slow" in (config.getoption("-m", default="") or "")


def pytest_collection_modifyitems(config, items):
    if not run_slow_tests(config):
        skip_slow = pytest.mark.skip(reason="slow end-to-end variant (XLPE_SLOW_TESTS=1 runs it)")
        for item in items:
            if item.get_closest_marker("slow") is not None:
                item.add_marker(skip_slow)
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items or os.environ.get("XLPE_TEST_DEVICE", "cuda") != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        skip = pytest.mark.skip(
            reason="needs a CUDA device (marker gpu; XLPE_TEST_DEVICE=cpu runs the checks on the CPU)"
        )
        for item in gpu_items:
            item.add_marker(skip)
