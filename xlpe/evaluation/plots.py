"""PNG plots of the papers' sweeps, drawn with matplotlib's Agg canvas (no display, no global pyplot state).

* `plot_tau_sweep`: BLEU against the number of XL heads tau (XL PE Fig. 3);
* `plot_noise_curve`: BLEU against the ratio of swapped reorder indices (XL PE Sec. 4.5, Fig. 4);
* `plot_perplexity_per_epoch`: test perplexity per training epoch (mvPE+POS Fig. 4);
  `perplexity_history` reads it from a Trainer's `trainer_state.json`.

Every function takes either one series `{x: y}` or several `{label: {x: y}}` and returns the PNG's path. The PNG
is drawn in memory and written beside its name, then renamed into place (`write_bytes_atomic`): a reader sees the
old file or the whole new one.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from pathlib import Path

from ..features.text_files import write_bytes_atomic

Series = Mapping[float, float]


def _as_series(data: Series | Mapping[str, Series]) -> dict[str, list[tuple[float, float]]]:
    """{x: y} -> {"": [(x, y), ...]}; {label: {x: y}} -> {label: [...]}; x keys may be strings (from JSON)."""
    if not data:
        raise ValueError("nothing to plot")
    first = next(iter(data.values()))
    groups = data if isinstance(first, Mapping) else {"": data}
    return {label: sorted((float(x), float(y)) for x, y in points.items()) for label, points in groups.items()}


def _line_plot(
    data,
    path,
    title: str,
    xlabel: str,
    ylabel: str,
    best: str | None = None,
    x_scale: float = 1.0,
    integer_x: bool = False,
    reference: float | None = None,
) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.0, 4.0), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    for label, points in _as_series(data).items():
        xs, ys = [x * x_scale for x, _ in points], [y for _, y in points]
        axes.plot(xs, ys, marker="o", label=label or None)
        if best is not None and ys:
            k = max(range(len(ys)), key=lambda i: ys[i] if best == "max" else -ys[i])
            axes.annotate(
                f"{ys[k]:.2f}", (xs[k], ys[k]), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8
            )
    if reference is not None:
        axes.axhline(reference, color="gray", linestyle="--", linewidth=1, label="baseline")
    if integer_x:
        from matplotlib.ticker import MaxNLocator

        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set(title=title, xlabel=xlabel, ylabel=ylabel)
    axes.grid(True, alpha=0.3)
    if axes.get_legend_handles_labels()[1]:
        axes.legend(fontsize=8)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    png = io.BytesIO()
    figure.savefig(png, format="png")
    return write_bytes_atomic(path, png.getvalue())  # beside `path`, renamed into place: never half a PNG


def plot_tau_sweep(bleu_by_tau: Series | Mapping[str, Series], path, metric: str = "BLEU") -> Path:
    """XL PE Fig. 3: `metric` for tau = 0..H XL-informed heads (tau = 0 is the vanilla Transformer)."""
    return _line_plot(
        bleu_by_tau,
        path,
        f"{metric} vs. number of XL heads (tau)",
        "tau (heads fed X + PE_XL)",
        metric,
        best="max",
        integer_x=True,
    )


def plot_noise_curve(
    bleu_by_ratio: Series | Mapping[str, Series], path, metric: str = "BLEU", baseline: float | None = None
) -> Path:
    """XL PE Fig. 4: `metric` against the fraction (0-1) of swapped reorder indices, drawn in percent;
    `baseline` (e.g. the vanilla Transformer's score) as a dashed line."""
    return _line_plot(
        bleu_by_ratio,
        path,
        f"{metric} under reordering noise",
        "noisy reorder indices (%)",
        metric,
        x_scale=100.0,
        reference=baseline,
    )


def plot_perplexity_per_epoch(perplexity_by_epoch: Series | Mapping[str, Series], path, split: str = "test") -> Path:
    """mvPE+POS Fig. 4: perplexity on `split` after each epoch, one line per model."""
    title = f"{split.capitalize()} perplexity per epoch"
    return _line_plot(perplexity_by_epoch, path, title, "epoch", "perplexity", best="min")


def perplexity_history(trainer_state: str | Path, loss_key: str = "eval_loss") -> dict[float, float]:
    """{epoch: exp(eval_loss)} from the `log_history` of a transformers Trainer's `trainer_state.json`."""
    state = json.loads(Path(trainer_state).read_text(encoding="utf-8"))
    entries = [e for e in state.get("log_history", []) if loss_key in e and "epoch" in e]
    history = {float(e["epoch"]): math.exp(e[loss_key]) for e in entries}
    if not history:
        raise ValueError(f"{trainer_state} has no log_history entries with {loss_key!r} and 'epoch'")
    return history


__all__ = ["perplexity_history", "plot_noise_curve", "plot_perplexity_per_epoch", "plot_tau_sweep"]
