"""Sharded preparation (xlpe.features.sharded, `xlpe-prepare --shard-size/--stage`): the same dataset as one in-memory
preparation, however it is run (one process, resumed after a kill, shards as concurrent jobs, the Slurm array script);
merged reports; refusals that name what is wrong. A synthetic corpus with exact Pharaoh links makes the comparison exact
(and a seeded eflomal run is compared whole); the eflomal paths (whole-corpus alignment in the plan, priors for a larger
corpus) are checked for what they must produce."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import datasets
import pytest
from conftest import REPO_ROOT

from xlpe.features import sharded
from xlpe.features.prepare import prepare_splits, read_parallel_files
from xlpe.features.synthetic import generate_corpus

TOKENIZER = {"vocab_size": 300, "model": "bpe"}
OPTIONS = dict(
    keep_text=True, noise_ratio=0.1, seed=3
)  # text columns and the line-seeded noise attack: both must survive sharding
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    """train (1,300 pairs, one empty source, one over-long pair) and validation (90 pairs), with exact links."""
    folder = tmp_path_factory.mktemp("corpus")
    files = {}
    for split, (size, seed) in {"train": (1300, 1), "validation": (90, 2)}.items():
        sources, targets, links = generate_corpus(size, seed=seed)
        if split == "train":
            sources[7], links[7] = "", ""  # skipped and counted: empty source
            sources[900] = " ".join(["word"] * 300)  # over-long
            links[900] = " ".join(f"{i}-0" for i in range(300))
        files[split] = {}
        for side, lines in (("source", sources), ("target", targets), ("alignments", links)):
            path = folder / f"{split}.{side}"
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            files[split][side] = str(path)
    return files


def unsharded(files: dict, tokenizer) -> tuple[dict, dict]:
    splits = {name: read_parallel_files(f["source"], f["target"], f["alignments"]) for name, f in files.items()}
    return prepare_splits(splits, tokenizer, **OPTIONS)


def assert_same_dataset(left, right) -> None:
    assert left.column_names == right.column_names
    assert len(left) == len(right)
    for column in left.column_names:
        assert left[column] == right[column], column


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    """One uninterrupted sharded run (shards of 400 pairs) and the in-memory preparation with its tokenizer."""
    folder = tmp_path_factory.mktemp("reference")
    output, reports = sharded.prepare_in_shards(
        folder / "work", folder / "out", corpus, shard_size=400, tokenizer_options=TOKENIZER, progress=False, **OPTIONS
    )
    return output, reports, datasets.load_from_disk(str(output)), folder / "work"


def test_sharded_equals_in_memory_preparation(corpus, reference):
    from transformers import AutoTokenizer

    output, reports, got, work = reference
    plan = sharded.load_plan(work)
    assert [(s["split"], s["start"], s["stop"]) for s in plan["shards"]] == [
        ("train", 0, 400),
        ("train", 400, 800),
        ("train", 800, 1200),
        ("train", 1200, 1300),
        ("validation", 0, 90),
    ]
    expected, expected_reports = unsharded(corpus, AutoTokenizer.from_pretrained(str(output / "tokenizer")))
    for split in ("train", "validation"):
        assert_same_dataset(got[split], expected[split])
        merged, single = reports[split], expected_reports[split]
        for key in (
            "pairs_read",
            "pairs_kept",
            "pairs_skipped",
            "pairs_skipped_total",
            "source_words",
            "unaligned_source_words",
            "btg_repairs",
            "kendall_tau_sentences",
            "features",
        ):
            assert merged[key] == single[key], key
        for key in ("unaligned_ratio", "btg_repair_ratio", "mean_kendall_tau"):
            assert merged[key] == pytest.approx(single[key], rel=1e-12), key
    assert (
        reports["train"]["pairs_skipped"]["empty_source"] == 1
        and reports["train"]["pairs_skipped"]["source_too_long"] == 1
    )
    assert reports["train"]["shards"] == 4 and got["train"]["line"][:3] == [1, 2, 3]
    assert json.loads((output / "report.json").read_text())["train"]["pairs_kept"] == len(got["train"])


def test_merge_reports_recomputes_ratios_from_sums():
    base = {"pairs_skipped": {"empty_source": 1}, "timings_s": {"total": 1.0}, "features": ["reorder_positions"]}
    first = {
        **base,
        "pairs_read": 10,
        "pairs_kept": 9,
        "pairs_skipped_total": 1,
        "source_words": 100,
        "unaligned_source_words": 10,
        "btg_repairs": 1,
        "kendall_tau_sentences": 9,
        "mean_kendall_tau": 0.5,
    }
    second = {
        **base,
        "pairs_read": 30,
        "pairs_kept": 30,
        "pairs_skipped": {"target_too_long": 2},
        "pairs_skipped_total": 0,
        "source_words": 300,
        "unaligned_source_words": 90,
        "btg_repairs": 0,
        "kendall_tau_sentences": 27,
        "mean_kendall_tau": 0.9,
    }
    merged = sharded.merge_reports([first, second])
    assert merged["pairs_read"] == 40 and merged["pairs_kept"] == 39 and merged["shards"] == 2
    assert merged["pairs_skipped"] == {"empty_source": 1, "target_too_long": 2}
    assert merged["unaligned_ratio"] == pytest.approx(100 / 400)
    assert merged["btg_repair_ratio"] == pytest.approx(1 / 39)
    assert merged["mean_kendall_tau"] == pytest.approx((0.5 * 9 + 0.9 * 27) / 36)
    assert merged["timings_s"] == {"total": 2.0}


def test_resume_redoes_only_unfinished_shards(corpus, reference, tmp_path):
    """A run stopped after two shards, with a half-written shard left behind (a kill during writing), resumes:
    the two finished shards are not touched, the leftover is ignored, and the result is the same dataset."""
    work = tmp_path / "work"
    plan = sharded.plan_preparation(work, corpus, shard_size=400, tokenizer_options=TOKENIZER, **OPTIONS)
    assert sharded.run_shards(work, plan, [0, 3], progress=False) == [0, 3]
    half = work / "shards" / ".00001.killed.tmp"
    half.mkdir()
    (half / "report.json").write_text("{")  # what a kill mid-write leaves: a staging directory, never shards/00001
    stamps = {i: (work / "shards" / f"{i:05d}" / "checksum.json").stat().st_mtime_ns for i in (0, 3)}
    plan_again = sharded.plan_preparation(work, corpus, shard_size=400, tokenizer_options=TOKENIZER, **OPTIONS)
    assert plan_again == plan
    assert sharded.run_shards(work, plan_again, progress=False) == [1, 2, 4]
    assert {i: (work / "shards" / f"{i:05d}" / "checksum.json").stat().st_mtime_ns for i in (0, 3)} == stamps
    output, _ = sharded.merge_shards(work, tmp_path / "out")
    resumed, expected = datasets.load_from_disk(str(output)), reference[2]
    for split in ("train", "validation"):
        assert_same_dataset(resumed[split], expected[split])


def test_another_request_in_the_work_directory_is_refused(corpus, tmp_path):
    work = tmp_path / "work"
    sharded.plan_preparation(work, corpus, shard_size=400, tokenizer_options=TOKENIZER, **OPTIONS)
    with pytest.raises(
        ValueError, match=r"made from other options \(option seed: 3, now 4\); pass --overwrite-work-dir"
    ):
        sharded.plan_preparation(work, corpus, shard_size=400, tokenizer_options=TOKENIZER, **{**OPTIONS, "seed": 4})
    with pytest.raises(ValueError, match=r"option shard_size: 400, now 500"):
        sharded.plan_preparation(work, corpus, shard_size=500, tokenizer_options=TOKENIZER, **OPTIONS)
    with pytest.raises(
        ValueError,
        match=r"planned with other options \(option unaligned: null, now \"left\"\); give every stage the same flags",
    ):
        sharded.load_plan(work, {**OPTIONS, "unaligned": "left"})
    changed = {**corpus, "validation": {**corpus["validation"]}}
    shutil.copy(corpus["validation"]["target"], tmp_path / "v.target")
    with open(tmp_path / "v.target", "a", encoding="utf-8") as handle:
        handle.write("one more line\n")
    changed["validation"]["target"] = str(tmp_path / "v.target")
    with pytest.raises(ValueError, match="parallel files differ in line count"):
        sharded.plan_preparation(work, changed, shard_size=400, tokenizer_options=TOKENIZER, **OPTIONS)


def test_merge_names_missing_and_damaged_shards(corpus, tmp_path):
    work = tmp_path / "work"
    plan = sharded.plan_preparation(work, corpus, shard_size=400, tokenizer_options=TOKENIZER, **OPTIONS)
    sharded.run_shards(work, plan, [0, 1, 2, 3], progress=False)
    with pytest.raises(ValueError, match=r"shard 4 \(not prepared yet\)"):
        sharded.merge_shards(work, tmp_path / "out")
    sharded.run_shards(work, plan, [4], progress=False)
    arrow = next((work / "shards" / "00002" / "data").glob("*.arrow"))
    arrow.write_bytes(arrow.read_bytes()[:-10])
    with pytest.raises(
        ValueError, match=r"shard 2 \(damaged: 1 file\(s\) missing, added or changed.*--stage shards --shard-index 2 "
    ):
        sharded.merge_shards(work, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match=r"--shard-index 9: the plan has shards 0\.\.4"):
        sharded.run_shard(work, plan, 9)


def test_a_bad_alignment_line_is_named_with_its_absolute_line(corpus, tmp_path):
    links = Path(corpus["train"]["alignments"]).read_text(encoding="utf-8").split("\n")
    links[1000] = "0-99"
    bad = tmp_path / "bad.links"
    bad.write_text("\n".join(links), encoding="utf-8")
    files = {"train": {**corpus["train"], "alignments": str(bad)}}
    work = tmp_path / "work"
    plan = sharded.plan_preparation(work, files, shard_size=400, tokenizer_options=TOKENIZER, **OPTIONS)
    sharded.run_shard(work, plan, 0)
    with pytest.raises(ValueError, match=rf"{bad}:1001: link 0-99 is outside the sentence pair"):
        sharded.run_shard(work, plan, 2)


def run_prepare(*args, check=True, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "xlpe.cli.prepare", *args],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
        **kwargs,
    )
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def cli_flags(corpus: dict, output: Path) -> list[str]:
    return [
        "--source",
        corpus["train"]["source"],
        "--target",
        corpus["train"]["target"],
        "--alignments",
        corpus["train"]["alignments"],
        "--validation-source",
        corpus["validation"]["source"],
        "--validation-target",
        corpus["validation"]["target"],
        "--validation-alignments",
        corpus["validation"]["alignments"],
        "--output",
        str(output),
        "--shard-size",
        "400",
        "--tokenizer-model",
        "bpe",
        "--tokenizer-vocab-size",
        "300",
        "--keep-text",
        "--noise-ratio",
        "0.1",
        "--seed",
        "3",
    ]


@pytest.mark.slow  # several processes; sharding ≡ one run in-process: the other tests here
def test_cli_shards_as_concurrent_jobs_equal_one_run(corpus, reference, tmp_path):
    """plan, then two concurrent shard jobs over disjoint shard lists (as two machines would), then merge."""
    flags = cli_flags(corpus, tmp_path / "out")
    run_prepare(*flags, "--stage", "plan")
    jobs = [
        subprocess.Popen(
            [sys.executable, "-m", "xlpe.cli.prepare", *flags, "--stage", "shards", "--shard-index", *indices],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for indices in (["0", "2", "4"], ["1", "3"])
    ]
    for job in jobs:
        _, stderr = job.communicate(timeout=300)
        assert job.returncode == 0, stderr[-3000:]
    merged = run_prepare(*flags, "--stage", "merge")
    assert "kept 1298 of 1300" in merged.stderr
    assert not (tmp_path / "out.work").exists()  # removed after the merge (--keep-work-dir keeps it)
    got = datasets.load_from_disk(str(tmp_path / "out"))
    for split in ("train", "validation"):
        assert_same_dataset(got[split], reference[2][split])


def test_cli_killed_run_resumes(corpus, reference, tmp_path):
    """A real kill (SIGKILL once the first shard is in place), then the same command again."""
    flags = [*cli_flags(corpus, tmp_path / "out"), "--keep-work-dir"]
    job = subprocess.Popen(
        [sys.executable, "-m", "xlpe.cli.prepare", *flags],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    first = tmp_path / "out.work" / "shards" / "00000" / "checksum.json"
    deadline = time.monotonic() + 240
    while not first.exists() and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    job.kill()
    job.wait()
    assert first.exists()
    done_before = sorted(p.name for p in (tmp_path / "out.work" / "shards").iterdir() if not p.name.startswith("."))
    stamp = first.stat().st_mtime_ns
    resumed = run_prepare(*flags)
    assert f"ran {5 - len(done_before)} shard(s)" in resumed.stderr
    assert first.stat().st_mtime_ns == stamp
    got = datasets.load_from_disk(str(tmp_path / "out"))
    for split in ("train", "validation"):
        assert_same_dataset(got[split], reference[2][split])


def test_cli_refusals_are_one_line(corpus, tmp_path):
    flags = cli_flags(corpus, tmp_path / "out")
    cases = [
        ([*flags, "--shard-index", "1"], "--shard-index picks shards to run with --stage shards"),
        ([*flags, "--stage", "merge"], "no plan.json (run the plan stage first"),
        ([*flags, "--shard-size", "0"], "--shard_size must be >= 1, got 0"),
        ([*flags[:-1], "x"], "--seed: invalid int value"),
        (
            [
                "--dataset",
                "d",
                "--source-lang",
                "en",
                "--target-lang",
                "de",
                "--output",
                str(tmp_path / "o"),
                "--stage",
                "plan",
            ],
            "--stage shard --source/--target files; --dataset is prepared in one piece",
        ),
    ]
    for args, message in cases:
        result = run_prepare(*args, check=False)
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.slow  # several processes; sharding ≡ one run in-process: the other tests here
def test_slurm_array_script(corpus, tmp_path):
    """examples/slurm/prepare_array.sbatch: the plan job plans and submits an array of one task per shard and a merge
    after it (a stub sbatch records the calls); an array task runs its shard. (The full array + merge, run with
    RUN_SLOW=1, gives the reference dataset; the stage commands it runs are compared in the concurrent-jobs test.)"""
    script = REPO_ROOT / "examples" / "slurm" / "prepare_array.sbatch"
    stub = tmp_path / "sbatch"
    stub.write_text('#!/bin/bash\necho "$@" >> "$SBATCH_LOG"\necho 4242\n')
    stub.chmod(0o755)
    env = {
        **ENV,
        "XLPE_WORK_DIR": str(tmp_path / "work"),
        "XLPE_SBATCH": str(stub),
        "SBATCH_LOG": str(tmp_path / "log"),
        "XLPE_PREPARE_ARGS": " ".join(cli_flags(corpus, tmp_path / "out")),
        "XLPE_SCRIPT": str(script),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }

    def stage(name, **extra):
        done = subprocess.run(
            ["bash", str(script)], env={**env, "XLPE_STAGE": name, **extra}, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]

    stage("plan")
    calls = (tmp_path / "log").read_text().splitlines()
    assert calls[0].startswith("--parsable --array=0-4%32 --export=ALL,XLPE_STAGE=shards") and calls[0].endswith(
        str(script)
    )
    assert calls[1].startswith("--parsable --dependency=afterok:4242 --export=ALL,XLPE_STAGE=merge")
    stage("shards", SLURM_ARRAY_TASK_ID="3")
    assert sorted(p.name for p in (tmp_path / "work" / "shards").iterdir()) == ["00003"]
    missing = subprocess.run(["bash", str(script)], env={**env, "XLPE_STAGE": "shards"}, capture_output=True, text=True)
    assert missing.returncode != 0 and "SLURM_ARRAY_TASK_ID" in missing.stderr
    if os.environ.get("RUN_SLOW") == "1":
        for task in (0, 1, 2, 4):
            stage("shards", SLURM_ARRAY_TASK_ID=str(task))
        stage("merge")
        assert datasets.load_from_disk(str(tmp_path / "out"))["train"].num_rows == 1298


# ----------------------------------------------------------------------------------------------------------
# eflomal: the whole corpus aligned in the plan, or priors for a larger one
# ----------------------------------------------------------------------------------------------------------


def test_small_corpus_is_aligned_once_in_the_plan(corpus, tmp_path):
    """Within --alignment-sample pairs the plan aligns every split in one eflomal run (as the in-memory
    preparation does) and the shards read those links: the kept text's links are the plan's file's lines."""
    files = {name: {**f, "alignments": None} for name, f in corpus.items()}
    output, reports = sharded.prepare_in_shards(
        tmp_path / "work",
        tmp_path / "out",
        files,
        shard_size=400,
        tokenizer_options=TOKENIZER,
        progress=False,
        keep_text=True,
    )
    assert reports["train"]["alignments"] == "eflomal (grow-diag-final-and), whole corpus"
    assert reports["train"]["sharded"]["priors"] is None
    got = datasets.load_from_disk(str(output))["train"]
    assert len(got) == 1298 and 0.5 < reports["train"]["mean_kendall_tau"] < 1  # the synthetic SOV order differs
    for positions in got.select(range(50))["reorder_positions"]:
        assert sorted(positions) == list(range(len(positions)))


