"""bench/gpu_session.sh: the dry run executes the GPU run's command lines with only the sizes changed,
setup fails loudly when a wheel does not install or the intended transformers is not the one imported, and (slow,
RUN_SLOW=1) the whole dry run passes end to end on the CPU with a JSON line per finished run or row."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "bench" / "gpu_session.sh"


def session(*args, env=None, timeout=60):
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def commands(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("$ timeout")]


def test_the_dry_run_runs_the_gpu_command_lines_with_tiny_sizes(tmp_path):
    gpu = session("--print", "all", env={"OUT": str(tmp_path / "gpu")})
    dry = session("--print", "all", env={"OUT": str(tmp_path / "dry"), "PRINT_AS": "dry"})
    assert gpu.returncode == dry.returncode == 0, gpu.stderr + dry.stderr
    gpu_lines, dry_lines = commands(gpu.stdout), commands(dry.stdout)
    assert len(gpu_lines) == len(dry_lines) >= 8  # tests, 3 eager rows, 4 compiled rows, 2 train runs

    def program(line):  # the command with the sizes, devices and paths taken out: what must be the same
        line = re.sub(
            r"--(device|size|compile-backend) \S+|XLPE_TEST_\w+=\S+|--repeats.*--no-memory|/tmp/\S+", "", line
        )
        line = re.sub(
            r"--prepared_dataset \S+|--recipe base|--max_train_samples \d+|--max_steps \d+|--logging_steps \S+",
            "",
            line,
        )
        line = re.sub(r"--d_model.*--tokenizer_vocab_size \d+", "", line)
        return re.sub(r"timeout \d+|--time-budget \d+|--warmup-max-s \d+|\s+", " ", line).strip()

    assert [program(line) for line in gpu_lines] == [program(line) for line in dry_lines]
    assert (
        "--device cuda --dtype bfloat16 --size base" in gpu.stdout
        and "--device cpu --dtype bfloat16 --size tiny" in dry.stdout
    )
    assert "--compile-backend inductor" in gpu.stdout and "--compile-backend aot_eager" in dry.stdout
    for line in gpu_lines:  # every command has a hard limit inside the stage's 420 s
        assert 0 < int(line.split()[2]) <= 420
    bad = session("--print", "nonsense", env={"OUT": str(tmp_path / "bad")})
    assert bad.returncode == 2 and "unknown stage 'nonsense'" in bad.stderr


def test_setup_installs_wheels_one_by_one_and_fails_loudly(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "transformers-9.9.9-cp399-cp399-manylinux_2_17_x86_64.whl").write_bytes(b"not for this python")
    result = session(
        "setup",
        env={
            "OUT": str(tmp_path / "out"),
            "XLPE_WHEEL_DIRS": str(wheels),
            "XLPE_SITE": str(tmp_path / "site"),
            "XLPE_TRANSFORMERS": "9.9.9",
        },
    )
    assert result.returncode == 1, result.stdout
    assert "FAILED: " + str(wheels / "transformers-9.9.9") in result.stdout
    assert "not 9.9.9" in result.stdout and "FAILED: stage setup" in result.stdout
    records = [json.loads(line) for line in (tmp_path / "out" / "setup.jsonl").read_text().splitlines()]
    assert records[0]["status"] == "failed" and records[-1] == {
        **records[-1],
        "check": "transformers",
        "status": "failed",
    }


@pytest.mark.skipif(os.environ.get("RUN_SLOW") != "1", reason="slow (~3 min on 2 quiet cores): set RUN_SLOW=1")
def test_the_whole_dry_run_passes_end_to_end(tmp_path):
    result = session("--dry-run", "all", env={"OUT": str(tmp_path)}, timeout=1800)
    assert result.returncode == 0, result.stdout[-4000:]
    for stage in ("tests", "bench", "bench-compiled", "bench-compiled-others", "train"):
        lines = [json.loads(line) for line in (tmp_path / f"{stage}.jsonl").read_text().splitlines()]
        assert lines, stage
    train = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert [run["run"] for run in train] == ["vanilla", "xlpe"] and all(run["log"] for run in train)
    bench = [json.loads(line) for line in (tmp_path / "bench.jsonl").read_text().splitlines()]
    assert len(bench) == 3 and all(row["status"] == "ok" and row["result"] for row in bench)


def test_the_one_call_session_fits_its_total_and_dry_runs_the_same_commands(tmp_path):
    gpu = session("--print", "session", env={"OUT": str(tmp_path / "gpu")})
    dry = session("--print", "session", env={"OUT": str(tmp_path / "dry"), "PRINT_AS": "dry"})
    assert gpu.returncode == dry.returncode == 0, gpu.stderr + dry.stderr
    gpu_lines, dry_lines = commands(gpu.stdout), commands(dry.stdout)
    assert len(gpu_lines) == len(dry_lines)
    stages = [line for line in gpu.stdout.splitlines() if line.startswith("== ") and not line.endswith(" s")]
    assert stages == ["== setup", "== tests", "== bench", "== train", "== quality"]
    # one speed.py call for every family; one xlpe-train run; the base-size quality runs on the carried data
    assert sum("bench/speed.py" in line for line in gpu_lines) == 1
    assert "--families xlpe,dpe,mvpe_pos --rows XL PE in;" in gpu.stdout
    assert sum("xlpe.cli.train" in line for line in gpu_lines) == 1
    assert "reproduce.py --mode base --groups base-gpu --seeds 1 --work_dir .gpu_data/repro" in gpu.stdout
    assert "reproduce.py --mode smoke --groups base-gpu" in dry.stdout
    # the stages' own limits (not the 420 s of one stage a call) add up inside the session's total
    limits = [int(line.split()[2]) for line in gpu_lines if "pip install" not in line]
    assert max(limits[:-1]) <= 100 and limits[-1] <= 510


def test_the_gpu_report_renders_the_stored_session_as_the_page_shows(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_report", REPO_ROOT / "bench" / "gpu_report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    stored = REPO_ROOT / "docs" / "benchmarks" / "results"
    target = tmp_path / "gpu.json"
    assert report.main([str(stored / "gpu-2026-11-28"), "--collected", "55", "--results", str(target)]) == 0
    assert json.loads(target.read_text()) == json.loads((stored / "gpu.json").read_text())
    rows = json.loads(target.read_text())["tables"]["gpu/quality"]["rows"]
    assert [row[0] for row in rows] == ["vanilla", "combination"] and rows[1][4] == "18.36"


@pytest.mark.skipif(os.environ.get("RUN_SLOW") != "1", reason="slow (~2 min on 2 quiet cores): set RUN_SLOW=1")
def test_the_whole_session_dry_run_passes_end_to_end(tmp_path):
    result = session("--dry-run", "session", env={"OUT": str(tmp_path)}, timeout=1800)
    quality = [json.loads(line) for line in (tmp_path / "quality.jsonl").read_text().splitlines()]
    assert [run["name"] for run in quality] == ["vanilla", "combination", "xl-rope-all", "rope"], result.stdout[-4000:]
    assert all("bleu" in run for run in quality) and "oracle_bleu" in quality[1]
    train = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert [run["run"] for run in train] == ["xlpe"] and train[0]["log"]


def test_the_news_stage_runs_the_walkthrough_recipe_then_more_passes(tmp_path):
    """The news stage: `xlpe-train` on the prepared news walk-through, the recipe as a user gets it first, then
    more passes; the dry run gives the same command lines at tiny sizes."""
    gpu = commands(session("--print", "news", env={"OUT": str(tmp_path / "gpu")}).stdout)
    dry = commands(session("--print", "news", env={"OUT": str(tmp_path / "dry"), "PRINT_AS": "dry"}).stdout)
    assert len(gpu) == len(dry) == 3
    assert "--prepared_dataset .gpu_data/news --model_type xlpe --report_to none" in gpu[0]  # no flag: the recipe
    assert "--num_train_epochs 60" in gpu[1] and "--num_train_epochs 60 --dropout 0.3" in gpu[2]
    assert all("--max_steps 4" in line and "--max_train_samples 256" in line for line in dry)
