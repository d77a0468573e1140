"""The timings and results the README and docs quote, measured on this machine and written where they are quoted.

    python bench/doc_timings.py measure [--runs N] [--demo]        # measure, write bench/doc_timings.json
    python bench/doc_timings.py update-docs                        # write the recorded ranges into the docs

What is measured (start-up quiet, and again with every core busy with another process: a shared machine):

* `help:<command>`: wall seconds of `<command> --help` for every console script, as a new user gets it (a fresh
  `$XDG_CACHE_HOME`: no help cache); `help:any`: all of them together;
* `user_error`: wall seconds of `xlpe-train --sorce_lang en` (a mistyped flag: "did you mean");
* `demo:*` (with `--demo`): the README's main job, `xlpe-train --output_dir DIR` on the built-in corpus, once, on
  the machine as it is (the load average is recorded): wall seconds, test BLEU (predicted positions), validation
  BLEU and the parameter count its model card states; `xlpe-demo` wall seconds.

The docs quote a measurement between the markers `<!-- timing:NAME -->` and `<!-- /timing -->`; the text there is
`render(NAME)`: a range "lo-hi unit" over the recorded runs (quiet and loaded), or the one value when all agree.
`tests/test_doc_timings.py` fails when a marker's text differs from what this script recorded (or names no
recorded measurement), so a number in the docs is always one this script measured; `update-docs` rewrites them.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORD = Path(__file__).with_name("doc_timings.json")
if str(REPO / "bench") not in sys.path:  # benchlib, also when imported by a test
    sys.path.insert(0, str(REPO / "bench"))
from benchlib.machine import cpu_description  # noqa: E402

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MARKER = re.compile(r"<!-- timing:(?P<name>[\w:.-]+) -->(?P<text>.*?)<!-- /timing -->", re.DOTALL)
COMMANDS = (
    "xlpe-prepare",
    "xlpe-train",
    "xlpe-translate",
    "xlpe-evaluate",
    "xlpe-reorder",
    "xlpe-tagger",
    "xlpe-push",
    "xlpe-demo",
)


# ---------------------------------------------------------------------------------------------------------
# Rendering (what the docs say for a recorded measurement)
# ---------------------------------------------------------------------------------------------------------


def render_entry(entry: dict) -> str:
    """The docs' text of a measurement: "lo-hi" over its values (one value when both ends read the same).
    Seconds: "0.3-0.6 s" (one decimal below 10 s), "63-80 s", or minutes from 90 s on ("1.6-3.1 min"); BLEU:
    "97.3-99.1" (the docs say BLEU beside it); parameters: "733,404"."""
    values, unit = [float(v) for v in entry["values"]], entry["unit"]
    low, high = min(values), max(values)
    if unit == "s" and high >= 90:
        ends, suffix = [f"{low / 60:.1f}", f"{high / 60:.1f}"], " min"
    elif unit == "s":
        ends, suffix = [f"{v:.1f}" if high < 10 else f"{v:.0f}" for v in (low, high)], " s"
    elif unit == "parameters":
        ends, suffix = [f"{v:,.0f}" for v in (low, high)], ""
    else:
        ends, suffix = [f"{v:.1f}" for v in (low, high)], ""
    return (ends[0] if ends[0] == ends[1] else f"{ends[0]}-{ends[1]}") + suffix


def render(record: dict, name: str) -> str:
    """The docs' text for measurement `name` of `record` (KeyError: not recorded)."""
    return render_entry(record["entries"][name])


def load_record(path: Path = RECORD) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def doc_markers(paths=DOCUMENTS) -> list[tuple[Path, str, str]]:
    """(document, measurement name, text between the markers) of every timing marker in the docs."""
    return [
        (path, m.group("name"), m.group("text"))
        for path in paths
        for m in MARKER.finditer(path.read_text(encoding="utf-8"))
    ]


def update_docs(record: dict, paths=DOCUMENTS) -> list[Path]:
    """Rewrite every marker's text from `record`; returns the documents changed."""
    changed = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        new = MARKER.sub(
            lambda m: f"<!-- timing:{m.group('name')} -->{render(record, m.group('name'))}<!-- /timing -->", text
        )
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


# ---------------------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def busy_cores(loaded: bool):
    """With `loaded`, one busy-looping process per core for the duration (a machine shared with other work)."""
    workers = []
    if loaded:
        for _ in range(os.cpu_count() or 1):
            workers.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        time.sleep(0.5)
    try:
        yield
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()


def timed(argv: list[str], env: dict, cwd: Path | None = None) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    return time.perf_counter() - started, result


