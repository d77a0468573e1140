"""Render every benchmark table from its results file, or check that the pages match them.

    python bench/render_tables.py            # rewrite the tables of BENCHMARKS.md and docs/benchmarks/*.md
    python bench/render_tables.py --check    # exit 1 when a page differs from what its results render

A page marks each table with `<!-- table: TOPIC/NAME -->` ... `<!-- end table -->`; the table between the markers is
rendered from docs/benchmarks/results/TOPIC.json ("tables" -> "TOPIC/NAME": header, alignments, rows). The results
files hold the numbers; the prose around the tables stays prose. `bench/reproduce.py --report --benchmarks PAGE`
writes its tables the same way (markers in the page, rows in results/<page>.json beside it).

A results file's "history" holds the sections that left a page (superseded runs, probes, the full notes of a study):
each entry's "page" and "section", its "text" (markers in place) and the "tables" no page shows any more. History is
not rendered; every table under "tables" must be shown on some page.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.tables import RESULTS_DIR, load_results, render_markers  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs" / "benchmarks"


def pages(repo: Path = REPO) -> list[Path]:
    """The benchmark pages: BENCHMARKS.md and every page under docs/benchmarks/."""
    return [repo / "BENCHMARKS.md", *sorted((repo / "docs" / "benchmarks").glob("*.md"))]


def render(repo: Path = REPO, check: bool = False) -> list[str]:
    """Render (or with `check`, compare) every page; the problems found, one line each (empty: all match)."""
    tables = load_results(repo / "docs" / "benchmarks" / RESULTS_DIR)
    problems, used = [], set()
    for page in pages(repo):
        text = page.read_text(encoding="utf-8")
        rendered, missing = render_markers(text, tables)
        used |= {
            line[len("<!-- table: ") : -len(" -->")] for line in text.splitlines() if line.startswith("<!-- table: ")
        }
        rel = page.relative_to(repo)
        problems += [f"{rel}: table {name} is in no results file" for name in missing]
        if rendered != text:
            if check:
                diff = difflib.unified_diff(
                    text.splitlines(), rendered.splitlines(), str(rel), "rendered", n=0, lineterm=""
                )
                problems.append(f"{rel}: differs from its results\n" + "\n".join(list(diff)[:20]))
            else:
                page.write_text(rendered, encoding="utf-8")
    problems += [f"results: table {name} is shown on no page" for name in sorted(set(tables) - used)]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a page differs")
    args = parser.parse_args(argv)
    problems = render(check=args.check)
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{len(pages())} pages match their results" if args.check else f"{len(pages())} pages rendered")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
