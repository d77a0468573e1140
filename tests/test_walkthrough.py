"""README's "Your own data" walkthrough, run line by line as written on a Multi30k slice (120/12/12 pairs): each
command through its console-script entry point, with only size flags appended (a tiny model, a few steps), the
push against a local Hub endpoint, and the received folder translated in a process that cannot import xlpe. The
section's closing `xlpe-compare` line runs the same way: 2 variants x 2 seeds, then again (every run reused)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import warnings

import pytest
from conftest import REPO_ROOT, TINY_MODEL_ARGS, write_multi30k_slice
from local_hub import FRESH_PROCESS_SCRIPT, local_hub_endpoint

from xlpe.cli import compare, evaluate, prepare, push, reorder, train, translate

ENTRY_POINTS = {
    "xlpe-prepare": prepare.main,
    "xlpe-train": train.cli,
    "xlpe-reorder": reorder.main,
    "xlpe-translate": translate.main,
    "xlpe-evaluate": evaluate.main,
    "xlpe-push": push.main,
}
SIZE_FLAGS = {  # appended to the README's lines: sizes only, every data/tokenizer/language choice is the README's
    "xlpe-train": [
        *TINY_MODEL_ARGS,
        "--max_steps",
        "4",
        "--eval_steps",
        "2",
        "--save_steps",
        "2",
        "--average_last_checkpoints",
        "2",
        "--max_tokens",
        "400",
        "--val_max_target_length",
        "8",
        "--num_translation_examples",
        "0",
        "--report_to",
        "none",
    ],
    "xlpe-reorder train": [
        "--epochs",
        "1",
        "--d-model",
        "32",
        "--token-layers",
        "1",
        "--word-layers",
        "1",
        "--batch-size",
        "16",
    ],
    "xlpe-translate": ["--quiet", "--max_new_tokens", "8"],
}
REPO_ID = "your-name/xlpe-de-en"


def walkthrough_lines() -> list[list[str]]:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Your own data", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1).replace("\\\n", " ")
    return [shlex.split(line.split("  #")[0]) for line in block.splitlines() if line.strip()]


def test_walkthrough_has_every_step():
    programs = [" ".join(argv[:2]) if argv[0] == "xlpe-reorder" else argv[0] for argv in walkthrough_lines()]
    assert programs == [
        "xlpe-prepare",
        "xlpe-train",
        "xlpe-reorder train",
        "xlpe-reorder attach",
        "xlpe-translate",
        "xlpe-evaluate",
        "xlpe-push",
    ]


def test_readme_walkthrough_from_raw_text_to_a_shared_model(tmp_path, monkeypatch, capsys):
    write_multi30k_slice(tmp_path)
    monkeypatch.chdir(tmp_path)
    outputs = {}
    with warnings.catch_warnings(), local_hub_endpoint(tmp_path / "hub") as hub:
        warnings.simplefilter("ignore")  # the tokenizer trainer warns: 8000 pieces asked of 120 pairs
        for argv in walkthrough_lines():
            program = " ".join(argv[:2]) if argv[0] == "xlpe-reorder" else argv[0]
            extra = SIZE_FLAGS.get(program, [])
            capsys.readouterr()
            assert ENTRY_POINTS[argv[0]](argv[1:] + extra) == 0, f"{program} failed: {capsys.readouterr().err[-2000:]}"
            outputs[program] = capsys.readouterr()
        received = hub.repo_dir(REPO_ID)
    assert "xlpe-train: recipe tiny (" in outputs["xlpe-train"].out  # chosen for the data size (120 pairs) and the CPU
    card = (tmp_path / "runs" / "de-en" / "README.md").read_text()
    # the run's scores were measured with the built-in predictor; after `xlpe-reorder attach` they are not the
    # shipped model's: the card says so and keeps them out of its model-index
    assert "**These scores are not the shipped model's**" in card and "model-index:" not in card
    assert "not the encoder's built-in predictor" in card
    assert "trust_remote_code=True" in card and (tmp_path / "runs" / "de-en" / "averaged_checkpoints.json").is_file()
    config = json.loads((tmp_path / "runs" / "de-en" / "config.json").read_text())
    assert config["reorderer_config"]["model_type"] == "xlpe_reorderer"  # attached: it supplies test-time positions
    hypotheses = (tmp_path / "hyp.en").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == 12
    scores = json.loads(outputs["xlpe-evaluate"].out)
    assert "nrefs:1" in scores["bleu"]["signature"] and "tok:13a" in scores["bleu"]["signature"]
    assert (received / "README.md").is_file() and (received / "modeling_xlpe.py").is_file()
    sentence = (tmp_path / "test.de").read_text(encoding="utf-8").splitlines()[0]
    fresh = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS_SCRIPT, str(received), sentence],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert json.loads(fresh.stdout.strip().splitlines()[-1])["result"][0]["translation_text"] is not None


def compare_line() -> list[str]:
    """The README's `xlpe-compare` command: the last bash block of the "Your own data" section."""
    section = (REPO_ROOT / "README.md").read_text(encoding="utf-8").split("## Your own data", 1)[1].split("\n## ", 1)[0]
    block = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)[-1].replace("\\\n", " ")
    (line,) = [line for line in block.splitlines() if line.strip()]
    return shlex.split(line.split("  #")[0])


