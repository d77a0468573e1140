"""The preparation cache: a finished preparation is saved under a fingerprint of its text, alignments,
tokenizer (`tokenization.tokenizer_fingerprint`, canonical) and options, and an identical later run loads it
instead of aligning again; a tokenizer trained for a preparation is kept under a key of its training text and
options, so that an identical later run gets the very same tokenizer (and so the same feature fingerprint)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

from .corpus import ParallelSplit
from .example_features import PREPARATION_VERSION
from .tokenization import SCORE_DECIMALS, tokenizer_fingerprint

logger = logging.getLogger(__name__)


def _fingerprint(splits: dict[str, ParallelSplit], tokenizer, described_options: dict) -> str:
    digest = hashlib.sha256(f"xlpe-prepare v{PREPARATION_VERSION}".encode())
    for name, split in splits.items():
        digest.update(name.encode())
        for texts in (split.sources, split.targets):
            digest.update("\n".join(texts).encode() + b"\0")
        digest.update(json.dumps(split.alignments).encode())
    digest.update(tokenizer_fingerprint(tokenizer).encode())
    digest.update(json.dumps(described_options, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:20]


def _load_cache(cache_dir, fingerprint: str):
    path = Path(cache_dir) / f"xlpe-prepare-{fingerprint}" if cache_dir else None
    if path is None or not (path / "report.json").exists():
        return None
    import datasets

    logger.info("xlpe-prepare: cache hit %s", path)
    reports = json.loads((path / "report.json").read_text())
    for report in reports.values():
        report["cache_hit"] = True
    loaded = datasets.load_from_disk(str(path / "data"))
    return {name: loaded[name] for name in reports}, reports


def _save_cache(cache_dir, fingerprint: str, prepared: dict, reports: dict, replace: bool = False) -> None:
    """Write the entry aside and rename it into place; an existing entry is kept (a concurrent identical run
    finished first) unless `replace` (`overwrite_cache`), which swaps it out."""
    if not cache_dir:
        return
    import datasets

    path = Path(cache_dir) / f"xlpe-prepare-{fingerprint}"
    staging = path.with_name(f"{path.name}.tmp{os.getpid()}")  # written aside, renamed when complete
    shutil.rmtree(staging, ignore_errors=True)
    datasets.DatasetDict(prepared).save_to_disk(str(staging / "data"))
    (staging / "report.json").write_text(json.dumps(reports, indent=2, ensure_ascii=False))
    if path.exists() and replace:
        retired = path.with_name(f"{path.name}.old{os.getpid()}")
        os.replace(path, retired)
        os.replace(staging, path)
        shutil.rmtree(retired, ignore_errors=True)
    elif path.exists():  # a concurrent identical run finished first
        shutil.rmtree(staging)
    else:
        os.replace(staging, path)


# ----------------------------------------------------------------------------------------------------------
# Tokenizers trained for a preparation
# ----------------------------------------------------------------------------------------------------------


def tokenizer_cache_key(texts: list[str], options: dict) -> str:
    """Key of a tokenizer trained on `texts` with `options` (train_joint_tokenizer's keyword arguments)."""
    import tokenizers

    digest = hashlib.sha256(f"xlpe-tokenizer scores{SCORE_DECIMALS} tokenizers{tokenizers.__version__}".encode())
    digest.update(json.dumps(options, sort_keys=True).encode())
    digest.update("\n".join(texts).encode())
    return digest.hexdigest()[:20]


def load_cached_tokenizer(cache_dir, key: str):
    """The tokenizer saved under `key` in `cache_dir`, or None."""
    path = Path(cache_dir) / f"xlpe-tokenizer-{key}" if cache_dir else None
    if path is None or not (path / "tokenizer_config.json").is_file():
        return None
    from transformers import AutoTokenizer

    logger.info("xlpe-prepare: tokenizer cache hit %s", path)
    return AutoTokenizer.from_pretrained(str(path))


def save_cached_tokenizer(cache_dir, key: str, tokenizer) -> None:
    if not cache_dir:
        return
    path = Path(cache_dir) / f"xlpe-tokenizer-{key}"
    staging = path.with_name(f"{path.name}.tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    tokenizer.save_pretrained(str(staging))
    if path.exists():
        shutil.rmtree(staging)
    else:
        os.replace(staging, path)
