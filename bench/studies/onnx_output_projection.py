"""The output projection in int8: where an int8 decoder step goes, and what quantizing the projection onto the
vocabulary (`xlpe-export --int8_scheme channel-all`) buys in speed and costs in quality.

    python bench/studies/onnx_output_projection.py --graph_dir EXPORT --model ft=RUN [--model ...] \\
        --output bench/studies/onnx_output_projection.json

* **step**: the export's fp32 `decoder_with_past_model.onnx` quantized by every scheme asked for (`--schemes`,
  default `channel,channel-all`); one decoder step of `--rows` rows (batch x beams) with a cache of `--cache`
  tokens, random inputs, one thread (an indirect-cache graph through `session.run`: its cache buffers come back as new
  outputs, a copy the runtime's IO binding avoids; the same for every scheme). Interleaved rounds give each
  graph's median and minimum ms a step; one profiled pass gives each operator type's share of the kernel time.
* **quality**: each trained model (`--model NAME=DIR`, a `xlpe-train` run whose `test_translations.txt` holds its
  test sources and references) exported once per scheme; the test sources translated (beam 4, length-sorted batches
  of 16, one thread) in fp32 and in int8; corpus BLEU and chrF (sacrebleu), the sentences identical to fp32, and a
  paired bootstrap of the BLEU change against fp32 (sentences resampled; the mean change and the share of
  resamples where int8 is not worse / not better).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph_dir", default=None, help="an export whose decoder_with_past_model.onnx is timed")
    parser.add_argument("--model", action="append", default=[], help="NAME=DIR of a trained run (repeatable)")
    parser.add_argument("--schemes", default="channel,channel-all", help="comma-separated int8 schemes")
    parser.add_argument("--rows", type=int, default=64, help="decoder rows of a step (batch x beams)")
    parser.add_argument("--beams", type=int, default=4, help="beams a sentence (the cross cache is per sentence)")
    parser.add_argument("--cache", type=int, default=16, help="cached target tokens of a step")
    parser.add_argument("--source", type=int, default=24, help="source tokens of a step")
    parser.add_argument("--rounds", type=int, default=12, help="interleaved timing rounds")
    parser.add_argument("--bootstrap", type=int, default=300, help="paired bootstrap resamples")
    parser.add_argument("--limit", type=int, default=None, help="test sentences per model (default: all)")
    parser.add_argument("--work_dir", default=None, help="where exports are written (default: a temporary folder)")
    parser.add_argument("--output", default=None, help="JSON results file")
    return parser.parse_args(argv)


# ---------------------------------------------------------------------------------------------------------
# One decoder step: time and operator shares
# ---------------------------------------------------------------------------------------------------------


def step_feeds(session, rows: int, cache: int, source: int, beams: int = 4) -> dict:
    import numpy as np

    if rows % beams:
        raise ValueError(f"--rows must be a multiple of --beams ({beams}), got {rows}")
    # the indirect cache: buffers one position longer than the cache, the beams' history within range
    sizes = {"batch": rows, "sentences": rows // beams, "beams": beams, "target": 1, "cache": cache, "source": source}
    sizes["capacity"] = cache + 1
    rng, feeds = np.random.default_rng(0), {}
    for spec in session.get_inputs():
        shape = [d if isinstance(d, int) else sizes.get(d, source) for d in spec.shape]
        if spec.name == "cache_indirection":
            feeds[spec.name] = rng.integers(0, beams, shape)
        elif "int64" in spec.type:
            feeds[spec.name] = np.ones(shape, np.int64) if "mask" in spec.name else rng.integers(3, 50, shape)
        else:
            feeds[spec.name] = (rng.standard_normal(shape) * 0.1).astype(np.float32)
    return feeds


def step_rows(graphs: dict[str, Path], args) -> list[dict]:
    import onnxruntime as ort

    def session(path, profile=None):
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        if profile:
            options.enable_profiling, options.profile_file_prefix = True, profile
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    sessions = {name: session(path) for name, path in graphs.items()}
    feeds = {name: step_feeds(s, args.rows, args.cache, args.source, args.beams) for name, s in sessions.items()}
    times = {name: [] for name in sessions}
    for name, s in sessions.items():
        s.run(None, feeds[name])
    for _ in range(args.rounds):
        for name, s in sessions.items():
            started = time.perf_counter()
            for _ in range(3):
                s.run(None, feeds[name])
            times[name].append((time.perf_counter() - started) / 3 * 1000)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, path in graphs.items():
            profiled = session(path, str(Path(scratch) / name))
            for _ in range(5):
                profiled.run(None, feeds[name])
            events = json.loads(Path(profiled.end_profiling()).read_text())
            by_op = collections.Counter()
            for event in events:
                if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
                    by_op[event["args"]["op_name"]] += event["dur"]
            total = sum(by_op.values()) or 1
            rows.append(
                {
                    "graph": name,
                    "median_ms": round(statistics.median(times[name]), 2),
                    "min_ms": round(min(times[name]), 2),
                    "op_share": {op: round(d / total, 4) for op, d in by_op.most_common(8)},
                }
            )
    return rows


# ---------------------------------------------------------------------------------------------------------
# Quality on trained models
# ---------------------------------------------------------------------------------------------------------


def read_test(run: Path, limit: int | None) -> tuple[list[str], list[str]]:
    lines = (run / "test_translations.txt").read_text(encoding="utf-8").splitlines()[1:]  # (a header line)
    rows = [line.split("\t") for line in lines][:limit]
    return [r[0] for r in rows], [r[1] for r in rows]


def translate_sorted(translator, sources: list[str], batch: int = 16) -> list[str]:
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i].split()))
    out = [""] * len(sources)
    for start in range(0, len(order), batch):
        chunk = order[start : start + batch]
        for i, text in zip(chunk, translator.translate([sources[i] for i in chunk], num_beams=4)):
            out[i] = text
    return out


def paired_bootstrap(new: list[str], base: list[str], refs: list[str], samples: int) -> dict:
    import sacrebleu

    rng, n, changes = random.Random(12345), len(refs), []
    for _ in range(samples):
        pick = [rng.randrange(n) for _ in range(n)]
        references = [[refs[i] for i in pick]]
        changes.append(
            sacrebleu.corpus_bleu([new[i] for i in pick], references).score
            - sacrebleu.corpus_bleu([base[i] for i in pick], references).score
        )
    return {
        "mean_bleu_change": round(sum(changes) / samples, 3),
        "p_not_worse": round(sum(c >= 0 for c in changes) / samples, 3),
        "p_not_better": round(sum(c <= 0 for c in changes) / samples, 3),
    }


def quality_rows(name: str, run: Path, schemes: list[str], work: Path, args) -> list[dict]:
    import sacrebleu

    from xlpe.export.exporter import export_directory
    from xlpe.export.runtime import OnnxTranslator

    sources, refs = read_test(run, args.limit)
    hypotheses = {}
    for scheme in schemes:
        export = work / f"{name}-{scheme}"
        export_directory(run, export, quantize="int8", overwrite=True, int8_scheme=scheme)
        precisions = ("fp32", "int8") if "fp32" not in hypotheses else ("int8",)
        for precision in precisions:
            translator = OnnxTranslator(export, precision=precision, threads=1, spin_wait=False)
            hypotheses["fp32" if precision == "fp32" else scheme] = translate_sorted(translator, sources)
    base, rows = hypotheses["fp32"], []
    for engine, hyps in hypotheses.items():
        row = {
            "model": name,
            "engine": "onnx fp32" if engine == "fp32" else f"onnx int8 {engine}",
            "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
            "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2),
            "same_as_fp32": sum(a == b for a, b in zip(hyps, base)),
            "sentences": len(refs),
        }
        if engine != "fp32":
            row.update(paired_bootstrap(hyps, base, refs, args.bootstrap))
        rows.append(row)
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    schemes = [s for s in args.schemes.split(",") if s]
    import onnxruntime
    import sacrebleu

    from xlpe.export.exporter import quantize_graph

    bleu = sacrebleu.BLEU()
    bleu.corpus_score(["a"], [["a"]])  # (a signature names the number of references: one)
    result = {
        "date": date.today().isoformat(),
        "onnxruntime": onnxruntime.__version__,
        "bleu_signature": str(bleu.get_signature()),
        "command": "python bench/studies/onnx_output_projection.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "step": [],
        "quality": [],
    }
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(args.work_dir or scratch)
        work.mkdir(parents=True, exist_ok=True)
        if args.graph_dir:
            fp32 = Path(args.graph_dir) / "decoder_with_past_model.onnx"
            graphs = {"fp32": fp32}
            for scheme in schemes:
                graphs[scheme] = work / f"decoder_with_past_{scheme}.onnx"
                quantize_graph(fp32, graphs[scheme], scheme)
            result["step"] = step_rows(graphs, args)
            result["step_settings"] = {"rows": args.rows, "cache": args.cache, "source": args.source}
            for row in result["step"]:
                print(f"step {row['graph']:14s} median {row['median_ms']:.1f} ms  {row['op_share']}")
        for spec in args.model:
            name, _, directory = spec.partition("=")
            for row in quality_rows(name, Path(directory), schemes, work, args):
                result["quality"].append(row)
                print(json.dumps(row))
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