COMPARE_SIZE_FLAGS = [  # sizes only: the README's data, languages and default variants
    "--seeds",
    "2",
    "--train_args",
    shlex.join(SIZE_FLAGS["xlpe-train"]),
    "--reorder_args",
    shlex.join(SIZE_FLAGS["xlpe-reorder train"]),
]


@pytest.mark.parametrize("probe_steps", [0, pytest.param(3, marks=pytest.mark.slow)])
def test_readme_compare_line_on_a_slice(tmp_path, monkeypatch, capsys, probe_steps):
    argv = compare_line()
    assert argv[0] == "xlpe-compare" and "--output_dir" in argv
    write_multi30k_slice(tmp_path)
    monkeypatch.chdir(tmp_path)
    flags = argv[1:] + COMPARE_SIZE_FLAGS + ["--probe_steps", str(probe_steps)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tokenizer trainer warns: 8000 pieces asked of 120 pairs
        assert compare.main(flags + ["--dry_run"]) == 0
        assert not (tmp_path / "runs" / "compare").exists()  # a dry run writes nothing
        assert compare.main(flags) == 0, capsys.readouterr().err[-2000:]
        out = capsys.readouterr().out
        folder = tmp_path / "runs" / "compare"
        report = json.loads((folder / "report.json").read_text())
        assert [v["name"] for v in report["variants"]] == ["vanilla", "xlpe-combination"]
        vanilla, xl = report["variants"]
        assert [r["seed"] for r in xl["runs"]] == [1, 2] and report["test_sentences"] == 12
        assert all("against_baseline" in r and "oracle" in r for r in xl["runs"])  # XL PE: oracle positions too
        assert report["dev_sentences"] > 0 and all(r["dev_sentences"] == report["dev_sentences"] for r in xl["runs"])
        assert all("dev_against_baseline" in r for r in xl["runs"])  # dev translated, scored, bootstrapped too
        assert xl["verdict_bleu"]["seeds"] == 2 and "nrefs:1" in report["signatures"]["bleu"]
        config = json.loads((folder / "runs" / "xlpe-combination-seed1" / "config.json").read_text())
        assert config["reorderer_config"]["model_type"] == "xlpe_reorderer"  # the comparison's reorderer, attached
        assert "xlpe_reorderer" not in (folder / "runs" / "vanilla-seed1" / "config.json").read_text()
        assert (folder / "report.png").read_bytes().startswith(b"\x89PNG") and "| `vanilla` |" in (
            folder / "report.md"
        ).read_text()
        assert ("xlpe-compare: estimate: about" in out) == bool(probe_steps)  # the estimate comes from the probes
        if probe_steps:  # an interrupted run: resumed from its checkpoint, the others reused
            (folder / "runs" / "vanilla-seed2" / "test_scores.json").unlink()
        assert compare.main(flags) == 0, capsys.readouterr().err[-2000:]
        out = capsys.readouterr().out
    assert ("runs: 3 finished, 1 resume" if probe_steps else "runs: 4 finished") in out
    translated = [line for line in out.splitlines() if line.startswith("xlpe-compare: dev ") and line.endswith("done")]
    assert translated == (["xlpe-compare: dev vanilla-seed2: done"] if probe_steps else [])  # only a retrained run's
    assert "xlpe-compare: xlpe-combination vs vanilla: BLEU" in out
