"""Preparation at corpus scale (issue 16): throughput and peak memory of `xlpe-prepare` at 10k, 100k and 1M pairs,
`--num-proc` 1 and 2, and the agreement of sharded (priors) alignment with one whole-corpus alignment.

    python bench/corpus_scale.py build --pairs 1000000 --out runs/scale        # the corpus (see below)
    python bench/corpus_scale.py run --corpus runs/scale --pairs 10000 100000 1000000 --num-proc 2 \\
        --json runs/scale.json
    python bench/corpus_scale.py agreement --pairs 80000 --shard-size 20000 --sample 40000

The corpus: every real de-en pair in ../shared/data (Multi30k raw train, 29k, and the WMT newstest 2008-2020 +
Tatoeba test sets, 52k: ~81k pairs, whitespace-normalised) on even lines, cycled, and pairs of the built-in
synthetic generator (en -> an SOV language) on odd lines; `--pairs N` of `run` takes the first N lines. Real text
repeats from 162k lines on: per-pair costs are what matters here, and the report gives words per pair so that the
figures can be scaled to other corpora.

`run` times the command users run (`xlpe-prepare --source --target --output --shard-size 100000 --num-proc P`, a
joint tokenizer trained on the text, eflomal, default features), its stages `--stage plan`, `shards`, `merge` as
three subprocesses (what `--stage all` does in one), and samples the resident memory of each one's process tree
(the CLI, the `map` workers, eflomal) every 0.2 s: the peak is the largest sum seen (pages shared between forked
workers are counted in each, so it is an upper bound).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]  # checkout; benchlib

from benchlib.data import DATA  # noqa: E402


def real_pairs() -> tuple[list[str], list[str]]:
    from xlpe.features.text_files import read_text_lines

    sources = read_text_lines(DATA / "multi30k" / "raw" / "train.en.gz")
    targets = read_text_lines(DATA / "multi30k" / "raw" / "train.de.gz")
    for english in sorted((DATA / "wmt_newstest_tatoeba_testsets" / "deu-eng").glob("*.eng.gz")):
        sources += read_text_lines(english)
        targets += read_text_lines(english.with_name(english.name.replace(".eng.gz", ".deu.gz")))
    return [" ".join(s.split()) for s in sources], [" ".join(t.split()) for t in targets]


def build(pairs: int, out: Path) -> None:
    from xlpe.features.synthetic import generate_corpus

    out.mkdir(parents=True, exist_ok=True)
    sources, targets = real_pairs()
    synthetic_sources, synthetic_targets, _ = generate_corpus(pairs // 2 + 1, seed=16)
    with open(out / "source.txt", "w", encoding="utf-8") as src, open(out / "target.txt", "w", encoding="utf-8") as tgt:
        for k in range(pairs):
            if k % 2 == 0:
                src.write(sources[(k // 2) % len(sources)] + "\n")
                tgt.write(targets[(k // 2) % len(targets)] + "\n")
            else:
                src.write(synthetic_sources[k // 2] + "\n")
                tgt.write(synthetic_targets[k // 2] + "\n")
    print(f"wrote {pairs} pairs to {out} ({len(sources)} real pairs cycled on even lines)")


def tree_rss(pid: int) -> int:
    import psutil

    try:
        process = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)])
    except psutil.Error:
        return 0


def run_measured(command: list[str]) -> dict:
    """Run `command`; its wall time, the CPU time of its process tree and the tree's peak resident memory."""
    peak, before = [0], os.times()
    started = time.perf_counter()
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)

    def sample():
        while process.poll() is None:
            peak[0] = max(peak[0], tree_rss(process.pid))
            time.sleep(0.2)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    _, stderr = process.communicate()
    wall = time.perf_counter() - started
    watcher.join()
    after = os.times()
    if process.returncode:
        raise RuntimeError(f"xlpe-prepare failed: {stderr[-2000:]}")
    return {
        "wall_s": round(wall, 1),
        "peak_rss_gb": round(peak[0] / 2**30, 2),
        "cpu_s": round(after.children_user + after.children_system - before.children_user - before.children_system, 1),
    }


