"""`xlpe-compare`'s report: what every run of a comparison scored, and whether a variant beats the first one.

`build_report` reads the finished runs of a comparison (`xlpe.training.compare`): each run's test translations
(`generated_predictions.txt`, and `generated_predictions_oracle.txt` of an XL PE run: the test split decoded with
its oracle positions) scored against the prepared test split's references with BLEU and chrF
(`xlpe.evaluation.metrics.corpus_bleu_chrf`, sacrebleu signatures; the target language picks the BLEU tokenizer),
its dev translations (`OUT/dev/RUN.txt`: the validation split translated by `xlpe-translate`) scored the same way
against the validation split's references, the paired bootstrap of every run against the first variant's run of
the same seed on test and on dev (`paired_significance`) and the project's seed rule over the seeds on test
(`xlpe.evaluation.verdict.seed_rule`). `write_report` writes `report.json`, `report.md` and `report.png` (BLEU
per seed with mean ± std per variant, the plot drawn with matplotlib's Agg canvas).
"""

from __future__ import annotations

import io
import json
import statistics
from pathlib import Path

from ..evaluation.metrics import corpus_bleu_chrf, paired_significance
from ..evaluation.verdict import ALPHA, seed_rule
from ..features.text_files import read_text_lines, write_bytes_atomic, write_text_atomic

RULE = (
    f"a variant is better or worse than the baseline only when the paired bootstrap (same seed, test split) finds "
    f"the difference significant (p < {ALPHA:g}) in every seed, with one sign; otherwise it is within noise"
)


DEV_FOLDER = "dev"  # OUT/dev/RUN.txt: each run's dev translations (xlpe-translate writes nothing inside a model)


def dev_translations(request, variant, seed: int) -> Path:
    """Where the dev translations of `variant`'s run with `seed` go (`xlpe.training.compare.CompareRequest`)."""
    return request.output_dir / DEV_FOLDER / f"{request.run_dir(variant, seed).name}.txt"


def _lines(path: Path) -> list[str]:
    return list(read_text_lines(path))


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}


def split_references(prepared: Path) -> tuple[list[str], list[str] | None, str | None]:
    """(references of the prepared test split, of its validation split (None without one or without its text),
    the target language from the preparation report)."""
    import datasets

    dataset = datasets.load_from_disk(str(prepared))
    test = list(dataset["test"]["target_text"])
    has_dev = "validation" in dataset and "target_text" in dataset["validation"].column_names
    languages = _json(prepared / "report.json").get("train", {}).get("languages", {})
    return test, list(dataset["validation"]["target_text"]) if has_dev else None, languages.get("target")


def dev_scores(path: Path, references: list[str] | None, language: str | None) -> dict:
    """A run's dev translations (`OUT/dev/RUN.txt`, by xlpe-translate) scored like its test translations; {} when
    there are none (no validation split)."""
    if references is None or not path.is_file():
        return {}
    hypotheses = _lines(path)
    if len(hypotheses) != len(references):
        raise ValueError(f"{path}: {len(hypotheses)} lines, the validation split has {len(references)}")
    scores = corpus_bleu_chrf(hypotheses, references, target_language=language)
    return {
        "dev_bleu": scores["bleu"]["score"],
        "dev_chrf": scores["chrf"]["score"],
        "dev_sentences": len(references),
        "dev_bleu_signature": scores["bleu"]["signature"],
        "dev_hypotheses": hypotheses,
    }


def paired_against(hypotheses: list[str], base: list[str], references: list[str], language: str | None) -> dict:
    """The paired bootstrap of `hypotheses` against the baseline's `base` (same seed, same references)."""
    sig = paired_significance(hypotheses, base, references, target_language=language)
    chrf = next(value for key, value in sig["metrics"].items() if key.startswith("chrF"))
    return {
        "bleu_delta": sig["metrics"]["BLEU"]["delta"],
        "bleu_p": sig["metrics"]["BLEU"]["p_value"],
        "chrf_delta": chrf["delta"],
        "chrf_p": chrf["p_value"],
        "test": sig["test"],
    }


def mean_std(values: list[float]) -> dict:
    return {"mean": statistics.mean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}


def run_scores(folder: Path, references: list[str], language: str | None, dev: dict | None = None) -> dict:
    """One finished run: its test scores (and with oracle positions), time, hypotheses, and `dev` (`dev_scores`)."""
    hypotheses = _lines(folder / "generated_predictions.txt")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{folder}/generated_predictions.txt: {len(hypotheses)} lines, the test split has {len(references)}"
        )
    scores = corpus_bleu_chrf(hypotheses, references, target_language=language)
    run = {
        "folder": str(folder),
        "bleu": scores["bleu"]["score"],
        "chrf": scores["chrf"]["score"],
        "bleu_signature": scores["bleu"]["signature"],
        "chrf_signature": scores["chrf"]["signature"],
        **(dev or {}),
        "seconds": _json(folder / "xlpe_elapsed.json").get("seconds"),
        "hypotheses": hypotheses,
    }
    oracle_file = folder / "generated_predictions_oracle.txt"
    if oracle_file.is_file():
        oracle = _lines(oracle_file)
        oracle_scores = corpus_bleu_chrf(oracle, references, target_language=language)
        gap = paired_significance(oracle, hypotheses, references, target_language=language)["metrics"]["BLEU"]
        run["oracle"] = {
            "bleu": oracle_scores["bleu"]["score"],
            "chrf": oracle_scores["chrf"]["score"],
            "bleu_gap": gap["delta"],
            "p_value": gap["p_value"],
        }
    return run


