"""The reproduction report: for each group, BLEU/chrF mean ± std over seeds, the delta against vanilla of
the same seed with a paired bootstrap per seed and a verdict, the XL PE oracle-position rows, the extra
tables of some groups (2PT, mvPE+POS metrics, AER), plots, and one `## Section` of a benchmark page
(docs/benchmarks/; its tables' rows in the page's results file)."""

from __future__ import annotations

import functools
import json
import os
import platform
import statistics
import sys
from pathlib import Path

from xlpe.evaluation.verdict import verdict_of  # the seed rule: one copy, in the library

from .data import REPO
from .reproduction import COMPONENTS, GROUPS, MODES, STUDY_DATA, group_runs, read_results
from .tables import mean_std, replace_section_with_results, run_dates


def significance(record: dict, baseline: dict | None, references: list[str], target_lang: str) -> dict | None:
    from xlpe.evaluation import paired_significance

    if baseline is None or record is baseline:
        return None
    read = lambda r: Path(r["hypotheses"]).read_text(encoding="utf-8").splitlines()
    return paired_significance(read(record), read(baseline), references, target_language=target_lang)["metrics"]


def group_table(group: str, records: list[dict], work: Path, modes: set[str]) -> list[str]:
    """Markdown rows for one group: BLEU/chrF mean ± std over seeds, delta and paired bootstrap per seed."""
    in_group_order = [spec["name"] for mode in sorted(modes) for spec in group_runs(group, MODES[mode])]
    names = sorted(
        dict.fromkeys(r["name"] for r in records),
        key=lambda n: in_group_order.index(n) if n in in_group_order else len(in_group_order),
    )
    baselines = " / ".join(dict.fromkeys(r.get("baseline", "vanilla") for r in records))
    lines = [
        f"### {group} ({', '.join(sorted(modes))} mode)",
        "",
        f"| run | pair | seeds | BLEU | chrF | ΔBLEU / ΔchrF vs {baselines} | bootstrap p BLEU / chrF, per seed | "
        "verdict (BLEU) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for pair, name, rows in rows_by_pair(records, names):
        pvalues, deltas, chrf_pvalues, chrf_deltas = [], [], [], []
        for r in rows:
            base = baseline_record(r, records)
            refs = reference_texts(work, r["pair"], r["mode"], r.get("data", "clean"))
            sig = significance(r, base, refs, r["pair"].split("-")[1])
            if sig:
                pvalues.append(sig["BLEU"]["p_value"]), deltas.append(sig["BLEU"]["delta"])
                chrf = next(v for k, v in sig.items() if k.startswith("chrF"))  # sacrebleu names it chrF2
                chrf_pvalues.append(chrf["p_value"]), chrf_deltas.append(chrf["delta"])
        if all(r.get("baseline", "vanilla") == name for r in rows):
            verdict, delta, pcol = "baseline", "-", "-"
        else:
            delta = f"{statistics.mean(deltas):+.2f} / {statistics.mean(chrf_deltas):+.2f}" if deltas else "-"
            pcol = ", ".join(f"{p:.3f} / {q:.3f}" for p, q in zip(pvalues, chrf_pvalues)) or "-"
            verdict = verdict_of(deltas, pvalues)
        reused = sorted({r["same_as"].split("|")[2] for r in rows if r.get("same_as")})
        label = f"{name} (= {', '.join(reused)})" if reused else name  # the same model: its result, not a new run
        lines.append(
            f"| {label} | {pair} | {len(rows)} | {mean_std([r['bleu'] for r in rows])} | "
            f"{mean_std([r['chrf'] for r in rows])} | {delta} | {pcol} | {verdict} |"
        )
    extra = extra_tables(group, records, work)
    signatures = sorted({r["bleu_signature"] for r in records} | {r["chrf_signature"] for r in records})
    return lines + [""] + extra + ["Signatures: " + "; ".join(f"`{s}`" for s in signatures), ""]


def pairs_of(records: list[dict]) -> list[str]:
    """The language pairs of `records`, in the order they first appear: every row of a table is one pair's (one work
    dir may hold several pairs' runs of the same names: their seeds are never pooled into one row)."""
    return list(dict.fromkeys(r["pair"] for r in records))


def rows_by_pair(records: list[dict], names: list[str]):
    """(pair, name, that pair's runs of that name) for every pair (in `pairs_of` order) and name with runs."""
    for pair in pairs_of(records):
        for name in names:
            rows = [r for r in records if r["name"] == name and r["pair"] == pair]
            if rows:
                yield pair, name, rows


def pair_label(name: str, pair: str, several_pairs: bool) -> str:
    """A column or row label: the run's name, with its pair when the table shows several."""
    return f"{name} ({pair})" if several_pairs else name


def paired_against(rows: list[dict], parts: list[dict], work: Path) -> tuple[list[float], list[float]]:
    """Per seed that both have: (run − part) BLEU delta and the paired bootstrap p of the run against the part."""
    deltas, pvalues = [], []
    for r in sorted(rows, key=lambda r: r["seed"]):
        part = next(
            (b for b in parts if b["seed"] == r["seed"] and b["pair"] == r["pair"] and b["mode"] == r["mode"]), None
        )
        sig = significance(r, part, reference_texts(work, r["pair"], r["mode"]), r["pair"].split("-")[1])
        if sig:
            deltas.append(sig["BLEU"]["delta"]), pvalues.append(sig["BLEU"]["p_value"])
    return deltas, pvalues


def components_table(records: list[dict], work: Path) -> list[str]:
    """Each stacked run of the table against each of its parts (COMPONENTS), not only against vanilla: the
    delta per seed says what the added piece contributes on top of the other."""
    names = set(r["name"] for r in records)
    lines = []
    for pair in pairs_of(records):
        for name, parts in COMPONENTS.items():
            for part in (p for p in parts if name in names and p in names):
                deltas, pvalues = paired_against(
                    [r for r in records if r["name"] == name and r["pair"] == pair],
                    [r for r in records if r["name"] == part and r["pair"] == pair],
                    work,
                )
                if deltas:
                    per_seed = ", ".join(f"{d:+.2f} (p {p:.3f})" for d, p in zip(deltas, pvalues))
                    lines.append(
                        f"| {name} | {part} | {pair} | {len(deltas)} | {statistics.mean(deltas):+.2f} | {per_seed} | "
                        f"{verdict_of(deltas, pvalues)} |"
                    )
    if not lines:
        return []
    return [
        "| stacked run | against its part | pair | seeds | ΔBLEU | ΔBLEU (bootstrap p) per seed | verdict (BLEU) |",
        "|---|---|---|---|---|---|---|",
        *lines,
        "",
    ]


def oracle_table(records: list[dict], work: Path) -> list[str]:
    """XL PE runs decoded with oracle positions next to their predicted-position scores: the gap is what the
    test-time reorderer costs (paired bootstrap oracle vs predicted, per seed)."""
    names = list(dict.fromkeys(r["name"] for r in records if "oracle_hypotheses" in r))  # 2PT's oracle: its own table
    if not names:
        return []
    lines = [
        "| XL PE run | pair | seeds | BLEU, predicted positions | BLEU, oracle positions | oracle − predicted | "
        "bootstrap p per seed |",
        "|---|---|---|---|---|---|---|",
    ]
    for pair, name, rows in rows_by_pair([r for r in records if "oracle_hypotheses" in r], names):
        pvalues = []
        for r in rows:
            oracle = {"hypotheses": r["oracle_hypotheses"]}
            references = reference_texts(work, r["pair"], r["mode"], r.get("data", "clean"))
            sig = significance(oracle, r, references, r["pair"].split("-")[1])
            pvalues.append(f"{sig['BLEU']['p_value']:.3f}" if sig else "-")
        gap = statistics.mean(r["oracle_bleu"] - r["bleu"] for r in rows)
        lines.append(
            f"| {name} | {pair} | {len(rows)} | {mean_std([r['bleu'] for r in rows])} | "
            f"{mean_std([r['oracle_bleu'] for r in rows])} | {gap:+.2f} | {', '.join(pvalues)} |"
        )
    return lines + [""]


def extra_tables(group: str, records: list[dict], work: Path | None = None) -> list[str]:
    lines = oracle_table(records, work) + components_table(records, work) if work is not None else []
    two_pass = [r for r in records if r["kind"] == "two_pass"]
    if two_pass:  # the 2pt group, and every table with its row (table1); one pair's seeds a row
        lines += ["| 2PT row | pair | BLEU | chrF |", "|---|---|---|---|"]
        for pair in pairs_of(two_pass):
            rows = [r for r in two_pass if r["pair"] == pair]
            lines += [
                f"| 2PT (reorderer + translator) | {pair} | {mean_std([r['bleu'] for r in rows])} | "
                f"{mean_std([r['chrf'] for r in rows])} |",
                f"| 2PT oracle (alignment-reordered source) | {pair} | {mean_std([r['oracle_bleu'] for r in rows])} | "
                f"{mean_std([r['oracle_chrf'] for r in rows])} |",
            ]
        lines.append("")
    if group == "mvpe":  # mvPE+POS Tables III-V: BLEU-1..4 (0-1), ROUGE F1 (0-1), length ratio; one column per run
        mvpe_rows = [r for r in records if r["kind"] == "mvpe"]
        several = len(pairs_of(mvpe_rows)) > 1  # a column per run and pair: seeds of two pairs never pooled
        columns = list(dict.fromkeys((r["pair"], r["name"]) for r in mvpe_rows))
        names = [pair_label(name, pair, several) for pair, name in columns]
        by_name = {
            label: [r for r in mvpe_rows if (r["pair"], r["name"]) == column] for label, column in zip(names, columns)
        }
        metrics = {f"BLEU-{n}": (lambda r, n=n: r[f"bleu-{n}"]["score"]) for n in range(1, 5)}
        metrics.update(
            {
                f"ROUGE {k} F1": (
                    lambda r, k=k: r["rouge"][k]["f"] if isinstance(r["rouge"][k], dict) else r["rouge"][k]
                )
                for k in ("rouge1", "rouge2", "rougeL")
            }
        )
        metrics["length ratio"] = lambda r: r["length_ratio"]["ratio"]
        metrics["final perplexity (val)"] = lambda r: list(r["perplexity_by_epoch"].values())[-1]
        lines += ["| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for label, get in metrics.items():
            lines.append(
                f"| {label} | " + " | ".join(mean_std([float(get(r)) for r in by_name[n]]) for n in names) + " |"
            )
        lines.append("")
    if group == "alignment":
        lines += ["| model (en→fr, Hansards gold) | AER | precision | recall |", "|---|---|---|---|"]
        several = len(pairs_of(records)) > 1
        for pair, name in dict.fromkeys((r["pair"], r["name"]) for r in records):
            rows = [r["alignment"] for r in records if (r["pair"], r["name"]) == (pair, name) and "alignment" in r]
            if rows:
                lines.append(
                    f"| {pair_label(name, pair, several)} | "
                    + " | ".join(mean_std([100 * a[k] for a in rows]) for k in ("aer", "precision", "recall"))
                    + " |"
                )
        lines.append("")
    return lines


def baseline_record(record: dict, records: list[dict]) -> dict | None:
    """The run `record` is compared with: its `baseline` (vanilla unless the group says otherwise, e.g. the
    fine-tuning study's continued stock fine-tuning) of the same pair and seed."""
    name = record.get("baseline", "vanilla")
    return next(
        (b for b in records if b["name"] == name and b["seed"] == record["seed"] and b["pair"] == record["pair"]),
        None,
    )


@functools.cache
def reference_texts(work: Path, pair: str, mode_name: str, data: str = "clean") -> list[str]:
    """The test references of a run's data: the clean preparation's, or the study's (whose test split is its
    own); a noisy or tagged preparation tests on the clean split."""
    import datasets

    folder = data if data in STUDY_DATA else "clean"
    return datasets.load_from_disk(str(work / "data" / pair / folder))["test"]["target_text"]


def plots(records: list[dict], out_dir: Path, prefix: str) -> list[str]:
    """The tau sweep, the noise curve and mvPE's perplexity per epoch: one figure per pair (the pair in the file
    name when the work dir holds several)."""
    from xlpe.evaluation.plots import plot_noise_curve, plot_perplexity_per_epoch, plot_tau_sweep

    made = []
    mean_by = lambda rows, key: {k: statistics.mean(v) for k, v in _collect(rows, key).items()}
    pairs = pairs_of(records)
    for pair in pairs:
        name = f"{prefix}_{pair}" if len(pairs) > 1 else prefix
        of_pair = [r for r in records if r["pair"] == pair]
        tau = [r for r in of_pair if r["group"] == "tau" and r["name"].startswith("head-tau")]
        if tau:
            made.append(
                plot_tau_sweep(mean_by(tau, lambda r: float(r["fields"]["xl_heads"])), out_dir / f"{name}_tau.png")
            )
        noise = [r for r in of_pair if r["group"] == "noise" and r["data"].startswith("noise")]
        if noise:
            vanilla = [r["bleu"] for r in of_pair if r["name"] == "vanilla"]
            made.append(
                plot_noise_curve(
                    mean_by(noise, lambda r: float(r["data"].removeprefix("noise"))),
                    out_dir / f"{name}_noise.png",
                    baseline=statistics.mean(vanilla) if vanilla else None,
                )
            )
        mvpe_rows = [r for r in of_pair if r["kind"] == "mvpe"]
        if mvpe_rows:
            curves = {
                f"{r['name']} seed {r['seed']}": {float(k): v for k, v in r["perplexity_by_epoch"].items()}
                for r in mvpe_rows
            }
            made.append(plot_perplexity_per_epoch(curves, out_dir / f"{name}_perplexity.png", split="validation"))
    return [
        str(Path(p).resolve().relative_to(REPO)) if Path(p).resolve().is_relative_to(REPO) else str(p) for p in made
    ]


def _collect(rows, key):
    collected: dict[float, list[float]] = {}
    for r in rows:
        collected.setdefault(key(r), []).append(r["bleu"])
    return collected


def shared_hypotheses(records: list[dict]) -> dict[str, list[str]]:
    """Hypothesis files that more than one model's record points to ({path: keys}). A run that reuses another's
    model (`same_as`) shares its file by design; two different models never may: the later one overwrote the
    earlier one's hypotheses, and every bootstrap on that file would compare the wrong output (the 2PT runs before
    2026-11-25 wrote all seeds to runs/hypotheses.txt)."""
    models_by_file: dict[str, set[str]] = {}
    for r in records:
        models_by_file.setdefault(r["hypotheses"], set()).add(r.get("same_as") or r["key"])
    return {path: sorted(keys) for path, keys in models_by_file.items() if len(keys) > 1}


def report(args) -> int:
    work = Path(args.work_dir)
    records = read_results(work / "results.jsonl")
    if not records:
        raise SystemExit(f"no results in {work / 'results.jsonl'}: run the groups first")
    clashes = shared_hypotheses(records)
    if clashes:
        path, keys = next(iter(clashes.items()))
        raise SystemExit(
            f"{work / 'results.jsonl'}: {len(keys)} runs share the hypothesis file {path} ({', '.join(keys)}): "
            "their significance tests would read one run's output; re-run or re-decode them"
        )
    groups = list(dict.fromkeys(r["group"] for r in records))
    if getattr(args, "report_groups", None):  # e.g. "table1": its rows whichever driver group ran them
        groups = [g for g in args.report_groups.split(",") if g.strip()]
        unknown = set(groups) - set(GROUPS)
        if unknown:
            raise SystemExit(f"--report_groups: unknown {sorted(unknown)}; known: {', '.join(GROUPS)}")
    lines = []
    for group in groups:
        rows = [r for r in records if r["group"] == group]
        if not rows:  # a group none of whose runs was run by its own driver: its pairs and modes from the others
            listed = {spec["name"] for mode in {r["mode"] for r in records} for spec in group_runs(group, MODES[mode])}
            rows = [r for r in records if r["name"] in listed]
            lines += group_table(group, rows, work, {r["mode"] for r in rows}) if rows else []
            continue
        # a run is recorded once (under the group that ran it) and belongs to every group that lists it: vanilla
        # to all groups of its pair, table5-8E to init, ...
        pairs, modes = {r["pair"] for r in rows}, {r["mode"] for r in rows}
        listed = {spec["name"] for mode in modes for spec in group_runs(group, MODES[mode])}
        rows = [
            r for r in records if r["name"] in listed and r["pair"] in pairs and r["mode"] in modes and r not in rows
        ] + rows
        lines += group_table(group, rows, work, modes)
    eflomal = work / "eflomal_aer.json"
    if eflomal.is_file():
        a = json.loads(eflomal.read_text())
        lines += [
            (
                f"eflomal's own alignment of the Hansards test text (reference row): AER {100 * a['aer']:.2f}, "
                f"precision {100 * a['precision']:.2f}, recall {100 * a['recall']:.2f}."
            ),
            "",
        ]
    modes = sorted({r["mode"] for r in records})
    images = plots(records, Path(args.plot_dir), f"reproduce_{'_'.join(modes)}")
    print("\n".join(lines + [f"![{Path(p).stem}]({p})" for p in images]))  # repo-relative
    if args.benchmarks:
        page = Path(args.benchmarks)
        figures = [f"![{Path(p).stem}]({os.path.relpath(REPO / p, page.resolve().parent)})" for p in images]
        write_section(page, args, modes, "\n".join(lines + figures), run_dates(records))
    return 0


def describe_budget(m: dict) -> str:
    return (
        f"at most {m['train']} train / {m['val']} val / {m['test']} test pairs per language pair (Multi30k: "
        f"test_2016_flickr), {m['steps']} steps x "
        f"batch {m['batch']} (mvpe group: {m['epochs_mvpe']} epochs), lr {m['lr']}, d={m['d_model']}, "
        f"{m['layers']}+{m['layers']} layers, {m['heads']} heads, FFN {m['ffn']}, joint BPE {m['vocab']}, "
        f"beam {m['beams']}"
    )


def write_section(path: Path, args, modes: list[str], body: str, dates: str) -> None:
    """Replace (or append at the end) the `## Reproduction` (or `--section`) section of a benchmark page (e.g.
    docs/benchmarks/pairs.md); nothing else in it changes. Its tables go into the page's results file
    (results/<page>.json beside it) and the page shows them between markers, as `bench/render_tables.py` renders."""
    command = args.command or "python bench/reproduce.py " + " ".join(sys.argv[1:])
    section = getattr(args, "section", None) or "Reproduction"
    header = (
        f"## {section}\n\nGenerated by `bench/reproduce.py`. Mode(s): **{', '.join(modes)}**"
        f" (budget per run: {'; '.join(f'{m}: {describe_budget(MODES[m])}' for m in modes)}). "
        f"Machine: {args.machine or platform.platform()}, "
        f"`OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}`. Date: {dates}.\n\n"
        f"Command:\n\n```bash\n{command}\n```\n\nΔBLEU is the mean over seeds of (run − vanilla of the same seed); "
        "p: sacrebleu paired bootstrap (1000 resamples) against that vanilla run. A gain is called real "
        "only when it is significant in every seed; otherwise it is within noise. Groups not shown here were not "
        f"run in this mode; all groups: `--groups {','.join(GROUPS)}`; modes: `--mode smoke|cpu|gpu` "
        "(gpu: the papers' IWSLT-like d=256, FFN 1024, 2+2 layers).\n\n"
    )
    replace_section_with_results(path, section, header + body.rstrip() + "\n")