def timed_prepare(corpus: Path, pairs: int, num_proc: int, work: Path, extra: list[str]) -> dict:
    """xlpe-prepare on the first `pairs` lines, its three stages run one after the other as separate commands
    (exactly what the default `--stage all` does in one process), each measured: wall, CPU, peak memory."""
    for side in ("source", "target"):
        with (
            open(corpus / f"{side}.txt", encoding="utf-8") as full,
            open(work / f"{side}.txt", "w", encoding="utf-8") as part,
        ):
            for _k, line in zip(range(pairs), full):
                part.write(line)
    output = work / "prepared"
    command = [
        sys.executable,
        "-m",
        "xlpe.cli.prepare",
        "--source",
        str(work / "source.txt"),
        "--target",
        str(work / "target.txt"),
        "--output",
        str(output),
        "--shard-size",
        "100000",
        "--num-proc",
        str(num_proc),
        "--overwrite-output",
        *extra,
    ]
    stages = {stage: run_measured([*command, "--stage", stage]) for stage in ("plan", "shards", "merge")}
    wall = sum(stage["wall_s"] for stage in stages.values())
    report = json.loads((output / "report.json").read_text())["train"]
    return {
        "pairs": pairs,
        "num_proc": num_proc,
        "wall_s": round(wall, 1),
        "pairs_per_s": round(pairs / wall),
        "cpu_s": round(sum(stage["cpu_s"] for stage in stages.values()), 1),
        "peak_rss_gb": max(stage["peak_rss_gb"] for stage in stages.values()),
        "stages": stages,
        "source_words": report["source_words"],
        "words_per_pair": round(report["source_words"] / max(report["pairs_kept"], 1), 1),
        "pairs_kept": report["pairs_kept"],
        "timings_s": report["timings_s"],
        "sharded": report.get("sharded"),
        "unaligned_ratio": round(report["unaligned_ratio"], 4),
        "mean_kendall_tau": round(report["mean_kendall_tau"], 4),
    }


def link_f1(a: list[list[int]], b: list[list[int]]) -> float:
    """F1 of two alignments' links over the corpus (Dice of the link sets)."""

    def keyed(links):
        return {(k, x[i], x[i + 1]) for k, x in enumerate(links) for i in range(0, len(x), 2)}

    left, right = keyed(a), keyed(b)
    return 2 * len(left & right) / max(len(left) + len(right), 1)


def agreement(pairs: int, shard_size: int, sample: int) -> dict:
    """Sharded alignment with priors vs one whole-corpus alignment, beside the agreement of two whole-corpus runs
    (eflomal samples: the run-to-run agreement is the ceiling) and of shards aligned without priors."""
    import numpy as np

    from xlpe.features.alignment import PriorsAligner, align_with_eflomal, alignment_priors, eflomal_directional
    from xlpe.features.text_files import write_text_atomic

    sources, targets = real_pairs()
    keep = [
        k for k, (s, t) in enumerate(zip(sources, targets)) if 0 < len(s.split()) <= 120 and 0 < len(t.split()) <= 120
    ]
    sources, targets = [sources[k] for k in keep][:pairs], [targets[k] for k in keep][:pairs]
    n = len(sources)
    whole = [align_with_eflomal(sources, targets) for _ in range(2)]
    picked = np.sort(np.random.default_rng(0).choice(n, min(sample, n), replace=False))
    forward, reverse = eflomal_directional([sources[k] for k in picked], [targets[k] for k in picked])
    priors = Path("/tmp/xlpe-agreement-priors.txt")
    write_text_atomic(
        priors, alignment_priors([sources[k] for k in picked], [targets[k] for k in picked], forward, reverse)
    )
    aligner = PriorsAligner(priors, n)
    sharded, plain = [], []
    for start in range(0, n, shard_size):
        sharded += aligner(sources[start : start + shard_size], targets[start : start + shard_size])
        plain += align_with_eflomal(sources[start : start + shard_size], targets[start : start + shard_size])
    return {
        "pairs": n,
        "shard_size": shard_size,
        "sample": len(picked),
        "whole_vs_whole": round(link_f1(whole[0], whole[1]), 4),
        "sharded_priors_vs_whole": round((link_f1(sharded, whole[0]) + link_f1(sharded, whole[1])) / 2, 4),
        "sharded_no_priors_vs_whole": round((link_f1(plain, whole[0]) + link_f1(plain, whole[1])) / 2, 4),
    }


