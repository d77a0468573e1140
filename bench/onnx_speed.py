"""CPU inference speed of exported models (issue 42): sentences/s of PyTorch `generate`, ONNX fp32 and ONNX int8,
for each family and for stock MarianMT exported the same way, in one run; the int8 BLEU change; whether fp32
ONNX translations are identical to PyTorch's.

    python bench/onnx_speed.py --model marian=runs/vanilla --model xlpe=runs/xlpe --model dpe=runs/dpe \\
        --model mvpe_pos=runs/mvpe_pos --threads 2 --num_beams 5 --limit 200 --repeats 3 --output bench/onnx_speed.json

Each model is exported (`xlpe.export.export_directory`, fp32 + int8) into `--export_root`, then every (model,
engine) pair translates the same `--limit` sentences of the built-in corpus' test split, or of `--sources` /
`--references` files (a trained model's own language pair; raw text in, text out:
tokenizer, front end, search and detokenisation all counted) in length-sorted batches of `--batch_size`,
interleaved across repeats (A B C ... then ... C B A) so that drift on a shared machine cancels. Reported per pair:
median sentences/s over repeats (wall clock; process CPU seconds beside it), the per-repeat ratio against the stock
model's same engine (median), BLEU (sacrebleu) and, for ONNX fp32, the share of translations identical to
PyTorch's. `--model NAME=DIR`: the NAME given as `--baseline` (default "marian") is the denominator. `--random
NAME=FAMILY` adds a random-init model of a family with the baseline's dimensions, for speed rows under
`--fixed_new_tokens N` (every engine decodes exactly N tokens a sentence, so untrained and trained models do the same
work). `--ctranslate2` adds CTranslate2 fp32 and int8 on the baseline (a stock Marian whose `<pad>` row is zero,
converted by `xlpe-export --format ctranslate2`), the engine OPUS-MT users deploy with, as reference rows; their
ratio column is against the stock model's PyTorch `generate`. `--memory` adds each engine's resident memory after
loading and at its peak, the engine alone in a fresh process translating the same sentences once. `--spin`: a quiet
machine, every engine's idle threads spin (each runtime's default); without it they sleep.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import date
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # benchlib, also when imported by a test
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.machine import cpu_description  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", default=[], help="NAME=DIR of a trained model (repeatable)")
    parser.add_argument("--baseline", default="marian", help="the NAME that ratios divide by (default marian)")
    parser.add_argument("--export_root", default="/tmp/xlpe-onnx-bench", help="where the exports are written")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--streams",
        type=int,
        default=1,
        help="batches the ONNX and CTranslate2 engines decode at once, sharing --threads out (xlpe/export/streams.py; "
        "CTranslate2: inter_threads); PyTorch decodes one batch at a time with --threads",
    )
    parser.add_argument("--num_beams", type=int, default=5)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--limit", type=int, default=200, help="test sentences (built-in corpus, test split)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--random",
        action="append",
        default=[],
        metavar="NAME=FAMILY",
        help="also a random-init model of FAMILY (xlpe, dpe, mvpe_pos) with the baseline's dimensions, "
        "tokenizer and generation config (speed only: use with --fixed_new_tokens)",
    )
    parser.add_argument(
        "--fixed_new_tokens",
        type=int,
        default=None,
        help="decode exactly N tokens per sentence (min_new_tokens = max_new_tokens = N) in every "
        "engine, so that models of any training state decode the same number of steps",
    )
    parser.add_argument("--nltk_data", default=None, help="nltk data folder for a random mvpe_pos model's tagger")
    parser.add_argument("--int8_scheme", default=None, help="int8 quantization settings (default: xlpe-export's)")
    parser.add_argument(
        "--spin",
        action="store_true",
        help="a quiet machine: idle threads spin in every engine (OMP_WAIT_POLICY=ACTIVE, onnxruntime "
        "allow_spinning=1), each runtime's default; without it they sleep (PASSIVE), for a shared machine",
    )
    parser.add_argument(
        "--ctranslate2",
        action="store_true",
        help="also CTranslate2 (fp32 and int8) on the baseline model, converted by xlpe-export --format "
        "ctranslate2: the engine OPUS-MT users serve with, as a reference row (needs pip install ctranslate2)",
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="also each engine's peak resident memory: the engine loaded and the sentences translated once in a "
        "process of its own (resident set after loading, and its peak, from the kernel's own counters)",
    )
    parser.add_argument("--memory_child", default=None, help=argparse.SUPPRESS)  # JSON spec of one engine
    parser.add_argument(
        "--sources",
        default=None,
        help="a file of source sentences (one a line, plain or .gz) instead of the built-in corpus' test split; "
        "--references the matching file (BLEU); the first --limit lines",
    )
    parser.add_argument("--references", default=None, help="the references of --sources")
    parser.add_argument("--output", default=None, help="JSON results file")
    args = parser.parse_args(argv)
    if not args.model and not args.memory_child:
        parser.error("the following arguments are required: --model")
    if (args.sources is None) != (args.references is None):
        parser.error("--sources and --references go together")
    return args


def bench_sentences(args) -> tuple[list[str], list[str]]:
    """(sources, references): the first --limit lines of --sources/--references, or of the built-in test split."""
    if args.sources:
        from xlpe.features.text_files import read_text_lines  # the package's reader: errors name file and line

        return read_text_lines(args.sources)[: args.limit], read_text_lines(args.references)[: args.limit]
    from xlpe.features.synthetic import synthetic_splits

    pairs = synthetic_splits()["test"][: args.limit]
    return [p.source for p in pairs], [p.target for p in pairs]


def resident_mib() -> tuple[float, float]:
    """(current, peak) resident set of this process in MiB (/proc/self/status VmRSS and VmHWM)."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return round(fields["VmRSS"], 1), round(fields["VmHWM"], 1)


