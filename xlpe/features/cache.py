"""The preparation cache: a finished preparation is saved under a fingerprint of its text, alignments,
tokenizer (`tokenization.tokenizer_fingerprint`, canonical) and options, and an identical later run loads it
instead of aligning again; a tokenizer trained for a preparation is kept under a key of its training text and
options, so that an identical later run gets the very same tokenizer (and so the same feature fingerprint).
Keys are digests of unambiguous encodings (`artefacts.digest` of canonical JSON, `artefacts.lines_digest` of the
texts: line boundaries included), so two different inputs never share an entry whatever characters their lines
hold; `CACHE_KEY_VERSION` is part of every key.

Every entry carries `checksum.json` (the SHA-256 of each of its files), written last, before the entry is renamed
into place; an entry is verified before it is used. One that fails (a file changed, truncated or missing, no
checksum at all: an older xlpe or an interrupted copy, or one that does not load) is reported with a warning
naming it and why, removed, and rebuilt. Entries are written in a temporary directory beside their final name,
which is removed when writing fails; the rename makes a whole entry appear at once, and when two identical runs
finish together the first one's entry is kept."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from .artefacts import digest, file_digest, lines_digest
from .corpus import ParallelSplit
from .example_features import PREPARATION_VERSION
from .text_files import staging_dir
from .tokenization import SCORE_DECIMALS, tokenizer_fingerprint

logger = logging.getLogger(__name__)


CACHE_KEY_VERSION = 2  # 2: keys are digests of unambiguous encodings (1 joined texts with "\n": entries of
#   version 1 are never found under a version 2 key, so they are harmless misses)


def _fingerprint(splits: dict[str, ParallelSplit], tokenizer, described_options: dict) -> str:
    """The preparation cache's key: a digest of the canonical JSON of every fact that decides the prepared data
    (split names, each side's `lines_digest`, the links, the tokenizer's fingerprint, the options): no two
    different inputs encode alike, whatever characters (newlines, NULs) the texts hold."""
    facts = {
        "key": f"xlpe-prepare cache v{CACHE_KEY_VERSION}",
        "preparation": PREPARATION_VERSION,
        "splits": [
            [
                name,
                lines_digest(split.sources),
                lines_digest(split.targets),
                None if split.alignments is None else digest(_links_json(split.alignments)),
            ]
            for name, split in splits.items()
        ],
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "options": json.loads(json.dumps(described_options, sort_keys=True, default=str)),
    }
    return digest(facts)[:20]


def _links_json(alignments) -> list:
    """Links as JSON (flat int lists, numpy arrays or pairs), one entry per pair."""
    return [links.tolist() if hasattr(links, "tolist") else list(links) for links in alignments]


CHECKSUM_FILE = "checksum.json"


def _tree_digest(path: Path) -> dict[str, str]:
    """{relative path: SHA-256} of every file under `path` except the checksum file."""
    digests = {}
    for file in sorted(p for p in path.rglob("*") if p.is_file() and p.name != CHECKSUM_FILE):
        digests[file.relative_to(path).as_posix()] = file_digest(file)
    return digests


def write_checksum(path: Path) -> None:
    """Record the checksums of the entry at `path` (call when every other file is written)."""
    (path / CHECKSUM_FILE).write_text(json.dumps(_tree_digest(path), indent=1, sort_keys=True))


def verify_entry(path: Path) -> str | None:
    """Why the cache entry at `path` cannot be trusted, or None when every file matches its recorded checksum."""
    try:
        recorded = json.loads((path / CHECKSUM_FILE).read_text())
    except FileNotFoundError:
        return f"no {CHECKSUM_FILE} (written by an older xlpe, or not completely)"
    except (OSError, ValueError) as error:
        return f"{CHECKSUM_FILE} is unreadable ({error})"
    actual = _tree_digest(path)
    if actual != recorded:
        differing = sorted(name for name in recorded.keys() | actual.keys() if recorded.get(name) != actual.get(name))
        return f"{len(differing)} file(s) missing, added or changed since written: {', '.join(differing[:3])}"
    return None


def retire_directory(path: Path, label: str) -> bool:
    """Remove the directory `path`: renamed aside first (`.NAME.LABEL<pid>`), so no reader ever sees a half-removed
    one, then deleted. False when it was gone already (another process retired it first)."""
    retired = path.with_name(f".{path.name}.{label}{os.getpid()}")
    try:
        os.replace(path, retired)
    except OSError:
        return False
    shutil.rmtree(retired, ignore_errors=True)
    return True


def _discard(path: Path, problem: str) -> None:
    logger.warning("xlpe-prepare: cache entry %s is corrupt (%s): removing it and rebuilding", path, problem)
    retire_directory(path, "corrupt")


def _load_verified(path: Path | None, load):
    """`load(path)` for a cache entry whose checksums match, or None: no entry, or a corrupt one (it does not
    match or does not load), which is removed with a warning so that the caller rebuilds it."""
    if path is None or not path.is_dir():
        return None
    problem = verify_entry(path)
    if problem is None:
        try:
            return load(path)
        except Exception as error:  # noqa: BLE001  (anything unreadable: rebuilt, never used)
            problem = f"it does not load: {type(error).__name__}: {' '.join(str(error).split())[:200]}"
    _discard(path, problem)
    return None


def _load_cache(cache_dir, fingerprint: str):
    import datasets

    def load(path):
        reports = json.loads((path / "report.json").read_text())
        loaded = datasets.load_from_disk(str(path / "data"))
        return {name: loaded[name] for name in reports}, reports

    path = Path(cache_dir) / f"xlpe-prepare-{fingerprint}" if cache_dir else None
    entry = _load_verified(path, load)
    if entry is None:
        return None
    result, reports = entry
    logger.info("xlpe-prepare: cache hit %s", path)
    for report in reports.values():
        report["cache_hit"] = True
    return result, reports


def _install(staging: Path, path: Path, replace: bool) -> None:
    """Rename the finished `staging` to `path`: an existing entry is kept (a concurrent identical run finished
    first) unless `replace`, which swaps it out."""
    if path.exists() and replace:
        retired = path.with_name(f".{path.name}.old{os.getpid()}")
        os.replace(path, retired)
        os.replace(staging, path)
        shutil.rmtree(retired, ignore_errors=True)
    elif path.exists():
        shutil.rmtree(staging)
    else:
        try:
            os.replace(staging, path)
        except OSError:  # created meanwhile by a concurrent identical run (a non-empty directory is not replaced)
            shutil.rmtree(staging, ignore_errors=True)


def _save_cache(cache_dir, fingerprint: str, prepared: dict, reports: dict, replace: bool = False) -> None:
    """Write the entry aside, with its checksums, and rename it into place (`_install`)."""
    if not cache_dir:
        return
    import datasets

    path = Path(cache_dir) / f"xlpe-prepare-{fingerprint}"
    with staging_dir(path, create_parent=True) as staging:
        datasets.DatasetDict(prepared).save_to_disk(str(staging / "data"))
        (staging / "report.json").write_text(json.dumps(reports, indent=2, ensure_ascii=False))
        write_checksum(staging)
        _install(staging, path, replace)


# ----------------------------------------------------------------------------------------------------------
# Tokenizers trained for a preparation
# ----------------------------------------------------------------------------------------------------------


def tokenizer_cache_key(texts: list[str], options: dict) -> str:
    """Key of a tokenizer trained on `texts` with `options` (train_joint_tokenizer's keyword arguments): a digest
    of the options, the library version and the texts' `lines_digest` (line boundaries included)."""
    import tokenizers

    return digest(
        {
            "key": f"xlpe-tokenizer v{CACHE_KEY_VERSION}",
            "scores": SCORE_DECIMALS,
            "tokenizers": tokenizers.__version__,
            "options": options,
            "texts": lines_digest(texts),
        }
    )[:20]


def load_cached_tokenizer(cache_dir, key: str):
    """The tokenizer saved under `key` in `cache_dir`, or None (also when the entry is corrupt: removed, with a
    warning, so that the caller trains and saves it again)."""
    from transformers import AutoTokenizer

    path = Path(cache_dir) / f"xlpe-tokenizer-{key}" if cache_dir else None
    tokenizer = _load_verified(path, lambda entry: AutoTokenizer.from_pretrained(str(entry)))
    if tokenizer is None:
        return None
    logger.info("xlpe-prepare: tokenizer cache hit %s", path)
    return tokenizer


def save_cached_tokenizer(cache_dir, key: str, tokenizer) -> None:
    if not cache_dir:
        return
    path = Path(cache_dir) / f"xlpe-tokenizer-{key}"
    with staging_dir(path, create_parent=True) as staging:
        tokenizer.save_pretrained(str(staging))
        write_checksum(staging)
        _install(staging, path, replace=False)