def test_large_corpus_gets_priors(corpus, tmp_path):
    files = {"train": {**corpus["train"], "alignments": None}}
    output, reports = sharded.prepare_in_shards(
        tmp_path / "work",
        tmp_path / "out",
        files,
        shard_size=700,
        alignment_sample=500,
        tokenizer_options=TOKENIZER,
        progress=False,
    )
    report = reports["train"]
    assert report["alignments"].startswith("eflomal+priors (corpus of 1300 pairs")
    assert 498 <= report["sharded"]["priors"]["sample_pairs"] <= 500  # a sampled empty or over-long pair is not aligned
    assert report["pairs_kept"] == 1298 and report["unaligned_ratio"] < 0.3
    assert ", 2 samplers)" in report["alignments"]  # DEFAULT_SHARD_EFLOMAL_OPTIONS reach the shards


def test_shard_eflomal_defaults_and_eflomal_own_settings(tmp_path):
    """No shard options: 2 samplers and 0.6x eflomal's sweeps for the corpus size ((2, 1, 3) at 1M pairs); `{}`:
    eflomal's own (3 samplers, (2, 1, 5) at 1M); other options go over them; unknown ones are refused by name."""
    assert sharded._check_shard_eflomal_options(None, None) == sharded.DEFAULT_SHARD_EFLOMAL_OPTIONS
    assert sharded._check_shard_eflomal_options(None, None) is not sharded.DEFAULT_SHARD_EFLOMAL_OPTIONS  # a copy
    assert sharded._check_shard_eflomal_options({}, None) == {}
    with pytest.raises(ValueError, match="shard_eflomal_options .*n_sampler"):
        sharded._check_shard_eflomal_options({"n_sampler": 2}, None)

    def aligner(shard_options):
        plan = {
            "options": {},
            "priors": {"file": "priors.txt", "corpus_pairs": 1_000_000},
            "shard_eflomal_options": sharded._check_shard_eflomal_options(shard_options, None),
        }
        return sharded._shard_options(tmp_path, plan).aligner

    fast, own = aligner(None), aligner({})
    assert fast.eflomal_options == {"n_samplers": 2, "n_iterations": (2, 1, 3)}
    assert own.eflomal_options == {"n_iterations": (2, 1, 5)}  # eflomal's 3 samplers
    assert aligner({"n_samplers": 1}).eflomal_options == {"n_samplers": 1, "n_iterations": (2, 1, 5)}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seeded eflomal needs LD_PRELOAD (Linux)")
def test_seeded_eflomal_gives_the_same_sharded_dataset_twice(corpus, tmp_path):
    """With `eflomal_options={"seed": N}` the eflomal paths (priors from a sample in the plan, shards aligned from
    them) are reproducible too: two separate preparations give the same dataset."""
    files = {"train": {**corpus["train"], "alignments": None}}
    got = []
    for name in ("one", "two"):
        output, reports = sharded.prepare_in_shards(
            tmp_path / f"work-{name}",
            tmp_path / name,
            files,
            shard_size=700,
            alignment_sample=500,
            tokenizer_options=TOKENIZER,
            progress=False,
            eflomal_options={"seed": 4},
        )
        assert reports["train"]["alignments"].startswith("eflomal+priors")
        got.append(datasets.load_from_disk(str(output))["train"])
    assert_same_dataset(*got)
