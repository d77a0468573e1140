"""Does onnxruntime's IO binding speed up a decoder step? One export's `decoder_with_past` step (random inputs shaped
as bench/onnx_step.py shapes them, the runtime's cache copy included) run (a) as the runtime runs it,
`session.run`, which allocates every output anew, and (b) with its outputs bound to buffers allocated once
(`io_binding`, `bind_output` on reused numpy memory), interleaved; both with and without the host allocator setting
that `xlpe-export --translate` uses (glibc keeps freed memory: `xlpe.training.host_memory`), each in a process of its
own. Outputs are checked identical. Page: docs/benchmarks/onnx.md ("IO binding"). For exports with the appended
self-attention cache (the indirect one binds its buffers in place already: xlpe/export/step_caches.py).

    python bench/studies/onnx_io_binding.py --export <export dir> --precision int8 \\
        --output bench/studies/onnx_io_binding.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
from benchlib.machine import write_record  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", required=True, help="an export directory")
    parser.add_argument("--precision", choices=("fp32", "int8"), default="int8")
    parser.add_argument("--rows", type=int, default=64, help="hypotheses a step (sentences x beams)")
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--cache", type=int, default=24, help="cached target tokens")
    parser.add_argument("--source", type=int, default=20, help="source tokens")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds of --steps steps")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--allocator", choices=("kept", "default"), default=None, help="(the child process's own)")
    parser.add_argument("--output", default=None)
    return parser.parse_args(argv)


def measure(args) -> dict:
    """Both ways of running the step in this process: median ms a step over the interleaved rounds."""
    import numpy as np
    from onnx_step import Step
    from onnx_step import parse_args as step_args

    if args.allocator == "kept":
        from xlpe.training.host_memory import keep_freed_host_memory

        keep_freed_host_memory()
    shape = ["--rows", str(args.rows), "--beams", str(args.beams), "--cache", str(args.cache)]
    shape += ["--source", str(args.source), "--threads", "1", "--precision", args.precision]
    step = Step(args.export, step_args(["--export", f"x={args.export}", *shape]))
    if step.layout.indirect_cache:
        raise SystemExit(
            f"{args.export}: an export with the indirect self-attention cache runs its steps with IO binding already "
            "(xlpe/export/runtime.py); this study compares the two ways of running an appended-cache step graph"
        )
    session, names = step.session, [o.name for o in step.session.get_outputs()]
    buffers = [np.empty_like(o) for o in step()]
    binding = session.io_binding()

    def bound():
        from xlpe.export.runtime import reordered_cache

        binding.clear_binding_inputs()
        for name, value in step.feeds.items():
            if name in step.inputs:
                cache = name in step.own
                value = reordered_cache(value, step.appended.get(name), step.order) if cache else value
                binding.bind_cpu_input(name, value)
        for name, buffer in zip(names, buffers):
            binding.bind_output(name, "cpu", 0, buffer.dtype, list(buffer.shape), buffer.ctypes.data)
        session.run_with_iobinding(binding)
        return buffers

    plain = step.__call__
    identical = all(np.array_equal(a, b) for a, b in zip(plain(), bound()))
    times = {"run": [], "io_binding": []}
    for round_ in range(args.rounds):
        pairs = (("run", plain), ("io_binding", bound))
        for name, run in pairs if round_ % 2 == 0 else pairs[::-1]:
            start = time.perf_counter()
            for _ in range(args.steps):
                run()
            times[name].append((time.perf_counter() - start) / args.steps * 1000)
    medians = {name: round(statistics.median(values), 2) for name, values in times.items()}
    return {"allocator": args.allocator, **medians, "identical_outputs": identical}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.allocator:  # the child: one allocator setting, one JSON line
        print(json.dumps(measure(args)))
        return 0
    given = list(argv if argv is not None else sys.argv[1:])
    argv = list(given)
    if "--output" in argv:
        del argv[argv.index("--output") : argv.index("--output") + 2]
    rows = []
    for allocator in ("default", "kept"):
        command = [sys.executable, __file__, *argv, "--allocator", allocator]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        row = json.loads(out.strip().splitlines()[-1])
        row["io_binding_speedup"] = round(row["run"] / row["io_binding"], 3)
        rows.append(row)
        print(row)
    onnxruntime = __import__("onnxruntime").__version__
    write_record(args.output, "bench/studies/onnx_io_binding.py", given, onnxruntime=onnxruntime, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
