"""Ctrl-C during training, said in one line: `InterruptWatch` (a `TrainerCallback`) follows the step a run has
reached and its output directory; `interrupted_line` turns that and what the directory holds into the one line
`xlpe-train` and `xlpe-reorder train` print before they exit with status 130 (`INTERRUPTED_STATUS`, the shell's
128 + SIGINT), without a traceback."""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback

from .checkpoint_averaging import has_whole_trainer_state, list_checkpoints

INTERRUPTED_STATUS = 130


class InterruptWatch(TrainerCallback):
    """Where a run is: `step` (None before training begins), `max_steps`, `output_dir`, `finished` (training
    ended: a later interrupt comes during what follows it, e.g. the final evaluation or the calibration)."""

    def __init__(self):
        self.step: int | None = None
        self.max_steps: int | None = None
        self.output_dir: str | None = None
        self.finished = False

    def on_train_begin(self, args, state, control, **kwargs):
        self.output_dir, self.step, self.max_steps = args.output_dir, state.global_step, state.max_steps
        self.finished = False

    def on_step_end(self, args, state, control, **kwargs):
        self.step = state.global_step

    def on_train_end(self, args, state, control, **kwargs):
        self.step, self.finished = state.global_step, True


def newest_saved_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest checkpoint-* of `output_dir` with a whole trainer state (what a resume starts from), or None."""
    output_dir = Path(output_dir)
    checkpoints = list_checkpoints(output_dir) if output_dir.is_dir() else []
    return next((path for path in reversed(checkpoints) if has_whole_trainer_state(path)), None)


def close_progress_bars() -> None:
    """Close the progress bars still open (the Trainer's, cut short by Ctrl-C), so the line that follows starts on
    a line of its own rather than after the bar's last update."""
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def interrupted_line(
    command: str, watch: InterruptWatch | None, output_dir: str | Path | None, resume: str, nothing_saved: str
) -> str:
    """`COMMAND: interrupted at step N of M; ...` naming the newest whole checkpoint in `output_dir` and how to
    `resume` from it, or saying `nothing_saved` when there is none. Before training began: "before training
    started"; after it ended: "after training (step N)". Open progress bars are closed first."""
    close_progress_bars()
    step = watch.step if watch is not None else None
    if step is None:
        when = "interrupted before training started"
    elif watch.finished:
        when = f"interrupted after training (step {step})"
    else:
        of = f" of {watch.max_steps:,}" if watch.max_steps else ""
        when = f"interrupted at step {step:,}{of}"
    directory = (watch.output_dir if watch is not None and watch.output_dir else None) or output_dir
    checkpoint = newest_saved_checkpoint(directory) if directory else None
    if checkpoint is not None:
        return f"{command}: {when}; newest checkpoint {checkpoint} ({resume})"
    return f"{command}: {when}; {nothing_saved}"


__all__ = [
    "INTERRUPTED_STATUS",
    "InterruptWatch",
    "close_progress_bars",
    "interrupted_line",
    "newest_saved_checkpoint",
]