def measure_startup(runs: int, loaded: bool) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {}
    with busy_cores(loaded), tempfile.TemporaryDirectory() as cache:
        for _ in range(runs):
            for command in COMMANDS:
                env = {**os.environ, "XDG_CACHE_HOME": tempfile.mkdtemp(dir=cache)}  # a new user: no help cache
                seconds, result = timed([command, "--help"], env)
                if result.returncode != 0:
                    raise SystemExit(f"{command} --help failed: {result.stderr[-500:]}")
                values.setdefault(f"help:{command}", []).append(seconds)
                values.setdefault("help:any", []).append(seconds)  # every command's, for "every --help in ..."
            seconds, result = timed(
                ["xlpe-train", "--sorce_lang", "en"], {**os.environ, "XDG_CACHE_HOME": tempfile.mkdtemp(dir=cache)}
            )
            if result.returncode != 2 or "did you mean" not in result.stderr:
                raise SystemExit(
                    f"xlpe-train --sorce_lang: expected a 'did you mean' error, got {result.stderr[-500:]}"
                )
            values.setdefault("user_error", []).append(seconds)
    return values


def measure_demo(loaded: bool) -> dict[str, list[float]]:
    """The README's main job on the built-in corpus, and xlpe-demo."""
    with busy_cores(loaded), tempfile.TemporaryDirectory() as work:
        env = {**os.environ, "XLPE_CACHE": str(Path(work) / "cache")}
        seconds, result = timed(["xlpe-train", "--output_dir", str(Path(work) / "demo")], env)
        if result.returncode != 0:
            raise SystemExit(f"xlpe-train --output_dir: {result.stderr[-2000:]}")
        run = Path(work) / "demo"
        predict = json.loads((run / "predict_results.json").read_text())
        evaluation = json.loads((run / "eval_results.json").read_text())
        card = (run / "README.md").read_text(encoding="utf-8")
        parameters = int(re.search(r"\| Parameters \| ([\d,]+) \|", card).group(1).replace(",", ""))
        demo_seconds, demo = timed(["xlpe-demo"], env)
        if demo.returncode != 0:
            raise SystemExit(f"xlpe-demo: {demo.stderr[-2000:]}")
    return {
        "demo:wall": [seconds],
        "demo:test_bleu": [predict["predict_bleu"]],
        "demo:eval_bleu": [evaluation["eval_bleu"]],
        "demo:parameters": [parameters],
        "xlpe-demo:wall": [demo_seconds],
    }


UNITS = {"demo:test_bleu": "BLEU", "demo:eval_bleu": "BLEU", "demo:parameters": "parameters"}


def machine() -> str:
    return f"{cpu_description()}, {platform.system()}, Python {platform.python_version()}"


def _save(values: dict[str, list[float]], notes: list[str]) -> dict:
    """Write what is measured so far (merged into the record: a later phase keeps the earlier ones)."""
    entries = load_record()["entries"] if RECORD.is_file() else {}
    entries.update(
        {
            name: {"values": [round(v, 3) for v in measured], "unit": UNITS.get(name, "s")}
            for name, measured in values.items()
        }
    )
    record = {
        "machine": machine(),
        "measured": datetime.date.today().isoformat(),
        "how": "; ".join(notes),
        "entries": dict(sorted(entries.items())),
    }
    RECORD.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def measure(runs: int, demo: bool) -> dict:
    """Start-up times quiet and with every core busy (written at once), then, with `demo`, the README's main job
    once, on the machine as it is (its load average is recorded beside it)."""
    values: dict[str, list[float]] = {}
    load = os.getloadavg()[0]
    for loaded in (False, True):
        for name, measured in measure_startup(runs, loaded).items():
            values.setdefault(name, []).extend(measured)
    notes = [
        f"help and user_error: {runs} runs each as the machine was (load average {load:.1f}) and {runs} with "
        "every core busy with one more process each, a fresh help cache each"
    ]
    record = _save(values, notes)
    if demo:
        before = os.getloadavg()[0]
        measured = measure_demo(loaded=False)
        notes.append(
            f"demo: one run, load average {before:.1f} before and {os.getloadavg()[0]:.1f} after it (2 "
            "cores; other work on the machine)"
        )
        record = _save(measured, notes)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("measure", help="measure and write bench/doc_timings.json")
    run.add_argument("--runs", type=int, default=2, help="start-up measurements per command and load (default 2)")
    run.add_argument(
        "--demo",
        action="store_true",
        help="also time the README's main job (about 20 minutes on 2 "
        "cores) and xlpe-demo; otherwise the recorded ones are kept",
    )
    sub.add_parser("update-docs", help="write the recorded ranges between the docs' timing markers")
    args = parser.parse_args(argv)
    if args.command == "measure":
        print(json.dumps(measure(args.runs, args.demo), indent=2))
    else:
        for path in update_docs(load_record()):
            print(f"updated {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
