"""bench/reproduce.py end to end in smoke mode: vanilla + Combination on a few hundred Multi30k pairs, one seed,
a few steps; the JSON lines file has both runs with BLEU/chrF and their sacrebleu signatures, a second call
skips them (resumable), and the report writes a table into the `## Reproduction` section of a BENCHMARKS.md."""

from __future__ import annotations

import importlib.util
import json
import os

from conftest import REPO_ROOT


def load_driver():
    spec = importlib.util.spec_from_file_location("reproduce", REPO_ROOT / "bench" / "reproduce.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reproduce_smoke_vanilla_vs_combination(tmp_path, shared_dir, monkeypatch, capsys):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("XLPE_SHARED_DIR", str(shared_dir))
    driver = load_driver()
    work = tmp_path / "work"
    benchmarks = tmp_path / "BENCHMARKS.md"
    benchmarks.write_text("# Benchmarks\n\n## Speed\n\nkept as it is\n")
    common = ["--mode", "smoke", "--groups", "xl-combination", "--seeds", "1", "--work_dir", str(work)]

    assert driver.main(common) == 0
    records = [json.loads(line) for line in (work / "results.jsonl").read_text().splitlines()]
    assert [r["name"] for r in records] == ["vanilla", "combination"]
    for record in records:
        assert 0.0 <= record["bleu"] <= 100.0 and 0.0 <= record["chrf"] <= 100.0
        assert record["bleu_signature"].startswith("nrefs:1|") and "tok:13a" in record["bleu_signature"]
        assert record["chrf_signature"].startswith("nrefs:1|")
        assert record["mode"] == "smoke" and record["seed"] == 1 and os.path.isfile(record["hypotheses"])

    capsys.readouterr()
    assert driver.main(common + ["--report", "--run", "--benchmarks", str(benchmarks), "--plot_dir", str(tmp_path)]) == 0
    assert "skip (already in results.jsonl)" in capsys.readouterr().out  # resumable: nothing retrained
    assert len((work / "results.jsonl").read_text().splitlines()) == 2
    text = benchmarks.read_text()
    assert text.startswith("# Benchmarks\n\n## Speed\n\nkept as it is\n")  # only the new section is touched
    section = text[text.index("## Reproduction"):]
    assert "### xl-combination (smoke mode)" in section and "| combination | de-en | 1 |" in section
    assert "Mode(s): **smoke**" in section and "2026-11-20" in section
