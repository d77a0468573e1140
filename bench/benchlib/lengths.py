"""Real sentence-length distributions for the speed benchmark: the joint histogram of (source, target) lengths in
sub-word tokens (EOS included) of a real corpus, stored in `lengths_<name>.json` beside this file, so the bench
draws batches of real shapes on a machine that has no corpus (the GPU machine).

`newstest-deen`: WMT newstest2008-2019 (news-test2008, newssyscomb2009, newstest2009-2019; 2020 is document-level and
left out), de -> en, 32,741 pairs (5 longer ones dropped) from `shared/data/wmt_newstest_tatoeba_testsets`, tokenized
with a joint 32k BPE (`xlpe.features.tokenization.train_joint_tokenizer`) trained on both sides; pairs with a side over
128 tokens (`xlpe-train`'s default `--max_source_length`/`--max_target_length`) dropped, as training drops them. Rebuild
(about a minute): `python bench/benchlib/lengths.py`.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
NEWSTEST_SETS = ["news-test2008", "newssyscomb2009", *[f"newstest{year}" for year in range(2009, 2020)]]
MAX_LENGTH = 128


def path_of(name: str) -> Path:
    return HERE / f"lengths_{name}.json"


def load(name: str = "newstest-deen") -> dict:
    """{"name", "description", "pairs": [[source_len, target_len, count], ...]} of a stored distribution."""
    path = path_of(name)
    if not path.is_file():
        known = sorted(p.stem.removeprefix("lengths_") for p in HERE.glob("lengths_*.json"))
        raise ValueError(f"--lengths {name!r}: no {path.name} (stored distributions: {known})")
    return json.loads(path.read_text())


def sample(distribution: dict, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`count` (source, target) length pairs drawn with replacement from the stored histogram."""
    table = np.asarray(distribution["pairs"], dtype=np.int64)
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(table), size=count, p=table[:, 2] / table[:, 2].sum())
    return table[rows, 0], table[rows, 1]


def build(data_dir: Path, vocab_size: int = 32000) -> dict:
    sys.path.insert(0, str(HERE.parents[1]))
    from xlpe.features.tokenization import train_joint_tokenizer

    def read(path: Path) -> list[str]:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            return [line.rstrip("\n") for line in handle]

    sources, targets = [], []
    for name in NEWSTEST_SETS:
        sources += read(data_dir / f"{name}.deu.gz")
        targets += read(data_dir / f"{name}.eng.gz")
    tokenizer = train_joint_tokenizer(sources + targets, vocab_size=vocab_size, model="bpe")
    source_lengths = [len(ids) for ids in tokenizer(sources)["input_ids"]]  # EOS appended by the tokenizer
    target_lengths = [len(ids) for ids in tokenizer(text_target=targets)["input_ids"]]
    kept = [(s, t) for s, t in zip(source_lengths, target_lengths) if 0 < s <= MAX_LENGTH and 0 < t <= MAX_LENGTH]
    counts = Counter(kept)
    return {
        "name": "newstest-deen",
        "description": (
            f"WMT newstest2008-2019 de->en ({len(kept):,} of {len(sources):,} pairs, both sides <= {MAX_LENGTH} "
            f"tokens), joint BPE {vocab_size // 1000}k, EOS included; mean source "
            f"{np.mean([s for s, _ in kept]):.1f}, target {np.mean([t for _, t in kept]):.1f} tokens"
        ),
        "pairs": sorted([s, t, c] for (s, t), c in counts.items()),
    }


if __name__ == "__main__":
    import os

    shared = Path(os.environ.get("XLPE_SHARED_DIR", HERE.parents[2] / "shared"))
    result = build(shared / "data" / "wmt_newstest_tatoeba_testsets" / "deu-eng")
    path_of(result["name"]).write_text(json.dumps(result, separators=(",", ":")) + "\n")
    print(result["description"], "->", path_of(result["name"]))