def build_engine(spec: dict):
    """One engine from its spec: {"kind": pytorch|onnx|ctranslate2, "directory", "precision", "threads", "spin"}."""
    if spec["kind"] == "pytorch":
        return TorchTranslator(spec["directory"])
    if spec["kind"] == "onnx":
        from xlpe.export.runtime import OnnxTranslator

        return OnnxTranslator(
            spec["directory"],
            precision=spec["precision"],
            threads=spec["threads"],
            spin_wait=spec["spin"],
            streams=spec.get("streams", 1),
        )
    from xlpe.export.ctranslate2_export import CTranslate2Translator

    compute_type = {"fp32": "float32", "int8": "int8"}[spec["precision"]]
    return CTranslate2Translator(
        spec["directory"], threads=spec["threads"], compute_type=compute_type, streams=spec.get("streams", 1)
    )


def memory_child(args) -> int:
    """`--memory_child SPEC`: load one engine, translate the sentences once, print its memory as JSON."""
    import torch

    from xlpe.training.host_memory import keep_freed_host_memory

    keep_freed_host_memory()
    torch.set_num_threads(args.threads)
    spec = json.loads(args.memory_child)
    sources, _ = bench_sentences(args)
    engine = build_engine(spec)
    loaded, _ = resident_mib()
    fixed = {"max_new_tokens": args.fixed_new_tokens, "min_new_tokens": args.fixed_new_tokens}
    translate_all(engine, sources, args.batch_size, args.num_beams, **(fixed if args.fixed_new_tokens else {}))
    _, peak = resident_mib()
    print(json.dumps({"load_rss_mib": loaded, "peak_rss_mib": peak}))
    return 0


