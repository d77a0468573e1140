"""Markdown helpers shared by the drivers: mean ± std over seeds, the dates runs finished, replacing one
`## Section` of a benchmark page while leaving every other section as it is, and the tables of the benchmark pages
rendered from their results files (docs/benchmarks/results/*.json; `bench/render_tables.py`)."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path


def mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} ± {std:.2f}"


def run_dates(records: list[dict]) -> str:
    """First and last day the runs finished (records written before dates were kept: their hypotheses file's)."""
    days = sorted(
        {r.get("date") or time.strftime("%Y-%m-%d", time.localtime(os.path.getmtime(r["hypotheses"]))) for r in records}
    )
    return days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"


def replace_section(path: Path, heading: str, section: str) -> None:
    """Replace the `## heading` section of the Markdown file `path` by `section` (which starts with that
    heading), or append it at the end; nothing else in the file changes. Re-reads the file just before editing."""
    text = path.read_text(encoding="utf-8")
    start = text.find(f"\n## {heading}\n")  # the whole heading line: "## Reproduction" is not "## Reproduction: ..."
    if start == -1:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + 1)
        text = text[: start + 1] + section + (text[end:] if end != -1 else "")
    path.write_text(text, encoding="utf-8")


# ---------------------------------------------------------------------------------------------------------
# Tables rendered from results files
# ---------------------------------------------------------------------------------------------------------
#
# A benchmark page holds each table between two markers, `<!-- table: TOPIC/NAME -->` and `<!-- end table -->`;
# what lies between them is rendered from docs/benchmarks/results/TOPIC.json (its "tables"[TOPIC/NAME]: the
# header, the column alignments and the rows, cell by cell). `bench/render_tables.py` rewrites the pages from the
# results files, and `--check` fails when a page differs from what its results render.

TABLE_START = "<!-- table: {} -->"
TABLE_END = "<!-- end table -->"
RESULTS_DIR = "results"  # beside the pages: docs/benchmarks/results/<topic>.json


def split_row(line: str) -> list[str]:
    """The cells of one Markdown table row (`|` inside backticks or escaped as `\\|` does not split)."""
    cells, cell, code = [], "", False
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cell += "\\|"
            i += 2
            continue
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += ch
        i += 1
    cells.append(cell.strip())
    return cells


def render_table(table: dict) -> str:
    """A results-file table as Markdown: the header, the alignment row (`---`, `---:`, ...) and the rows."""

    def line(cells: list[str]) -> str:
        return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"

    lines = [line(table["header"]), "|" + "|".join(table["align"]) + "|"]
    for row in table_rows(table):
        if len(row) != len(table["header"]):
            raise ValueError(f"a row of {len(row)} cells under {len(table['header'])} columns: {row}")
        lines.append(line(row))
    return "\n".join(lines)


# A results-file table either lists its rows or names the benchmark output they are read from: "source":
# {"file": "bench/onnx_speed_trained.json", "view": "onnx-by-model"} renders the rows from that file as the view
# formats them, so the page shows what the benchmark wrote, not a copy of it.

REPO_ROOT = Path(__file__).resolve().parents[2]


def _minus(value: float) -> str:
    return f"{value:+.2f}".replace("-", "−")


def _rate(value: float) -> str:
    """Sentences per second: a decimal below 100 (an OPUS-MT-size model on one core runs a few a second)."""
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _onnx_engines(data: dict) -> list[list[str]]:
    """bench/onnx_speed.py's output, one row per model and engine (no BLEU for a randomly initialised model)."""
    untrained = {name.split("=")[0] for name in data.get("random_init", ())}  # "dpe=DIR"
    return [
        [
            r["model"],
            r["engine"],
            _rate(r["sentences_per_s"]),
            f"{r['speedup_vs_own_pytorch']:.2f}",
            f"{r['ratio_vs_baseline_same_engine']:.2f}",
            *(
                ["n/a (random init)", "—"]
                if r["model"] in untrained
                else [f"{r['bleu']:.2f}", f"{r['bleu_change_vs_pytorch']:+.2f}"]
            ),
            f"{100 * r['identical_to_pytorch']:.1f}%",
        ]
        for r in data["rows"]
    ]


