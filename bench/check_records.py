"""The records CI checks beside the tests: what the code and the pages were measured on, not what the code does.

    python bench/check_records.py        # exit 1, one line per stale record and the command that refreshes it

A contributor's `pytest` tests behaviour; these checks say whether a recorded measurement or a rendered page still
matches the tree, and `.ci/run` runs them as their own step after the tests:

* speed rows: the hot-path code the speed rows of docs/benchmarks were measured on (`hot_paths.py --check`);
* benchmark tables: every table of BENCHMARKS.md and docs/benchmarks/ rendered from its results file
  (`render_tables.py --check`);
* documentation timings: every `<!-- timing:NAME -->` quote in the README and docs is what `doc_timings.py`
  recorded;
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import doc_timings  # noqa: E402
import hot_paths  # noqa: E402
import render_tables  # noqa: E402


def speed_rows() -> list[str]:
    problem = hot_paths.check()
    return [problem] if problem else []


def benchmark_tables() -> list[str]:
    problems = render_tables.render(check=True)
    return [f"{line} (run `python bench/render_tables.py`)" for line in problems]


def documentation_timings() -> list[str]:
    record, problems = doc_timings.load_record(), []
    for path, name, text in doc_timings.doc_markers():
        if name not in record["entries"]:
            problems.append(f"{path.name}: timing marker {name!r} names nothing bench/doc_timings.py records")
        elif text != doc_timings.render(record, name):
            problems.append(
                f"{path.name}: {name} reads {text!r}, the record gives {doc_timings.render(record, name)!r} "
                "(run `python bench/doc_timings.py update-docs`, or measure again)"
            )
    return problems


CHECKS = {
    "speed rows measured on this code": speed_rows,
    "benchmark tables rendered from their results": benchmark_tables,
    "documentation timings quote their record": documentation_timings,
}


def main(argv: list[str] | None = None) -> int:
    failed = 0
    for name, check in CHECKS.items():
        problems = check()
        print(f"check_records: {'ok' if not problems else 'STALE'}: {name}")
        for problem in problems:
            print(f"  {problem}")
        failed += bool(problems)
    if failed:
        print(f"check_records: {failed} of {len(CHECKS)} records are stale: refresh them as said above")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
