"""Peak resident memory of an `xlpe-train` run, phase by phase (issue 55: "say what dominates").

    python bench/train_memory.py --json runs/train_memory.json -- --model_type xlpe --prepared_dataset prep \\
        --output_dir runs/mem --max_steps 40 --eval_steps 40 --save_steps 40 --average_last_checkpoints 1 \\
        --do_predict false --max_eval_samples 200 --disable_tqdm true
    XLPE_HOST_ALLOCATOR=default python bench/train_memory.py ...   # the same without the kept host memory

Runs `xlpe.training.run.main` in this process with a callback that names the phase (imports, setup, training,
periodic evaluation, after it, final evaluation and test) and a thread that samples the process's resident set every
50 ms; prints and writes the peak of each phase (GiB). A phase's peak includes what earlier phases left resident, so
the increments between phases say what each adds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import psutil

PHASE = {"name": "imports (torch, transformers, xlpe)"}
PEAKS: dict[str, int] = {}


def sample(process: psutil.Process, stop: threading.Event) -> None:
    while not stop.is_set():
        rss = process.memory_info().rss
        PEAKS[PHASE["name"]] = max(PEAKS.get(PHASE["name"], 0), rss)
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=None, help="write the peaks here")
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then xlpe-train's arguments")
    args = parser.parse_args(argv)
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    stop = threading.Event()
    threading.Thread(target=sample, args=(psutil.Process(), stop), daemon=True).start()

    from transformers import TrainerCallback

    from xlpe.training.run import main as xlpe_train

    PHASE["name"] = "setup (data, tokenizer, model)"

    class Phases(TrainerCallback):
        def on_train_begin(self, *args, **kwargs):
            PHASE["name"] = "training"

        def on_prediction_step(self, *args, **kwargs):
            if PHASE["name"] == "training":
                PHASE["name"] = "periodic evaluation (generate)"

        def on_evaluate(self, *args, **kwargs):
            if PHASE["name"] == "periodic evaluation (generate)":
                PHASE["name"] = "training after an evaluation"

        def on_train_end(self, *args, **kwargs):
            PHASE["name"] = "final evaluation and test"

    started = time.time()
    xlpe_train(train_args, callbacks=[Phases()])
    stop.set()
    peaks = {name: round(value / 2**30, 3) for name, value in PEAKS.items()}
    record = {
        "command": "python bench/train_memory.py -- " + " ".join(train_args),
        "host_allocator": os.environ.get("XLPE_HOST_ALLOCATOR", "steady (xlpe-train's default on CPU)"),
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(time.time() - started, 1),
        "peak_gib_by_phase": peaks,
    }
    print(json.dumps(record, indent=1))
    if args.json:
        args.json.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