def _onnx_by_model(data: dict) -> list[list[str]]:
    """bench/onnx_speed.py's output, one row per model: PyTorch, ONNX fp32 and int8 side by side."""
    rows = []
    for model in dict.fromkeys(r["model"] for r in data["rows"]):
        by = {r["engine"]: r for r in data["rows"] if r["model"] == model}
        py, fp32, int8 = by["pytorch"], by["onnx-fp32"], by["onnx-int8"]
        ratios = " / ".join(f"{r['ratio_vs_baseline_same_engine']:.2f}" for r in (py, fp32, int8))
        rows.append(
            [
                f"{model} (stock)" if model == "marian" else model,
                *(_rate(r["sentences_per_s"]) for r in (py, fp32, int8)),
                f"{fp32['speedup_vs_own_pytorch']:.2f}",
                f"{int8['speedup_vs_own_pytorch']:.2f}",
                ratios,
                _minus(int8["bleu_change_vs_pytorch"]),
                f"{100 * fp32['identical_to_pytorch']:.0f} %",
            ]
        )
    return rows


ENGINE_LABELS = {
    "pytorch": "PyTorch `generate`",
    "onnx-fp32": "`xlpe-export` ONNX fp32",
    "onnx-int8": "`xlpe-export` ONNX int8",
    "ctranslate2-fp32": "CTranslate2 fp32",
    "ctranslate2-int8": "CTranslate2 int8",
}
CTRANSLATE2_HEADER = [
    "engine",
    "sentences/s",
    "target tokens/s",
    "× CTranslate2, same precision",
    "BLEU",
    "same tokens as PyTorch",
    "MiB loaded",
    "MiB peak",
]


def _ctranslate2_engines(data: dict) -> list[list[str]]:
    """bench/onnx_speed.py --ctranslate2's output for the baseline model, one row per engine (CTRANSLATE2_HEADER):
    target tokens/s only under --fixed_new_tokens, BLEU only for a model that translates (not at a fixed length),
    memory only with --memory."""
    baseline = data["rows"][0]["model"]
    by = {r["engine"]: r for r in data["rows"] if r["model"] == baseline}
    fixed = data.get("fixed_new_tokens")
    rows = []
    for engine, r in by.items():
        label = ENGINE_LABELS[engine] + (f" (`{data['int8_scheme']}`)" if engine == "onnx-int8" else "")
        precision = engine.rsplit("-", 1)[-1]
        reference = by.get(f"ctranslate2-{precision}")
        if engine == "pytorch" or reference is None:
            versus = "—"
        elif engine.startswith("ctranslate2"):
            versus = "1"
        else:
            versus = f"{r['sentences_per_s'] / reference['sentences_per_s']:.2f}"
        rows.append(
            [
                label,
                f"{r['sentences_per_s']:.2f}",
                f"{r['sentences_per_s'] * fixed:.0f}" if fixed else "—",
                versus,
                "—" if fixed else f"{r['bleu']:.2f}",
                "—" if engine == "pytorch" else f"{round(r['identical_to_pytorch'] * r['sentences'])}/{r['sentences']}",
                f"{r['load_rss_mib']:.0f}" if "load_rss_mib" in r else "—",
                f"{r['peak_rss_mib']:.0f}" if "peak_rss_mib" in r else "—",
            ]
        )
    return rows


VIEWS = {"onnx-engines": _onnx_engines, "onnx-by-model": _onnx_by_model, "ctranslate2-engines": _ctranslate2_engines}


def table_rows(table: dict) -> list[list[str]]:
    """The rows of a results-file table: its own, or those its "source" benchmark output renders to."""
    if "source" not in table:
        return table["rows"]
    import json

    source = table["source"]
    data = json.loads((REPO_ROOT / source["file"]).read_text(encoding="utf-8"))
    return VIEWS[source["view"]](data)


def parse_table(lines: list[str]) -> dict:
    """The inverse of `render_table`, for a table written by hand or by a report (header, alignment row, rows)."""
    return {
        "header": split_row(lines[0]),
        "align": [c.strip() for c in lines[1].strip().strip("|").split("|")],
        "rows": [split_row(line) for line in lines[2:]],
    }


