"""One decoding step of exported models, side by side: milliseconds of `decoder_with_past_model.onnx` plus the
runtime's own cache copy of that step (reordering the self-attention cache for the beams, appending the step's keys
where the graph gives only those), for two or more export directories, interleaved; optionally onnxruntime's
per-operator profile of each. Used to compare the step graph's two forms of one model (the appended self-attention
cache, and the indirect one: buffers read through the beams' history, for which the runtime's per-step work is
updating that history: xlpe/export/step_caches.py).

    python bench/onnx_step.py --export old=/tmp/old-export --export new=/tmp/new-export --precision int8 \\
        --rows 64 --beams 4 --cache 24 --source 20 --threads 1 --rounds 9 --profile --output bench/onnx_step.json

Inputs are random (the step's cost does not depend on the values): `rows` = sentences x beams hypotheses, each
with `cache` cached target tokens and `source` source tokens; the cross-attention cache is given once per sentence.
Reported: the median over `rounds` interleaved rounds (A B ... then ... B A) of the mean of `steps` steps, and each
export's ratio to the first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # benchlib, also when imported by a test
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.machine import write_record  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", action="append", required=True, metavar="NAME=DIR", help="an export (repeatable)")
    parser.add_argument("--precision", choices=("fp32", "int8"), default="int8")
    parser.add_argument("--rows", type=int, default=64, help="hypotheses a step (sentences x beams)")
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--cache", type=int, default=24, help="cached target tokens")
    parser.add_argument("--source", type=int, default=20, help="source tokens")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=10, help="steps timed in each round")
    parser.add_argument("--profile", action="store_true", help="also onnxruntime's per-operator times (ms a step)")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    if args.rows % args.beams:
        parser.error(f"--rows ({args.rows}) must be a multiple of --beams ({args.beams})")
    return args


class Step:
    """One export's step graph with random inputs, and the runtime's cache copy before it."""

    def __init__(self, directory: str, args, profile_prefix: str | None = None):
        import numpy as np

        from xlpe.export.exporter import int8_name
        from xlpe.export.graphs import DECODER_WITH_PAST_FILE
        from xlpe.export.runtime import OnnxTranslator, session_options

        translator = OnnxTranslator(directory, precision=args.precision, threads=args.threads, verify=False)
        self.layout, self.session = translator.layout, translator.decoder_with_past
        if profile_prefix:
            import onnxruntime as ort

            options = session_options(args.threads)
            options.enable_profiling, options.profile_file_prefix = True, profile_prefix
            graph = int8_name(DECODER_WITH_PAST_FILE) if args.precision == "int8" else DECODER_WITH_PAST_FILE
            path = str(translator.directory / graph)
            self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        layout, rows, heads, width = self.layout, args.rows, self.layout.decoder_heads, self.layout.head_dim
        sentences = rows // args.beams
        d_model = heads * width
        self.feeds = {
            "decoder_input_ids": np.full((rows, 1), 5, dtype=np.int64),
            "encoder_attention_mask": np.ones((rows, args.source), dtype=np.int64),
            "encoder_hidden_states": rng.standard_normal((rows, args.source, d_model), dtype=np.float32),
        }
        if layout.tagger_window:
            self.feeds["tagger_input_ids"] = np.full((rows, layout.tagger_window), 5, dtype=np.int64)
        self.own = [n for n in layout.cache_names("past_key_values") if ".decoder." in n]
        cached = args.cache - 1  # + the last step's appended token
        for name in layout.cache_names("past_key_values"):
            shape = (rows, heads, cached, width) if name in self.own else (sentences, heads, args.source, width)
            self.feeds[name] = rng.standard_normal(shape, dtype=np.float32)
        self.appended = {n: rng.standard_normal((rows, heads, 1, width), dtype=np.float32) for n in self.own}
        self.order = rng.integers(0, rows, rows)
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.binding = None
        if layout.indirect_cache:  # buffers written in place, the beams followed in their history alone
            from xlpe.export.runtime import IndirectCache

            sentence_of_row = np.arange(rows) // args.beams
            self.order = sentence_of_row * args.beams + rng.integers(0, args.beams, rows)  # within each sentence
            present = {n: rng.standard_normal((rows, heads, args.cache, width), dtype=np.float32) for n in self.own}
            self.cache = IndirectCache(present, args.beams, limit=args.cache + 8)
            self.binding = self.session.io_binding()
            for name, value in self.feeds.items():
                if name in self.inputs and name not in self.own:
                    self.binding.bind_cpu_input(name, value)
            self.binding.bind_output("logits")

    def __call__(self):
        from xlpe.export.runtime import reordered_cache

        if self.binding is not None:  # the same step each call: the history follows, the length stays
            self.cache.follow(self.order)
            self.cache.bind(self.binding)
            self.indirection = self.cache.indirection()  # alive until the run
            self.binding.bind_cpu_input("cache_indirection", self.indirection)
            return self.session.run_with_iobinding(self.binding)
        feeds = dict(self.feeds)
        for name in self.own:
            feeds[name] = reordered_cache(self.feeds[name], self.appended.get(name), self.order)
        return self.session.run(None, {k: v for k, v in feeds.items() if k in self.inputs})


def operator_times(profile_file: str, calls: int) -> dict:
    """ms a step per operator type from an onnxruntime profile of `calls` runs."""
    events = json.loads(Path(profile_file).read_text())
    totals = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            op = event["args"]["op_name"]
            totals[op] = totals.get(op, 0) + event["dur"]
    return {op: round(us / calls / 1000, 3) for op, us in sorted(totals.items(), key=lambda kv: -kv[1])}


def main(argv=None) -> int:
    args = parse_args(argv)
    from xlpe.training.host_memory import keep_freed_host_memory

    keep_freed_host_memory()  # as xlpe-export --translate: no page faults on each step's arrays
    exports = dict(spec.split("=", 1) for spec in args.export)
    steps = {name: Step(directory, args) for name, directory in exports.items()}
    for step in steps.values():
        step()  # warm-up
    times = {name: [] for name in steps}
    for round_index in range(args.rounds):
        order = list(steps) if round_index % 2 == 0 else list(reversed(steps))
        for name in order:
            start = time.perf_counter()
            for _ in range(args.steps):
                steps[name]()
            times[name].append((time.perf_counter() - start) / args.steps * 1000)
    first = next(iter(steps))
    results = []
    for name in steps:
        ratios = [a / b for a, b in zip(times[first], times[name])]
        layout = steps[name].layout
        results.append(
            {
                "export": name,
                "directory": exports[name],
                "self_attention_cache": layout.self_attention_cache,
                "ms_per_step": round(statistics.median(times[name]), 2),
                "rounds_ms": [round(t, 2) for t in times[name]],
                f"speed_vs_{first}": round(statistics.median(ratios), 3),
            }
        )
        print(f"{name}: {results[-1]['ms_per_step']} ms a step, {results[-1][f'speed_vs_{first}']}x {first}")
    if args.profile:
        import tempfile

        for result in results:
            prefix = str(Path(tempfile.mkdtemp()) / "step")
            step = Step(result["directory"], args, profile_prefix=prefix)
            for _ in range(args.steps):
                step()
            result["operators_ms"] = operator_times(step.session.end_profiling(), args.steps)
    settings = {k: v for k, v in vars(args).items() if k not in ("export", "output", "profile")}
    given = argv if argv is not None else sys.argv[1:]
    write_record(args.output, "bench/onnx_step.py", given, **settings, results=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
