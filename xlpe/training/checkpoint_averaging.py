"""Average the parameters of the last N `checkpoint-*` directories of a training run.

Both papers report the average of the last 5 checkpoints (Vaswani et al.'s recipe). The average is taken in
float64 over every floating-point tensor of the checkpoints' safetensors files; integer tensors (step
counters, index buffers) are taken from the newest checkpoint. The result is a model directory that
`from_pretrained` loads: config, generation config, tokenizer and custom-code files are copied from the
newest checkpoint; optimizer/scheduler/RNG states (and an FSDP run's `pytorch_model_fsdp.bin`) are not.

    xlpe-train ... --save_steps 500 --save_total_limit 5 --average_last_checkpoints 5
    python -m xlpe.training.checkpoint_averaging runs/demo --last 5 --output runs/demo/averaged

The checkpoint listing lives here too, with the rule every resume uses (`xlpe-train --resume_from_checkpoint last`,
`xlpe-reorder`): the newest checkpoint whose trainer state is whole, and the newer ones a kill cut short, named.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..features.text_files import write_text_atomic
from ..models.hub_support import apply_umask_to_weights

logger = logging.getLogger(__name__)

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
TRAINING_STATE_FILES = {
    "optimizer.pt",
    "scheduler.pt",
    "trainer_state.json",
    "training_args.bin",
    "scaler.pt",
    "optimizer.bin",
}  # optimizer.bin: FSDP runs (accelerate's name)
FSDP_WEIGHTS_PREFIX = "pytorch_model_fsdp"  # an FSDP checkpoint's second copy of the weights (torch.save): not copied
WEIGHT_SUFFIX = ".safetensors"


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """`checkpoint-<step>` directories of `run_dir`, oldest first (by step, not by name)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    found = [(int(m.group(1)), p) for p in run_dir.iterdir() if p.is_dir() and (m := CHECKPOINT_PATTERN.match(p.name))]
    return [path for _, path in sorted(found)]


def has_whole_trainer_state(checkpoint: Path) -> bool:
    """Whether `checkpoint`/trainer_state.json is there and parses to a trainer state. The Trainer writes it after
    the weights, optimizer and RNG states, so a kill mid-save leaves it missing, empty or cut short."""
    try:
        state = json.loads((Path(checkpoint) / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing, unreadable, cut short (JSONDecodeError and UnicodeDecodeError)
        return False
    return isinstance(state, dict) and isinstance(state.get("global_step"), int)


def newest_whole_checkpoint(run_dir: str | Path, what: str) -> Path | None:
    """The newest `checkpoint-*` of `run_dir` with a whole trainer state (None: none has one or `run_dir` is not a
    directory). When it is found, the newer ones passed over (saves cut short by a kill) are named in a warning
    that starts with `what` (the resume asking), not skipped silently."""
    checkpoints = list_checkpoints(run_dir) if Path(run_dir).is_dir() else []
    for index in range(len(checkpoints) - 1, -1, -1):
        if has_whole_trainer_state(checkpoints[index]):
            skipped = checkpoints[index + 1 :]
            if skipped:
                logger.warning(
                    "%s: skipping %d newer checkpoint(s) whose trainer_state.json is missing or not a whole trainer "
                    "state (a save cut short?): %s; resuming from %s",
                    what,
                    len(skipped),
                    ", ".join(path.name for path in skipped),
                    checkpoints[index].name,
                )
            return checkpoints[index]
    return None


def last_checkpoints(run_dir: str | Path, count: int) -> list[Path]:
    """The newest `count` checkpoints of `run_dir` (ValueError when there are fewer)."""
    if count < 1:
        raise ValueError(f"the number of checkpoints to average must be >= 1, got {count}")
    checkpoints = list_checkpoints(run_dir)
    if len(checkpoints) < count:
        raise ValueError(
            f"asked to average the last {count} checkpoints but {run_dir} has {len(checkpoints)}: "
            f"{[p.name for p in checkpoints]} (check --save_steps / --save_total_limit)"
        )
    return checkpoints[-count:]


def _weight_files(checkpoint: Path) -> list[Path]:
    files = sorted(p for p in checkpoint.iterdir() if p.name.endswith(WEIGHT_SUFFIX))
    if not files:
        raise FileNotFoundError(f"{checkpoint} has no *.safetensors weights (was it saved with safetensors?)")
    return files


def average_checkpoints(checkpoints: list[str | Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the checkpoints' tensors; every checkpoint must have the same names and shapes."""
    if not checkpoints:
        raise ValueError("no checkpoints to average")
    checkpoints = [Path(c) for c in checkpoints]
    sums: dict[str, torch.Tensor] = {}
    newest: dict[str, torch.Tensor] = {}
    for index, checkpoint in enumerate(checkpoints):
        state: dict[str, torch.Tensor] = {}
        for file in _weight_files(checkpoint):
            state.update(load_file(str(file)))
        if index == 0:
            names = set(state)
        elif set(state) != names:
            raise ValueError(
                f"{checkpoint} has different tensors from {checkpoints[0]}: "
                f"missing {sorted(names - set(state))[:5]}, extra {sorted(set(state) - names)[:5]}"
            )
        for name, tensor in state.items():
            if name in sums and sums[name].shape != tensor.shape:
                raise ValueError(
                    f"{name}: shape {tuple(tensor.shape)} in {checkpoint}, {tuple(sums[name].shape)} before"
                )
            if tensor.is_floating_point():
                sums[name] = sums[name] + tensor.double() if name in sums else tensor.double()
            newest[name] = tensor
    return {
        name: (sums[name] / len(checkpoints)).to(tensor.dtype) if tensor.is_floating_point() else tensor
        for name, tensor in newest.items()
    }


def save_averaged_model(checkpoints: list[str | Path], output_dir: str | Path) -> dict[str, torch.Tensor]:
    """Average `checkpoints` and write a loadable model directory to `output_dir`; returns the state dict."""
    checkpoints = [Path(c) for c in checkpoints]
    averaged = average_checkpoints(checkpoints)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    newest = checkpoints[-1]
    for file in newest.iterdir():  # config, tokenizer, custom code: everything but weights and training state
        if (
            file.is_file()
            and not file.name.endswith(WEIGHT_SUFFIX)
            and file.name not in TRAINING_STATE_FILES
            and not file.name.startswith(("rng_state", FSDP_WEIGHTS_PREFIX))
            and not file.name.endswith(".safetensors.index.json")
        ):
            shutil.copy2(file, output_dir / file.name)
    for stale in output_dir.glob("*.safetensors*"):
        stale.unlink()
    save_file(
        {k: v.contiguous() for k, v in averaged.items()},
        str(output_dir / "model.safetensors"),
        metadata={"format": "pt"},
    )
    apply_umask_to_weights(output_dir)  # safetensors leaves its file at 0600
    write_text_atomic(
        output_dir / "averaged_checkpoints.json", json.dumps({"checkpoints": [c.name for c in checkpoints]}, indent=2)
    )
    return averaged


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Average the last N checkpoints of a training run.")
    parser.add_argument("run_dir", help="training output directory holding checkpoint-* subdirectories")
    parser.add_argument("--last", type=int, default=5, help="how many of the newest checkpoints (default 5)")
    parser.add_argument("--output", required=True, help="directory for the averaged model")
    args = parser.parse_args(argv)
    checkpoints = last_checkpoints(args.run_dir, args.last)
    save_averaged_model(checkpoints, args.output)
    print(f"averaged {[c.name for c in checkpoints]} -> {args.output}")


if __name__ == "__main__":
    main()