def measure_memory(spec: dict, argv: list[str]) -> dict:
    """`memory_child` of `spec` in a fresh process with this run's arguments (threads, beams, batch, sentences)."""
    import subprocess

    command = [sys.executable, str(Path(__file__).resolve()), *argv, "--memory_child", json.dumps(spec)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"memory of {spec}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


class TorchTranslator:
    """PyTorch `generate` on the same batches: tokenizer + the model's pipeline inputs + generate + decode."""

    def __init__(self, directory: str):
        from xlpe.evaluation.model_loading import load_model_and_tokenizer

        self.model, self.tokenizer = load_model_and_tokenizer(directory)
        self.limit = int(self.model.config.max_position_embeddings)

    def translate(self, texts, **kwargs):
        import torch

        inputs = self.tokenizer(texts, padding=True, truncation=True, max_length=self.limit, return_tensors="pt")
        prepare = getattr(self.model, "prepare_pipeline_inputs", None)
        extra = prepare(texts, self.tokenizer, inputs) if prepare is not None else {}
        kwargs.setdefault("max_new_tokens", min(int(1.5 * inputs["input_ids"].shape[1]) + 10, self.limit))
        with torch.no_grad():
            ids = self.model.generate(**inputs, **extra, **kwargs)
        return [text.strip() for text in self.tokenizer.batch_decode(ids, skip_special_tokens=True)]


def random_model(family: str, baseline_dir: str, directory: Path, nltk_data: str | None) -> str:
    """A random-init model of `family` with the baseline's dimensions, tokenizer and generation config, saved."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, MarianConfig

    from xlpe import (
        DPEMarianConfig,
        DPEMarianMTModel,
        MvPEPosConfig,
        MvPEPosForConditionalGeneration,
        XLPEMarianConfig,
        XLPEMarianMTModel,
    )

    classes = {
        "xlpe": (XLPEMarianConfig, XLPEMarianMTModel),
        "dpe": (DPEMarianConfig, DPEMarianMTModel),
        "mvpe_pos": (MvPEPosConfig, MvPEPosForConditionalGeneration),
    }
    base = MarianConfig.from_pretrained(baseline_dir)
    fields = (
        "vocab_size",
        "d_model",
        "encoder_layers",
        "decoder_layers",
        "encoder_attention_heads",
        "decoder_attention_heads",
        "encoder_ffn_dim",
        "decoder_ffn_dim",
        "max_position_embeddings",
        "pad_token_id",
        "eos_token_id",
        "decoder_start_token_id",
        "forced_eos_token_id",
    )
    extra = {"nltk_data": nltk_data} if family == "mvpe_pos" else {}
    config_class, model_class = classes[family]
    torch.manual_seed(0)
    model = model_class(config_class(**{f: getattr(base, f) for f in fields}, **extra)).eval()
    model.generation_config = GenerationConfig.from_pretrained(baseline_dir)
    model.save_pretrained(directory)
    AutoTokenizer.from_pretrained(baseline_dir).save_pretrained(directory)
    return str(directory)


def translate_all(translator, texts, batch_size, num_beams, **kwargs):
    """Every text, in length-sorted batches (an engine with streams > 1: that many batches at once)."""
    from xlpe.export.streams import translate_batches

    order = sorted(range(len(texts)), key=lambda i: -len(texts[i].split()))
    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    if getattr(translator, "streams", 1) > 1:
        reports = translate_batches(translator, [[texts[i] for i in b] for b in batches], num_beams=num_beams, **kwargs)
        translated = [report[0] for report in reports]
    else:
        translated = [translator.translate([texts[i] for i in b], num_beams=num_beams, **kwargs) for b in batches]
    output = [""] * len(texts)
    for batch, texts_out in zip(batches, translated):
        for index, text in zip(batch, texts_out):
            output[index] = text
    return output


def main(argv=None) -> int:
    import os

    args = parse_args(argv)
    if args.memory_child:
        os.environ.setdefault("OMP_WAIT_POLICY", "ACTIVE" if args.spin else "PASSIVE")
        return memory_child(args)
    # shared machine: idle threads sleep, in both runtimes (PyTorch's OpenMP threads spinning against other jobs made
    # a 2-thread generate ~50x slower than 1-thread; set before torch is imported)
    os.environ.setdefault("OMP_WAIT_POLICY", "ACTIVE" if args.spin else "PASSIVE")
    import sacrebleu
    import torch

    from xlpe.export.exporter import DEFAULT_INT8_SCHEME, export_directory
    from xlpe.training.host_memory import keep_freed_host_memory

    allocator = keep_freed_host_memory()  # as `xlpe-export --translate` does; XLPE_HOST_ALLOCATOR=default: glibc's own
    print(allocator, file=sys.stderr)

    torch.set_num_threads(args.threads)
    int8_scheme = args.int8_scheme or DEFAULT_INT8_SCHEME
    models = dict(item.split("=", 1) for item in args.model)
    if args.baseline not in models:
        sys.exit(f"--baseline {args.baseline}: not among --model names {sorted(models)}")
    for item in args.random:
        name, family = item.split("=", 1)
        models[name] = random_model(
            family, models[args.baseline], Path(args.export_root) / f"{name}-model", args.nltk_data
        )
    fixed = (
        {"max_new_tokens": args.fixed_new_tokens, "min_new_tokens": args.fixed_new_tokens}
        if args.fixed_new_tokens
        else {}
    )
    sources, references = bench_sentences(args)
    specs = {}
    for name, directory in models.items():
        export = Path(args.export_root) / name
        started = time.perf_counter()
        export_directory(directory, export, quantize="int8", overwrite=True, int8_scheme=int8_scheme)
        print(f"{name}: exported in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        specs[(name, "pytorch")] = {"kind": "pytorch", "directory": str(directory)}
        for precision in ("fp32", "int8"):
            specs[(name, f"onnx-{precision}")] = {"kind": "onnx", "directory": str(export), "precision": precision}
    ctranslate2_version = None
    if args.ctranslate2:
        from xlpe.export.ctranslate2_export import export_ctranslate2

        converted = Path(args.export_root) / f"{args.baseline}-ctranslate2"
        manifest = export_ctranslate2(models[args.baseline], converted, overwrite=True)
        ctranslate2_version = manifest["ctranslate2"]
        for precision in ("fp32", "int8"):
            specs[(args.baseline, f"ctranslate2-{precision}")] = {
                "kind": "ctranslate2",
                "directory": str(converted),
                "precision": precision,
            }
    for spec in specs.values():
        spec.update(threads=args.threads, spin=args.spin, streams=1 if spec["kind"] == "pytorch" else args.streams)
    engines = {key: build_engine(spec) for key, spec in specs.items()}
    keys = list(engines)
    outputs, wall, cpu = {}, {k: [] for k in keys}, {k: [] for k in keys}
    for key in keys:  # warm-up: one batch each
        engines[key].translate(sources[: args.batch_size], num_beams=args.num_beams, **fixed)
    for repeat in range(args.repeats):
        for key in keys if repeat % 2 == 0 else keys[::-1]:
            started, started_cpu = time.perf_counter(), time.process_time()
            outputs[key] = translate_all(engines[key], sources, args.batch_size, args.num_beams, **fixed)
            wall[key].append(time.perf_counter() - started)
            cpu[key].append(time.process_time() - started_cpu)
            print(f"repeat {repeat} {key}: {len(sources) / wall[key][-1]:.1f} sent/s", file=sys.stderr)
    memory = {}
    if args.memory:  # after the timing, each engine alone in a fresh process
        child_argv = [
            f"--threads={args.threads}",
            f"--streams={args.streams}",
            f"--num_beams={args.num_beams}",
            f"--batch_size={args.batch_size}",
            f"--limit={args.limit}",
            *([f"--fixed_new_tokens={args.fixed_new_tokens}"] if args.fixed_new_tokens else []),
            *(["--spin"] if args.spin else []),
            *([f"--sources={args.sources}", f"--references={args.references}"] if args.sources else []),
        ]
        for key in keys:
            memory[key] = measure_memory(specs[key], child_argv)
            print(f"memory {key}: {memory[key]}", file=sys.stderr)
    rows = []
    for name, engine in keys:
        base = (args.baseline, engine if not engine.startswith("ctranslate2") else "pytorch")
        ratios = [len(sources) / w / (len(sources) / b) for w, b in zip(wall[(name, engine)], wall[base])]
        hyp = outputs[(name, engine)]
        rows.append(
            {
                "model": name,
                "engine": engine,
                "sentences": len(sources),
                "sentences_per_s": round(len(sources) / statistics.median(wall[(name, engine)]), 2),
                "cpu_s_per_sentence": round(statistics.median(cpu[(name, engine)]) / len(sources), 4),
                "ratio_vs_baseline_same_engine": round(statistics.median(ratios), 3),
                "speedup_vs_own_pytorch": round(
                    statistics.median(wall[(name, "pytorch")]) / statistics.median(wall[(name, engine)]), 2
                ),
                "bleu": round(sacrebleu.corpus_bleu(hyp, [references]).score, 2),
                "identical_to_pytorch": round(
                    sum(a == b for a, b in zip(hyp, outputs[(name, "pytorch")])) / len(hyp), 4
                ),
                **memory.get((name, engine), {}),
            }
        )
    result = {
        "date": str(date.today()),
        "command": "python " + " ".join(sys.argv),
        "threads": args.threads,
        "streams": args.streams,
        "num_beams": args.num_beams,
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "fixed_new_tokens": args.fixed_new_tokens,
        "random_init": args.random,
        "int8_scheme": int8_scheme,
        "machine": f"{os.cpu_count()} CPU cores (wall clock: medians over interleaved repeats); "
        + (
            "threads spin: OMP_WAIT_POLICY=ACTIVE, onnxruntime allow_spinning=1"
            if args.spin
            else "OMP_WAIT_POLICY=PASSIVE and onnxruntime allow_spinning=0"
        ),
        "cpu": cpu_description(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "host_allocator": allocator,
        "torch": torch.__version__,
        "onnxruntime": __import__("onnxruntime").__version__,
        "ctranslate2": ctranslate2_version,
        "rows": rows,
    }
    for row in rows:  # BLEU of each engine minus the same model's PyTorch BLEU
        pytorch = next(r for r in rows if r["model"] == row["model"] and r["engine"] == "pytorch")
        row["bleu_change_vs_pytorch"] = round(row["bleu"] - pytorch["bleu"], 2)
    text = json.dumps(result, indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    print(text)
    print(
        "\n| model | engine | sentences/s | x own PyTorch | ratio vs stock (same engine) | BLEU | Δ BLEU vs PyTorch "
        "| identical to PyTorch |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['model']} | {row['engine']} | {row['sentences_per_s']} | {row['speedup_vs_own_pytorch']} | "
            f"{row['ratio_vs_baseline_same_engine']} | {row['bleu']} | {row['bleu_change_vs_pytorch']:+.2f} | "
            f"{row['identical_to_pytorch']:.1%} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
