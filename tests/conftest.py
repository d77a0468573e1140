"""Shared fixtures: where ../shared is, and a tiny tokenizer trained once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = Path(os.environ.get("XLPE_SHARED_DIR", REPO_ROOT.parent / "shared"))

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
