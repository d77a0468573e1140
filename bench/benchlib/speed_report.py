"""The speed report: per-repeat ratio summaries against the targets, the Markdown table, the bar chart, and the
tables as entries of the speed results file (docs/benchmarks/results/speed.json, rendered into docs/benchmarks/)."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "results" / "speed.json"

# ---------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------


def fmt_ratio(s: dict, target: float | None, flag: float | None = None) -> str:
    text = f"**{s['median']:.3f}** ({s['min']:.3f}–{s['max']:.3f})"
    if target is not None:
        text += " ✅" if s["median"] <= target else " ❌"
    if flag is not None and len(s.get("values", ())) > 1 and s.get("spread", 0.0) > flag:
        text += f" ⚠ spread {100 * s['spread']:.0f}%"
    return text


def fmt_target(target: float | None) -> str:
    return f"≤ {target:.2f}" if target else "—"


def markdown(report: dict) -> str:
    """The settings line, the ratios (what the targets are about; ⚠ = per-repeat spread above the flag), the
    absolute figures (tokens/s, MFU, FLOPs, memory, warm-up), and the flags."""
    rows, clock = report["models"], report["clock"]
    other = "wall" if clock == "cpu" else "host-CPU"
    clock_name = {"cpu": "CPU-time", "wall": "wall-clock"}[clock]
    batching = report.get("batching", {})
    flag = report.get("spread_flag")
    by_name = {r["name"]: r for r in rows}
    peak = report["peak_tflops"]
    out = [
        f"Switches (every model, baselines included): {report.get('switches', report['dtype'])}. Batches: "
        f"{batching.get('kind', '?')}, {batching.get('batches_per_cycle', '?')} per cycle, "
        f"{report['mean_target_tokens_per_batch']:.0f} target tokens per batch on average; lengths: "
        f"{batching.get('lengths', '?')}. {report['train_steps']} timed train steps and {report['gen_batches']} "
        f"generate calls per model per repeat, {report['repeats']} interleaved repeats; clock: "
        f"{report.get('clock_detail', clock_name)}. "
        + (
            f"MFU against {peak:g} TFLOP/s ({report.get('peak_source')})."
            if peak
            else "No MFU (no peak for this device)."
        ),
        "",
        (
            f"| model | vs | train step ratio ({clock_name}), median (min–max) | {other} median | target | "
            f"beam-5 generation ratio ({clock_name}), median (min–max) | {other} median | target |"
        ),
        "|---|---|---|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        if not r["baseline"]:
            continue
        if r["gen_ratio"] is not None:
            gen = (
                f"{fmt_ratio(r['gen_ratio'], r['gen_target'], flag)} | {r['gen_ratio_other_clock']['median']:.3f} | "
                f"{fmt_target(r['gen_target'])}"
            )
        else:
            gen = "not timed | — | —"
        out.append(
            f"| {r['name']} | {r['baseline']} | {fmt_ratio(r['train_ratio'], r['train_target'], flag)} | "
            f"{r['train_ratio_other_clock']['median']:.3f} | {fmt_target(r['train_target'])} | "
            f"{gen} |"
        )
    out += [
        "",
        f"| model | params | train target tokens/s ({clock_name}) | generation sentences/s ({clock_name}) | "
        "train GFLOP/step (counted) | train peak MiB | generation peak MiB | warm-up cycles (first s) |"
        + (" train MFU | counted FLOPs / peak | generation (counted) / peak |" if peak else ""),
        "|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if peak else ""),
    ]
    for r in rows:
        b = by_name.get(r["baseline"]) if r["baseline"] else None

        def rel(key, fmt, scale=1.0, unit="", r=r, b=b):
            if r.get(key) is None:
                return "—"
            text = format(r[key] / scale, fmt) + unit
            return text + (f" (×{r[key] / b[key]:.3f})" if b is not None and b.get(key) else "")

        def pct(key, r=r):
            return f"{100 * r[key]:.1f}%" if r.get(key) is not None else "—"

        warm = r.get("warmup_train") or {}
        line = (
            f"| {r['name']} | {rel('parameters', '.2f', 1e6, 'M')} | {r['train_tokens_per_s']:.0f} | "
            f"{format(r['gen_sentences_per_s'], '.2f') if r['gen_sentences_per_s'] else '—'} | "
            f"{rel('train_flops', '.1f', 1e9)} | "
            f"{rel('train_peak_bytes', '.0f', 2**20)} | {rel('gen_peak_bytes', '.0f', 2**20)} | "
            f"{warm.get('cycles', '—')}{'' if warm.get('stable', True) else ' ⚠'} "
            f"({warm.get('first_cycle_s', 0):.1f}) |"
        )
        if peak:
            line += f" {pct('train_mfu')} | {pct('train_counted_flops_utilisation')} | {pct('gen_mfu')} |"
        out.append(line)
    if report.get("flags"):
        out += ["", "**Flagged** (not to be trusted as measured):", *[f"* {f}" for f in report["flags"]]]
    return "\n".join(out)


def results_tables(report: dict, name: str) -> dict[str, dict]:
    """The report's two tables as results-file tables (docs/benchmarks/results/speed.json): `speed/NAME` (the
    ratios) and `speed/NAME-figures` (parameters, throughput, FLOPs, memory, warm-up)."""
    from .tables import tables_to_markers

    _, tables = tables_to_markers(markdown(report), "speed")
    return dict(zip((f"speed/{name}", f"speed/{name}-figures"), tables.values()))


def write_results_tables(report: dict, name: str, results: Path | None = None) -> list[str]:
    """Put the report's tables into the speed results file (replacing tables of the same names); the page shows
    them once `<!-- table: speed/NAME -->` ... `<!-- end table -->` marks their place and `bench/render_tables.py`
    has run."""
    from .tables import write_results

    tables = results_tables(report, name)
    write_results(results or RESULTS, tables, drop=set(tables))
    return list(tables)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["models"] if r["baseline"]]
    kinds = [("train", "train step (fwd+bwd+AdamW)")]
    if any(r["gen_ratio"] is not None for r in rows):
        kinds.append(("gen", "beam-5 generation"))
    fig, axes = plt.subplots(1, len(kinds), figsize=(6 * len(kinds), 0.6 * len(rows) + 2), sharey=True, squeeze=False)
    y = list(range(len(rows)))[::-1]
    for ax, (kind, title) in zip(axes[0], kinds):
        for yi, r in zip(y, rows):
            s, target = r[f"{kind}_ratio"], r[f"{kind}_target"]
            if s is None:
                ax.text(1.0, yi, "  not timed", va="center", fontsize=8, color="gray")
                continue
            color = "tab:gray" if target is None else ("tab:green" if s["median"] <= target else "tab:red")
            ax.barh(
                yi,
                s["median"] - 1,
                left=1,
                color=color,
                hatch="//" if r.get("flagged") else None,
                xerr=[[s["median"] - s["min"]], [s["max"] - s["median"]]],
                capsize=3,
            )
            if target:
                ax.plot([target, target], [yi - 0.4, yi + 0.4], color="black", linestyle="--", linewidth=1)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_yticks(y, [f"{r['name']}\nvs {r['baseline']}" for r in rows])
        ax.set_xlabel(f"{'CPU-time' if report['clock'] == 'cpu' else 'wall-clock'} ratio vs baseline")
        ax.set_title(title)
    fig.suptitle(
        f"xlpe speed overhead — {report['machine']['device']}, {report.get('switches', report['dtype'])}, "
        f"size {report['size']}, "
        f"{report['date']}\nbars: median of {report['repeats']} interleaved repeats, whiskers: min–max, "
        "dashed: target (green = met, red = missed, grey = no target), hatched: flagged",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
