"""The benchmark pages: the check that every table is rendered from its results file (`bench/render_tables.py
--check`; whether they are is `bench/check_records.py`'s step in CI), every relative
link and anchor in BENCHMARKS.md and docs/benchmarks/ resolving, no issue numbers a reader cannot see, and the table
helpers' round trip (a page's tables moved into a results file render back to the same text)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
from benchlib.tables import render_markers, tables_to_markers  # noqa: E402

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def load_renderer():
    spec = importlib.util.spec_from_file_location("render_tables", REPO_ROOT / "bench" / "render_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, -1, -2 for repeats."""
    seen: dict[str, int] = {}
    out, fence = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        if fence or not line.startswith("#"):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower().replace("`", "")).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_a_page_that_drifted_from_its_results_is_reported(tmp_path):
    """Whether the pages match their results is checked by `bench/check_records.py` (CI's own step); here: the
    check on a copy of the pages, rendered, then with one table cell edited by hand."""
    import shutil

    renderer = load_renderer()
    shutil.copy(REPO_ROOT / "BENCHMARKS.md", tmp_path / "BENCHMARKS.md")
    shutil.copytree(REPO_ROOT / "docs" / "benchmarks", tmp_path / "docs" / "benchmarks")
    assert renderer.render(tmp_path) is not None  # renders every page from its results
    assert renderer.render(tmp_path, check=True) == []
    page = tmp_path / "docs" / "benchmarks" / "recipe.md"
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("| 64 | 1.44 |", "| 64 | 9.99 |", 1), encoding="utf-8")
    problems = renderer.render(tmp_path, check=True)
    assert len(problems) == 1 and "recipe.md" in problems[0]


def broken_links(pages, only=None) -> list[str]:
    """Relative links (and their #anchors) of `pages` that do not resolve; `only`: check just the targets it accepts."""
    broken = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        code_free = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in LINK.findall(code_free):
            if re.match(r"[a-z]+:", target) or (only and not only(target)):  # http(s), mailto: not checked here
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(REPO_ROOT)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text(encoding="utf-8")):
                broken.append(f"{page.relative_to(REPO_ROOT)}: {target} (no such heading)")
    return broken


def test_links_and_anchors_resolve():
    assert broken_links(load_renderer().pages()) == []


def test_links_into_the_benchmark_pages_resolve():
    """README, CONTRIBUTING, ARCHITECTURE, docs/*.md and bench/README.md link to the results page and the topics."""
    docs = [REPO_ROOT / n for n in ("README.md", "CONTRIBUTING.md", "ARCHITECTURE.md", "bench/README.md")]
    docs += sorted((REPO_ROOT / "docs").glob("*.md"))
    assert broken_links(docs, only=lambda target: "BENCHMARKS.md" in target or "benchmarks/" in target) == []


def test_no_issue_numbers_and_every_page_stays_short():
    """BENCHMARKS.md and every docs/benchmarks page is what a user reads (the result, its command, its caveats): at
    most 300 lines each. Superseded runs and study notes go to the results file's "history" (bench/render_tables.py)."""
    for page in load_renderer().pages():
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"\bissues? \d+", text, flags=re.I), page
        lines = len(text.splitlines())
        assert lines <= 300, f"{page.relative_to(REPO_ROOT)}: {lines} lines; move its history to its results file"


def test_history_sections_hold_their_tables():
    """A results file's "history" entries name the page and section they left, and every table their text marks is
    held by the entry itself or still shown on a page (so a table never disappears with its section)."""
    renderer = load_renderer()
    shown = set()
    for page in renderer.pages():
        shown |= {m for m in re.findall(r"^<!-- table: (.*) -->$", page.read_text(encoding="utf-8"), flags=re.M)}
    for path in sorted((REPO_ROOT / "docs" / "benchmarks" / "results").glob("*.json")):
        for entry in json.loads(path.read_text(encoding="utf-8")).get("history", []):
            assert (REPO_ROOT / entry["page"]).is_file() and entry["section"] and entry["text"], (path.name, entry)
            for name in re.findall(r"^<!-- table: (.*) -->$", entry["text"], flags=re.M):
                assert name in entry["tables"] or name in shown, (path.name, entry["section"], name)


def test_tables_round_trip_through_results():
    page = (
        "# T\n\n## A section\n\n| run | BLEU | note |\n|---|---:|---|\n| vanilla | 26.79 ± 0.40 | `a|b` |\n"
        "| in | 27.78 |  |\n\n```bash\n| not | a table |\n|---|---|\n```\n\n"
        "### table1 (cpu mode)\n\n| x |\n|---|\n| 1 |\n"
    )
    marked, tables = tables_to_markers(page, "topic")
    assert list(tables) == ["topic/a-section", "topic/table1-cpu-mode"]
    assert tables["topic/a-section"]["rows"][0] == ["vanilla", "26.79 ± 0.40", "`a|b`"]
    assert tables["topic/a-section"]["align"] == ["---", "---:", "---"]
    assert "<!-- table: topic/a-section -->" in marked and "| not | a table |" in marked
    unmarked = re.sub(r"<!-- table: [^>]*-->\n|<!-- end table -->\n", "", marked)
    assert unmarked == page.replace("| in | 27.78 |  |", "| in | 27.78 | |")
    tables["topic/a-section"]["rows"][1][1] = "27.80"
    rendered, missing = render_markers(marked, tables)
    assert missing == [] and "| in | 27.80 | |" in rendered and "27.78" not in rendered
    assert render_markers(marked, {})[1] == ["topic/a-section", "topic/table1-cpu-mode"]


def test_speed_driver_writes_its_tables_into_the_results_file(tmp_path, monkeypatch, capsys):
    """bench/speed.py --results NAME: the report's two tables land in the speed results file as speed/NAME and
    speed/NAME-figures, rendering to what the driver printed."""
    from benchlib import speed_report
    from benchlib.tables import render_table

    monkeypatch.setattr(speed_report, "RESULTS", tmp_path / "speed.json")
    spec = importlib.util.spec_from_file_location("speed", REPO_ROOT / "bench" / "speed.py")
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)
    args = ["--size", "tiny", "--families", "dpe", "--repeats", "2", "--skip-generation", "--no-memory", "--no-plot"]
    speed.main(args + ["--results", "smoke"])
    printed = capsys.readouterr().out
    tables = json.loads((tmp_path / "speed.json").read_text(encoding="utf-8"))["tables"]
    assert set(tables) == {"speed/smoke", "speed/smoke-figures"}
    assert tables["speed/smoke"]["rows"][0][0] == "DPE" and tables["speed/smoke"]["rows"][0][1].startswith("Marian")
    assert render_table(tables["speed/smoke"]) in printed and render_table(tables["speed/smoke-figures"]) in printed
