"""The preparation cache: a finished preparation is saved under a fingerprint of its text, alignments,
tokenizer and options, and an identical later run loads it instead of aligning again."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

from .corpus import ParallelSplit
from .example_features import PREPARATION_VERSION

logger = logging.getLogger(__name__)


def _tokenizer_fingerprint(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = backend.to_str()
    else:
        state = json.dumps(sorted(tokenizer.get_vocab().items())) + repr(getattr(tokenizer, "init_kwargs", {}))
    return hashlib.sha256((type(tokenizer).__name__ + state).encode()).hexdigest()


def _fingerprint(splits: dict[str, ParallelSplit], tokenizer, described_options: dict) -> str:
    digest = hashlib.sha256(f"xlpe-prepare v{PREPARATION_VERSION}".encode())
    for name, split in splits.items():
        digest.update(name.encode())
        for texts in (split.sources, split.targets):
            digest.update("\n".join(texts).encode() + b"\0")
        digest.update(json.dumps(split.alignments).encode())
    digest.update(_tokenizer_fingerprint(tokenizer).encode())
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


def _save_cache(cache_dir, fingerprint: str, prepared: dict, reports: dict) -> None:
    if not cache_dir:
        return
    import datasets

    path = Path(cache_dir) / f"xlpe-prepare-{fingerprint}"
    staging = path.with_name(f"{path.name}.tmp{os.getpid()}")  # written aside, renamed when complete
    shutil.rmtree(staging, ignore_errors=True)
    datasets.DatasetDict(prepared).save_to_disk(str(staging / "data"))
    (staging / "report.json").write_text(json.dumps(reports, indent=2, ensure_ascii=False))
    if path.exists():  # a concurrent identical run finished first
        shutil.rmtree(staging)
    else:
        os.replace(staging, path)