def build_report(request) -> dict:
    """The report of a comparison whose runs are all finished (`xlpe.training.compare.CompareRequest`)."""
    references, dev_references, language = split_references(request.prepared)
    language = language or request.target_lang
    baseline = request.variants[0]
    variants = []
    runs = {
        (v.name, s): run_scores(
            request.run_dir(v, s),
            references,
            language,
            dev_scores(dev_translations(request, v, s), dev_references, language),
        )
        for v, s in request.runs()
    }
    for variant in request.variants:
        rows = []
        for seed in range(1, request.seeds + 1):
            run = dict(runs[variant.name, seed], seed=seed)
            if variant is not baseline:
                base = runs[baseline.name, seed]
                run["against_baseline"] = paired_against(run["hypotheses"], base["hypotheses"], references, language)
                if "dev_hypotheses" in run and "dev_hypotheses" in base:
                    run["dev_against_baseline"] = paired_against(
                        run["dev_hypotheses"], base["dev_hypotheses"], dev_references, language
                    )
            rows.append(run)
        entry = {
            "name": variant.name,
            "flags": list(variant.flags),
            "runs": [{k: v for k, v in run.items() if k not in ("hypotheses", "dev_hypotheses")} for run in rows],
            "bleu": mean_std([r["bleu"] for r in rows]),
            "chrf": mean_std([r["chrf"] for r in rows]),
        }
        if variant is not baseline:
            against = [r["against_baseline"] for r in rows]
            entry["verdict_bleu"] = seed_rule([a["bleu_delta"] for a in against], [a["bleu_p"] for a in against])
            entry["verdict_chrf"] = seed_rule([a["chrf_delta"] for a in against], [a["chrf_p"] for a in against])
        if all("dev_bleu" in r for r in rows):
            entry["dev_bleu"] = mean_std([r["dev_bleu"] for r in rows])
            entry["dev_chrf"] = mean_std([r["dev_chrf"] for r in rows])
        if all("oracle" in r for r in rows):
            entry["oracle_bleu"] = mean_std([r["oracle"]["bleu"] for r in rows])
        variants.append(entry)
    first = runs[baseline.name, 1]
    reorderer = _json(request.reorderer / "reorderer_training.json") if request.needs_reorderer() else {}
    return {
        "baseline": baseline.name,
        "seeds": request.seeds,
        "test_sentences": len(references),
        "dev_sentences": len(dev_references) if dev_references is not None else None,
        "dev_bleu_signature": first.get("dev_bleu_signature"),
        "target_language": language,
        "signatures": {"bleu": first["bleu_signature"], "chrf": first["chrf_signature"]},
        "rule": RULE,
        "variants": variants,
        "reorderer": {
            key: reorderer.get(key)
            for key in ("mean_kendall_tau", "monotone_mean_kendall_tau", "beats_source_order", "held_out_sentences")
        }
        if reorderer
        else None,
        "train_args": list(request.train_args),
    }


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _pm(stats: dict) -> str:
    return f"{stats['mean']:.2f} ± {stats['std']:.2f}"


