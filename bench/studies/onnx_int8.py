"""int8 quantization settings against BLEU (issue 42): for each trained model and each onnxruntime `quantize_dynamic`
setting (`xlpe.export.exporter.INT8_SCHEMES`), BLEU of the int8 graphs minus BLEU of the same export's fp32 graphs
on the same sentences, under several batchings (dynamic quantization scales activations per call, over the whole
batch x beams, so batch composition can change int8 translations; fp32 ones only through summation order).

    python bench/studies/onnx_int8.py --model marian=runs/vanilla --model xlpe=runs/xlpe --model dpe=runs/dpe \\
        --model mvpe_pos=runs/mvpe_pos --threads 1 --limit 300 --heldout 1500 --output bench/studies/onnx_int8.json

Batchings: `sorted16` (length-sorted batches of 16, as bench/onnx_speed.py), `corpus16` (batches of 16 in corpus
order), `sorted64`, `single` (one sentence a call). BLEU: sacrebleu corpus BLEU, default tokenisation, beam 4.
`--heldout N` adds the batchings `heldout16` and `heldout_corpus16`: N more sentences from the same generator
(another seed; no source sentence of the train, validation or test split) in batches of 16, length-sorted and in
corpus order: a finer resolution than the 300-sentence test split, where one changed sentence moves BLEU by ~0.1.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from datetime import date
from pathlib import Path

BATCHINGS = {
    "sorted16": (16, True),
    "corpus16": (16, False),
    "sorted64": (64, True),
    "single": (1, False),
    "heldout16": (16, True),
    "heldout_corpus16": (16, False),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", required=True, help="NAME=DIR of a trained model (repeatable)")
    parser.add_argument("--export_root", default="/tmp/xlpe-onnx-int8", help="where the exports are written")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--num_beams", type=int, default=4)
    parser.add_argument("--limit", type=int, default=300, help="test sentences (built-in corpus, test split)")
    parser.add_argument(
        "--batchings",
        default="sorted16,corpus16,sorted64,single",
        help="comma-separated, of sorted16, corpus16, sorted64, single",
    )
    parser.add_argument(
        "--heldout", type=int, default=0, help="also N held-out sentences (batchings heldout16, heldout_corpus16)"
    )
    parser.add_argument("--schemes", default=None, help="comma-separated int8 schemes (default: all)")
    parser.add_argument("--output", default=None, help="JSON results file")
    return parser.parse_args(argv)


def translate_all(translator, texts, batch_size, by_length, num_beams):
    order = list(range(len(texts)))
    if by_length:
        order.sort(key=lambda i: -len(texts[i].split()))
    output = [""] * len(texts)
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        for index, text in zip(batch, translator.translate([texts[i] for i in batch], num_beams=num_beams)):
            output[index] = text
    return output


def main(argv=None) -> int:
    import os

    args = parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import onnx
    import sacrebleu

    from xlpe.export.exporter import (
        GRAPH_FILES,
        INT8_SCHEMES,
        export_directory,
        int8_name,
        quantize_graph,
    )
    from xlpe.export.runtime import OnnxTranslator
    from xlpe.features.synthetic import generate_pairs, synthetic_splits

    models = dict(item.split("=", 1) for item in args.model)
    batchings = args.batchings.split(",")
    unknown = [b for b in batchings if b not in BATCHINGS or b.startswith("heldout")]
    if unknown:
        sys.exit(f"--batchings: unknown {unknown}; choose among sorted16, corpus16, sorted64, single (and --heldout N)")
    schemes = args.schemes.split(",") if args.schemes else list(INT8_SCHEMES)
    splits = synthetic_splits()
    pairs = splits["test"][: args.limit]
    sets = {b: ([p.source for p in pairs], [p.target for p in pairs]) for b in batchings}
    if args.heldout:
        seen = {p.source for split in splits.values() for p in split}
        extra = generate_pairs(args.heldout, seed=4242, exclude=seen)
        for name in ("heldout16", "heldout_corpus16"):
            batchings.append(name)
            sets[name] = ([p.source for p in extra], [p.target for p in extra])
    bleu = sacrebleu.BLEU()
    rows = []
    for name, directory in models.items():
        export = Path(args.export_root) / name
        export_directory(directory, export, quantize=None, overwrite=True)
        fp32 = OnnxTranslator(export, threads=args.threads, spin_wait=False)
        reference = {}
        for batching in batchings:
            size, by_length = BATCHINGS[batching]
            sources, references = sets[batching]
            hyp = translate_all(fp32, sources, size, by_length, args.num_beams)
            reference[batching] = (hyp, bleu.corpus_score(hyp, [references]).score)
        print(f"{name} fp32: " + " ".join(f"{b}={reference[b][1]:.2f}" for b in batchings), file=sys.stderr)
        for scheme in schemes:
            target = Path(args.export_root) / f"{name}-{scheme}"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(export, target)
            manifest = json.loads((target / "export_manifest.json").read_text())
            kept = {}
            for file_name in GRAPH_FILES:
                kept[file_name] = quantize_graph(target / file_name, target / int8_name(file_name), scheme)
            manifest["int8_graphs"] = {int8_name(f): {"kept_fp32": k} for f, k in kept.items()}
            (target / "export_manifest.json").write_text(json.dumps(manifest))
            quantized = sum(
                n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul", "ConvInteger")
                for f in GRAPH_FILES
                for n in onnx.load(str(target / int8_name(f))).graph.node
            )
            size_mb = sum((target / int8_name(f)).stat().st_size for f in GRAPH_FILES) / 1e6
            int8 = OnnxTranslator(target, precision="int8", threads=args.threads, verify=False, spin_wait=False)
            for batching in batchings:
                size, by_length = BATCHINGS[batching]
                sources, references = sets[batching]
                started = time.perf_counter()
                hyp = translate_all(int8, sources, size, by_length, args.num_beams)
                seconds = time.perf_counter() - started
                score = bleu.corpus_score(hyp, [references]).score
                fp32_hyp, fp32_score = reference[batching]
                rows.append(
                    {
                        "model": name,
                        "scheme": scheme,
                        "batching": batching,
                        "sentences": len(sources),
                        "fp32_bleu": round(fp32_score, 2),
                        "int8_bleu": round(score, 2),
                        "delta_bleu": round(score - fp32_score, 2),
                        "identical_to_fp32": round(sum(a == b for a, b in zip(hyp, fp32_hyp)) / len(hyp), 4),
                        "int8_matmuls": quantized,
                        "int8_mb": round(size_mb, 2),
                        "seconds": round(seconds, 1),
                    }
                )
                print(json.dumps(rows[-1]), file=sys.stderr)
    result = {
        "date": str(date.today()),
        "command": "python " + " ".join(sys.argv),
        "bleu_signature": str(bleu.get_signature()),
        "sentences": {b: len(sets[b][0]) for b in batchings},
        "num_beams": args.num_beams,
        "threads": args.threads,
        "onnxruntime": __import__("onnxruntime").__version__,
        "rows": rows,
    }
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"\nsacrebleu {result['bleu_signature']}")
    print("| model | scheme | " + " | ".join(f"Δ BLEU {b}" for b in batchings) + " | worst |Δ| | identical (mean) |")
    print("|---|---|" + "---|" * (len(batchings) + 2))
    for name in models:
        for scheme in schemes:
            cells = [r for r in rows if r["model"] == name and r["scheme"] == scheme]
            worst = max(abs(r["delta_bleu"]) for r in cells)
            same = sum(r["identical_to_fp32"] for r in cells) / len(cells)
            print(
                f"| {name} | {scheme} | "
                + " | ".join(f"{r['delta_bleu']:+.2f}" for r in cells)
                + f" | {worst:.2f} | {same:.1%} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