def slug(title: str) -> str:
    text = "".join(c if c.isalnum() else "-" for c in title.lower())
    return "-".join(part for part in text.split("-") if part)[:48].strip("-") or "table"


def tables_to_markers(text: str, topic: str, taken: set[str] | None = None) -> tuple[str, dict[str, dict]]:
    """Every Markdown table of `text` (outside code blocks and markers) moved into a results dict and replaced by
    its markers with the same table rendered between them: the text reads the same, the numbers live in the dict.
    Table names come from the heading above each table (`-2`, `-3`, ... when a heading has several)."""
    taken = set() if taken is None else taken
    lines, out, tables = text.split("\n"), [], {}
    heading, section, fence, i = topic, topic, False, 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("#"):
            heading = line.lstrip("#").strip()
            section = heading if line.startswith("## ") else section
        is_table = (
            not fence
            and line.startswith("|")
            and i + 1 < len(lines)
            and lines[i + 1].startswith("|")
            and set(lines[i + 1].replace("|", "").replace(":", "").strip()) == {"-"}
            and not (out and out[-1].startswith("<!-- table:"))
        )
        if not is_table:
            out.append(line)
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].startswith("|"):
            j += 1
        name = f"{topic}/{slug(heading)}"
        if (name in taken or name in tables) and section != heading:  # "### table1 (cpu mode)" under each pair
            name = f"{topic}/{slug(section)}--{slug(heading)}"
        base, n = name, 2
        while name in taken or name in tables:
            name, n = f"{base}-{n}", n + 1
        tables[name] = {"title": heading, **parse_table(lines[i:j])}
        out += [TABLE_START.format(name), render_table(tables[name]), TABLE_END]
        i = j
    return "\n".join(out), tables


def render_markers(text: str, tables: dict[str, dict]) -> tuple[str, list[str]]:
    """`text` with every marked table rendered again from `tables`; and the marker names with no table."""
    out, missing, pos = [], [], 0
    while True:
        start = text.find("<!-- table: ", pos)
        if start == -1:
            out.append(text[pos:])
            break
        head_end = text.index("-->", start) + 3
        name = text[start + len("<!-- table: ") : head_end - 3].strip()
        end = text.find(TABLE_END, head_end)
        if end == -1:
            raise ValueError(f"table {name}: no {TABLE_END}")
        out.append(text[pos:head_end])
        if name in tables:
            out.append("\n" + render_table(tables[name]) + "\n")
        else:
            missing.append(name)
            out.append(text[head_end:end])
        pos = end
    return "".join(out), missing


def load_results(results_dir: Path) -> dict[str, dict]:
    """Every table of every results file in `results_dir` ({"TOPIC/NAME": table})."""
    import json

    tables = {}
    for path in sorted(Path(results_dir).glob("*.json")):
        tables.update(json.loads(path.read_text(encoding="utf-8")).get("tables", {}))
    return tables


def write_results(path: Path, tables: dict[str, dict], drop: set[str] = frozenset()) -> None:
    """Merge `tables` into the results file `path`, after dropping its tables named in `drop`."""
    import json

    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"tables": {}}
    data["tables"] = {k: v for k, v in data["tables"].items() if k not in drop}
    data["tables"].update(tables)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def marker_names(text: str) -> set[str]:
    return {line[len("<!-- table: ") : -len(" -->")] for line in text.splitlines() if line.startswith("<!-- table: ")}


def replace_section_with_results(path: Path, heading: str, section: str) -> None:
    """`replace_section`, with the section's tables moved into the page's results file (results/<page stem>.json
    beside the page, under "<page stem>/<name>"): the tables the old section showed are dropped from it, the new
    ones written, and the page shows them between markers, rendered as `bench/render_tables.py` renders them."""
    import json

    results = path.parent / RESULTS_DIR / f"{path.stem}.json"
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    start = text.find(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1) if start != -1 else -1
    old = marker_names(text[start : end if end != -1 else len(text)]) if start != -1 else set()
    kept = set(json.loads(results.read_text(encoding="utf-8"))["tables"]) - old if results.is_file() else set()
    marked, tables = tables_to_markers(section, path.stem, taken=kept)
    write_results(results, tables, drop=old)
    replace_section(path, heading, marked)