def markdown(report: dict) -> str:
    """report.md: the table a user reads first, then the per-seed tests and the diagnostics."""
    base = report["baseline"]
    lines = [
        f"# xlpe-compare: {len(report['variants'])} variants, {report['seeds']} seed(s), "
        f"{report['test_sentences']:,} test sentences",
        "",
        f"Rule: {report['rule']}. Baseline: `{base}`.",
        "",
        "| variant | test BLEU | test chrF | ΔBLEU vs baseline | verdict (BLEU) | verdict (chrF) |",
        "|---|---|---|---|---|---|",
    ]
    for v in report["variants"]:
        deltas = [r["against_baseline"]["bleu_delta"] for r in v["runs"] if "against_baseline" in r]
        delta = f"{statistics.mean(deltas):+.2f}" if deltas else "-"
        verdicts = (v["verdict_bleu"]["text"], v["verdict_chrf"]["text"]) if "verdict_bleu" in v else ("baseline",) * 2
        lines.append(
            f"| `{v['name']}` | {_pm(v['bleu'])} | {_pm(v['chrf'])} | {delta} | {verdicts[0]} | {verdicts[1]} |"
        )
    lines += [
        "",
        "## Per seed",
        "",
        "| variant | seed | test BLEU | test chrF | dev BLEU | dev chrF | ΔBLEU (p) | ΔchrF (p) | dev ΔBLEU (p) | "
        "oracle BLEU (gap, p) | time |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in report["variants"]:
        for r in v["runs"]:
            a = r.get("against_baseline")
            sig = (
                (f"{a['bleu_delta']:+.2f} ({a['bleu_p']:.3f})", f"{a['chrf_delta']:+.2f} ({a['chrf_p']:.3f})")
                if a
                else ("-", "-")
            )
            d = r.get("dev_against_baseline")
            dev_sig = f"{d['bleu_delta']:+.2f} ({d['bleu_p']:.3f})" if d else "-"
            o = r.get("oracle")
            oracle = f"{o['bleu']:.2f} ({o['bleu_gap']:+.2f}, {o['p_value']:.3f})" if o else "-"
            dev = [f"{r[k]:.2f}" if isinstance(r.get(k), (int, float)) else "-" for k in ("dev_bleu", "dev_chrf")]
            seconds = duration(r["seconds"]) if r.get("seconds") else "-"
            lines.append(
                f"| `{v['name']}` | {r['seed']} | {r['bleu']:.2f} | {r['chrf']:.2f} | {dev[0]} | {dev[1]} | "
                f"{sig[0]} | {sig[1]} | {dev_sig} | {oracle} | {seconds} |"
            )
    lines += [
        "",
        "ΔBLEU/ΔchrF: against the baseline's run of the same seed, paired bootstrap p (sacrebleu). Oracle BLEU (XL "
        "PE): the test split decoded with its oracle positions (from the word alignments), a diagnostic of what the "
        "test-time positions cost (gap: oracle − predicted); dev: the validation split translated by xlpe-translate "
        "(the model as saved, its generation config), scored the same way (signature below), with its own paired "
        "bootstrap against the baseline (the verdict rests on the test split).",
        "",
    ]
    if report.get("reorderer"):
        r = report["reorderer"]
        tau = r.get("mean_kendall_tau")
        mono = r.get("monotone_mean_kendall_tau")
        if tau is not None and mono is not None:
            lines += [
                f"Reorderer (attached to the XL PE variants): held-out Kendall τ {tau:.3f} against keeping the source "
                f"order {mono:.3f} ({'beats' if r.get('beats_source_order') else 'does not beat'} the source order).",
                "",
            ]
    lines += [
        f"Signatures: `{report['signatures']['bleu']}`; `{report['signatures']['chrf']}`"
        + (f" (dev: `{report['dev_bleu_signature']}`)." if report.get("dev_bleu_signature") else "."),
        "",
        "Flags of every run: `" + (" ".join(report["train_args"]) or "(the recipe's)") + "`; variants:",
        "",
        *[f"- `{v['name']}`: `{' '.join(v['flags'])}`" for v in report["variants"]],
        "",
    ]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> Path:
    """report.png: each variant's test BLEU per seed (dots) with its mean ± std (bar), the verdict under its name."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    variants = report["variants"]
    figure = Figure(figsize=(max(4.0, 1.9 * len(variants) + 1.5), 4.2), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    for index, v in enumerate(variants):
        scores = [r["bleu"] for r in v["runs"]]
        spread = [index + 0.08 * (k - (len(scores) - 1) / 2) for k in range(len(scores))]
        axes.scatter(spread, scores, color="C0", alpha=0.6, zorder=3, label="one seed" if index == 0 else None)
        axes.errorbar(
            index,
            v["bleu"]["mean"],
            yerr=v["bleu"]["std"],
            fmt="_",
            markersize=24,
            capsize=8,
            color="C3",
            zorder=4,
            label="mean ± std" if index == 0 else None,
        )
        axes.annotate(_pm(v["bleu"]), (index + 0.18, v["bleu"]["mean"]), va="center", fontsize=9)
    axes.axhline(variants[0]["bleu"]["mean"], color="gray", linestyle="--", linewidth=1, label="baseline mean")
    labels = []
    for v in variants:
        verdict = v["verdict_bleu"]["outcome"] if "verdict_bleu" in v else "baseline"
        labels.append(f"{v['name']}\n({verdict})")
    axes.set_xticks(range(len(variants)), labels, fontsize=9)
    axes.set_xlim(-0.6, len(variants) - 0.4)
    highest = max(max(r["bleu"] for r in v["runs"]) + v["bleu"]["std"] for v in variants)
    axes.set_ylim(0, max(highest * 1.15, 1.0))  # BLEU is never negative
    axes.set(
        ylabel="test BLEU", title=f"test BLEU over {report['seeds']} seed(s), {report['test_sentences']:,} sentences"
    )
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png")
    return write_bytes_atomic(Path(path), png.getvalue())


def write_report(report: dict, folder: Path, echo=print) -> None:
    """report.json, report.md and report.png in `folder` (without matplotlib: no PNG, one line says so)."""
    write_text_atomic(folder / "report.json", json.dumps(report, indent=2) + "\n")
    write_text_atomic(folder / "report.md", markdown(report))
    try:
        plot(report, folder / "report.png")
        made = ", report.png"
    except ImportError:
        made = " (no report.png: matplotlib is not installed; pip install 'xlpe[eval]')"
    echo(f"xlpe-compare: wrote {folder}/report.md, report.json{made}")
    for v in report["variants"]:
        if "verdict_bleu" in v:
            echo(f"xlpe-compare: {v['name']} vs {report['baseline']}: BLEU {v['verdict_bleu']['text']}")
