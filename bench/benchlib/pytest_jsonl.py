"""pytest plugin of `bench/gpu_session.sh tests`: one JSON line per finished test phase that matters (the call,
or a setup that failed or skipped) appended to the file named by $XLPE_JSONL, as each test ends, so a session cut
off by its time limit still brings back what ran. Under pytest-xdist the controller receives every worker's
reports through the same hook. Load with `-p benchlib.pytest_jsonl` (bench/ on PYTHONPATH)."""

from __future__ import annotations

import json
import os


def pytest_runtest_logreport(report):
    path = os.environ.get("XLPE_JSONL")
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):  # a worker: the controller writes its reports
        return
    if report.when != "call" and report.outcome == "passed":
        return  # setup/teardown that passed: the call's line says it
    record = {
        "test": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "seconds": round(report.duration, 3),
    }
    if report.failed:
        record["error"] = str(report.longrepr)[-2000:]
    elif report.skipped and isinstance(report.longrepr, tuple):
        record["reason"] = report.longrepr[2]
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
