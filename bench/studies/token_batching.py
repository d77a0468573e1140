"""Train tokens/s of token-based batches (`--max_tokens`) against sentence batches on the same data (issue 13).

Trains the same model the same number of steps (`xlpe-train`, stock Marian by default: no alignment needed)
once per batching mode and reports real (non-pad, both sides) training tokens per second, the padding share,
the real tokens trained (batch volume) and the wall clock of the training alone (`train_runtime`). Modes:

* `sentences`: `--per_device_train_batch_size B`, random batches (the Trainer's default);
* `grouped`: the same with `--train_sampling_strategy group_by_length` (length-homogeneous, shuffled);
* `tokens`: `--max_tokens N` (length-bucketed batches of at most N padded tokens).

Pick N near B x the mean padded length so that steps carry similar numbers of tokens (see "real tokens trained").

    python bench/studies/token_batching.py --max_steps 40  # Multi30k de-en (shared data), small recipe model
    python bench/studies/token_batching.py --data builtin --max_steps 40 --batch_size 64 --max_tokens 1024
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: benchlib
from benchlib.data import MULTI30K  # noqa: E402

MODES = {
    "sentences": lambda a: ["--per_device_train_batch_size", str(a.batch_size)],
    "grouped": lambda a: [
        "--per_device_train_batch_size",
        str(a.batch_size),
        "--train_sampling_strategy",
        "group_by_length",
    ],
    "tokens": lambda a: ["--max_tokens", str(a.max_tokens)],
}


def data_flags(args) -> list[str]:
    if args.data == "builtin":
        return []
    raw = MULTI30K / "raw"
    if not (raw / "train.de.gz").is_file():
        raise SystemExit(f"no Multi30k at {raw} (set XLPE_SHARED_DIR, or --data builtin)")
    return [
        "--train_source_file",
        str(raw / "train.de.gz"),
        "--train_target_file",
        str(raw / "train.en.gz"),
        "--source_lang",
        "de",
        "--target_lang",
        "en",
        "--max_train_samples",
        str(args.pairs),
    ]


def run_mode(args, mode: str) -> dict:
    from xlpe.training.run import main as xlpe_train

    out = Path(args.work_dir) / mode
    flags = [
        "--output_dir",
        str(out),
        "--overwrite_output_dir",
        "--do_train",
        "--model_type",
        args.model_type,
        "--max_steps",
        str(args.max_steps),
        "--save_strategy",
        "no",
        "--eval_strategy",
        "no",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        "--logging_steps",
        str(max(args.max_steps // 4, 1)),
        "--seed",
        "1",
        "--d_model",
        "256",
        "--encoder_layers",
        "3",
        "--decoder_layers",
        "3",
        "--attention_heads",
        "4",
        "--ffn_dim",
        "1024",
        "--tokenizer_model",
        "bpe",
        "--tokenizer_vocab_size",
        str(args.vocab),
        "--learning_rate",
        "1e-3",
        "--warmup_steps",
        str(max(args.max_steps // 4, 1)),
        *data_flags(args),
        *MODES[mode](args),
    ]
    metrics = xlpe_train(flags)
    return {
        "mode": mode,
        "tokens_per_s": metrics["train_tokens_per_second"],
        "padding": metrics["train_padding_waste"],
        "real_tokens": metrics["train_real_tokens"],
        "runtime_s": float(metrics["train_runtime"]),
        "loss": round(float(metrics["train_loss"]), 3),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="multi30k", choices=["multi30k", "builtin"])
    parser.add_argument("--pairs", type=int, default=29000, help="Multi30k training pairs used")
    parser.add_argument("--modes", default="sentences,grouped,tokens")
    parser.add_argument("--max_steps", type=int, default=40)
    parser.add_argument("--batch_size", type=int, default=128, help="sentences per batch (sentence modes)")
    parser.add_argument("--max_tokens", type=int, default=2048, help="padded tokens per batch (token mode)")
    parser.add_argument("--model_type", default="vanilla")
    parser.add_argument("--vocab", type=int, default=6000)
    parser.add_argument("--work_dir", default="runs/token-batching")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    rows = [run_mode(args, mode) for mode in args.modes.split(",")]
    print(
        f"\n{args.data}, {args.max_steps} steps, model d256 3+3 ({args.model_type}); sentence batch {args.batch_size}, "
        f"--max_tokens {args.max_tokens}\n"
    )
    print("| mode | real tokens/s | padding | real tokens trained | train s | last loss |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['mode']} | {row['tokens_per_s']:.0f} | {100 * row['padding']:.1f}% | {row['real_tokens']} | "
            f"{row['runtime_s']:.1f} | {row['loss']} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