def oracle_stats(sources: list[str], links: list[list[int]]) -> dict:
    """Mean Kendall's tau of the oracle reordering (sentences of 2+ words) and the unaligned-word ratio, as the
    preparation report computes them, from symmetrised links."""
    import numpy as np

    from xlpe.features.reordering import kendall_tau_flat, oracle_xl_positions_flat

    lengths = np.array([len(s.split()) for s in sources], dtype=np.int64)
    counts = np.array([len(x) // 2 for x in links], dtype=np.int64)
    flat = np.array([v for x in links for v in x], dtype=np.int64)
    oracle = oracle_xl_positions_flat(np.repeat(np.arange(len(links)), counts), flat[0::2], flat[1::2], lengths)
    tau = kendall_tau_flat(oracle.positions, oracle.offsets)[lengths > 1]
    return {
        "mean_kendall_tau": round(float(np.nanmean(tau)), 4),
        "unaligned_ratio": round(float(oracle.unaligned_words.sum() / lengths.sum()), 4),
    }


def _children_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


def sweep(
    pairs: int, shard_size: int, corpus_pairs: int | None, settings: list[dict], repeats: int, reference: Path | None
) -> list[dict]:
    """Speed and quality of shard-alignment settings: per setting and repeat, priors from a sample (its own
    eflomal options), the shards aligned from them (theirs), link F1 against two whole-corpus alignments (eflomal's
    defaults; their own agreement is the ceiling), the oracle's mean Kendall's tau and unaligned ratio, and the
    eflomal CPU seconds of sample and shards. `corpus_pairs` sets the shards' iteration counts as for a corpus of
    that size (1,000,000: (2, 1, 5), those of the 1M benchmark's shards) unless a setting gives n_iterations.

    A setting: {"name", "sample" (pairs, default 40,000), "sample_eflomal" ({}), "shard_eflomal" ({}),
    "priors": false for shards aligned alone}; the reference alignments are cached in `reference` (JSON)."""
    import numpy as np

    from xlpe.features.alignment import PriorsAligner, align_with_eflomal, alignment_priors, eflomal_directional
    from xlpe.features.text_files import write_text_atomic

    sources, targets = real_pairs()
    keep = [
        k for k, (s, t) in enumerate(zip(sources, targets)) if 0 < len(s.split()) <= 120 and 0 < len(t.split()) <= 120
    ]
    sources, targets = [sources[k] for k in keep][:pairs], [targets[k] for k in keep][:pairs]
    n = len(sources)
    if reference is not None and reference.is_file() and json.loads(reference.read_text())["pairs"] == n:
        whole = json.loads(reference.read_text())["whole"]
    else:
        whole = [align_with_eflomal(sources, targets) for _ in range(2)]
        if reference is not None:
            reference.write_text(json.dumps({"pairs": n, "whole": whole}))
    results = [
        {
            "name": "whole-corpus run vs the other (ceiling)",
            "f1": round(link_f1(whole[0], whole[1]), 4),
            **oracle_stats(sources, whole[0]),
        }
    ]
    print(json.dumps(results[0]), flush=True)
    made = {}  # (sample, its eflomal options) -> (priors file, CPU s, wall s), per repeat: settings share priors
    for repeat in range(repeats):
        for setting in settings:
            sample = min(setting.get("sample", 40_000), n)
            key = json.dumps([sample, setting.get("sample_eflomal", {})], sort_keys=True)
            if setting.get("priors", True) and (repeat, key) not in made:
                cpu, started = _children_cpu(), time.perf_counter()
                picked = np.sort(np.random.default_rng(repeat).choice(n, sample, replace=False))
                sample_sources, sample_targets = [sources[k] for k in picked], [targets[k] for k in picked]
                forward, reverse = eflomal_directional(
                    sample_sources, sample_targets, **setting.get("sample_eflomal", {})
                )
                priors = Path(f"/tmp/xlpe-sweep-priors-{os.getpid()}-{len(made)}.txt")
                write_text_atomic(priors, alignment_priors(sample_sources, sample_targets, forward, reverse))
                made[repeat, key] = (priors, _children_cpu() - cpu, time.perf_counter() - started)
            priors, sample_cpu, sample_wall = made.get((repeat, key), (None, 0.0, 0.0))
            options = dict(setting.get("shard_eflomal", {}))
            if corpus_pairs and "n_iterations" not in options:
                from xlpe.features.alignment import eflomal_iterations

                options["n_iterations"] = eflomal_iterations(corpus_pairs)
            aligner = PriorsAligner(priors, corpus_pairs or n, **options) if setting.get("priors", True) else None
            cpu, started, sharded = _children_cpu(), time.perf_counter(), []
            for start in range(0, n, shard_size):
                part = (sources[start : start + shard_size], targets[start : start + shard_size])
                sharded += aligner(*part) if aligner else align_with_eflomal(*part, **options)
            result = {
                "name": setting.get("name", json.dumps(setting)),
                "repeat": repeat,
                "sample": sample if aligner else None,
                "f1": round((link_f1(sharded, whole[0]) + link_f1(sharded, whole[1])) / 2, 4),
                **oracle_stats(sources, sharded),
                "shards_eflomal_cpu_s": round(_children_cpu() - cpu, 1),
                "shards_wall_s": round(time.perf_counter() - started, 1),
                "sample_eflomal_cpu_s": round(sample_cpu, 1),
                "sample_wall_s": round(sample_wall, 1),
                "load": round(os.getloadavg()[0], 1),
            }
            results.append(result)
            print(json.dumps(result), flush=True)
    for priors, _, _ in made.values():
        priors.unlink(missing_ok=True)
    return results


def held_out_text() -> dict[str, list[str]]:
    """Text no tokenizer sample of the corpus contains: Multi30k validation and test sets (en, de; the corpus
    holds Multi30k train) and synthetic pairs of another seed."""
    from xlpe.features.synthetic import generate_corpus
    from xlpe.features.text_files import read_text_lines

    raw = DATA / "multi30k" / "raw"
    sets = ["val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr"]
    english = [line for name in sets for line in read_text_lines(raw / f"{name}.en.gz")]
    german = [line for name in sets for line in read_text_lines(raw / f"{name}.de.gz")]
    synthetic_sources, synthetic_targets, _ = generate_corpus(20_000, seed=99)
    return {
        "multi30k_en": english,
        "multi30k_de": german,
        "synthetic_src": synthetic_sources,
        "synthetic_tgt": synthetic_targets,
    }


def tokenizer_samples(corpus: Path, samples: list[int], options: dict, seed: int = 0) -> list[dict]:
    """The plan's tokenizer trained on seeded uniform samples of `samples` training pairs of `corpus` (as
    `sharded._plan_tokenizer` samples them): training wall and CPU seconds, and on held-out text the tokens per
    sentence (</s> included; compression) and the share of <unk> tokens."""
    import numpy as np

    from xlpe.features.sharded import _sample_indices
    from xlpe.features.tokenization import UNK, tokenize_batch, train_joint_tokenizer

    sources = (corpus / "source.txt").read_text(encoding="utf-8").splitlines()
    targets = (corpus / "target.txt").read_text(encoding="utf-8").splitlines()
    held_out = {name: [" ".join(t.split()) for t in texts] for name, texts in held_out_text().items()}
    results = []
    for size in samples:
        indices = _sample_indices(len(sources), size, seed).tolist()
        texts = [sources[k] for k in indices] + [targets[k] for k in indices]
        cpu, started = os.times(), time.perf_counter()
        tokenizer = train_joint_tokenizer(texts, **options)
        after, wall = os.times(), time.perf_counter() - started
        result = {
            "sample_pairs": len(indices),
            "options": options,
            "train_wall_s": round(wall, 1),
            "train_cpu_s": round(after.user + after.system - cpu.user - cpu.system, 1),
            "load": round(os.getloadavg()[0], 1),
        }
        unk = tokenizer.convert_tokens_to_ids(UNK)
        for name, texts in held_out.items():
            batch = tokenize_batch(tokenizer, texts)
            result[name] = {
                "tokens_per_sentence": round(float(batch.lengths.mean()), 4),
                "unk_rate": round(float(np.mean(batch.ids == unk)), 6),
            }
        results.append(result)
        print(json.dumps(result), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    b = commands.add_parser("build")
    b.add_argument("--pairs", type=int, default=1_000_000)
    b.add_argument("--out", type=Path, default=Path("runs/scale"))
    r = commands.add_parser("run")
    r.add_argument("--corpus", type=Path, default=Path("runs/scale"))
    r.add_argument("--pairs", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    r.add_argument("--num-proc", type=int, nargs="+", default=[2])
    r.add_argument("--work", type=Path, default=Path("runs/scale_work"))
    r.add_argument("--json", type=Path)
    r.add_argument("extra", nargs="*", help="more xlpe-prepare flags (after --)")
    a = commands.add_parser("agreement")
    a.add_argument("--pairs", type=int, default=80_000)
    a.add_argument("--shard-size", type=int, default=20_000)
    a.add_argument("--sample", type=int, default=40_000)
    w = commands.add_parser("sweep", help="speed and quality of shard-alignment settings (see `sweep`)")
    w.add_argument("--pairs", type=int, default=80_000)
    w.add_argument("--shard-size", type=int, default=20_000)
    w.add_argument(
        "--corpus-pairs",
        type=int,
        default=1_000_000,
        help="shards' iteration counts as for this corpus size (0: the bench's)",
    )
    w.add_argument("--settings", type=json.loads, required=True, help="JSON list of settings")
    w.add_argument("--repeats", type=int, default=2)
    w.add_argument("--reference", type=Path, help="cache of the two whole-corpus alignments (JSON)")
    w.add_argument("--json", type=Path)
    k = commands.add_parser("tokenizer", help="tokenizer training time and held-out compression per sample size")
    k.add_argument("--corpus", type=Path, default=Path("runs/scale"))
    k.add_argument("--samples", type=int, nargs="+", default=[500_000, 200_000, 100_000])
    k.add_argument("--options", type=json.loads, default={}, help="train_joint_tokenizer options (JSON)")
    k.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.command == "tokenizer":
        results = tokenizer_samples(args.corpus, args.samples, args.options)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
        return
    if args.command == "sweep":
        results = sweep(args.pairs, args.shard_size, args.corpus_pairs, args.settings, args.repeats, args.reference)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
        return
    if args.command == "build":
        build(args.pairs, args.out)
        return
    if args.command == "agreement":
        print(json.dumps(agreement(args.pairs, args.shard_size, args.sample)))
        return
    print(f"load average {os.getloadavg()}, {os.cpu_count()} cores", file=sys.stderr)
    results = []
    for pairs in args.pairs:
        for num_proc in args.num_proc:
            shutil.rmtree(args.work, ignore_errors=True)
            args.work.mkdir(parents=True)
            result = timed_prepare(args.corpus, pairs, num_proc, args.work, args.extra)
            results.append(result)
            print(json.dumps(result), flush=True)
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))
    print(f"load average {os.getloadavg()}", file=sys.stderr)


if __name__ == "__main__":
    main()
