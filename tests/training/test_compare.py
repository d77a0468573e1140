"""xlpe-compare without training: the variant syntax, the seed rule, the request record a rerun is checked
against, the report and plot from run folders, and bad input (one line, exit 2). The walk-through on real data is
in tests/test_walkthrough.py."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from xlpe.cli import compare as compare_cli
from xlpe.evaluation.verdict import seed_rule, verdict_of
from xlpe.training import compare_report
from xlpe.training.compare import (
    DEFAULT_VARIANTS,
    CompareError,
    CompareRequest,
    check_finished_run,
    check_record,
    default_jobs,
    flag_difference,
    job_environment,
    parse_variant,
    parse_variants,
    probe_argv,
    run_state,
    train_argv,
)
from xlpe.training.compare_report import dev_translations

# ---------------------------------------------------------------------------------------------------------
# The seed rule
# ---------------------------------------------------------------------------------------------------------


def test_seed_rule_needs_every_seed_significant_with_one_sign():
    assert seed_rule([0.8, 1.1, 0.5], [0.01, 0.002, 0.04])["outcome"] == "better"
    assert seed_rule([-0.8, -1.1], [0.01, 0.002])["outcome"] == "worse"
    mixed = seed_rule([0.8, 1.1, 0.5], [0.01, 0.002, 0.2])
    assert mixed["outcome"] == "within noise" and mixed["significant"] == 2 and mixed["seeds"] == 3
    assert seed_rule([0.8, -0.4], [0.01, 0.03])["outcome"] == "within noise"  # significant both ways: no sign
    assert verdict_of([0.5], [0.01]) == "better (significant in 1/1 seeds, p<0.05); one seed: indicative only"
    with pytest.raises(ValueError, match="one value per seed"):
        seed_rule([0.5, 0.2], [0.01])


# ---------------------------------------------------------------------------------------------------------
# Variants and the request
# ---------------------------------------------------------------------------------------------------------


def test_variant_syntax():
    variant = parse_variant("xlpe-in: --model_type xlpe --xl-strategy in")
    assert variant.name == "xlpe-in" and variant.flags == ("--model_type", "xlpe", "--xl_strategy", "in")
    assert variant.is_xlpe and not parse_variant("v: --model_type vanilla").is_xlpe
    assert [v.name for v in parse_variants(None)] == [text.split(":")[0] for text in DEFAULT_VARIANTS]
    quoted = parse_variant("r: --model_type xlpe --config_overrides 'a=1,b=2'")
    assert quoted.flags[-1] == "a=1,b=2"


@pytest.mark.parametrize(
    "texts, message",
    [
        (["no colon --model_type xlpe"], "expected 'NAME: xlpe-train flags'"),
        (["a b: --model_type xlpe", "c: --model_type vanilla"], "expected 'NAME"),
        (["a:", "b: --model_type vanilla"], "no flags"),
        (["a: model_type xlpe", "b: --model_type vanilla"], "expected xlpe-train flags"),
        (["a: --seed 3", "b: --model_type vanilla"], "--seed is set by xlpe-compare"),
        (["a: --output_dir x", "b: --model_type vanilla"], "--output_dir is set by xlpe-compare"),
        (["a: --model_type xlpe", "a: --model_type vanilla"], "given twice"),
        (["a: --model_type xlpe"], "at least two variants"),
        (["a: --model_type xlpe --x 'open", "b: --model_type vanilla"], "No closing quotation"),
    ],
)
def test_bad_variants_are_refused_by_name(texts, message):
    with pytest.raises(CompareError, match=message):
        parse_variants(texts)


def request(tmp_path, **fields) -> CompareRequest:
    prepared = tmp_path / "prepared"
    return CompareRequest(
        output_dir=tmp_path / "out", variants=parse_variants(None), prepared_dataset=prepared, **fields
    )


def test_runs_get_the_same_flags_but_the_variant_and_the_reorderer_is_attached(tmp_path):
    req = request(tmp_path, train_args=("--max_steps", "40"), seeds=2)
    vanilla, xl = req.variants
    assert [(v.name, s) for v, s in req.runs()] == [("vanilla", 1), ("xlpe-combination", 1)] + [
        ("vanilla", 2),
        ("xlpe-combination", 2),
    ]
    argv = train_argv(req, xl, 2)
    assert argv[argv.index("--seed") + 1] == "2" and argv[argv.index("--max_steps") + 1] == "40"
    assert argv[argv.index("--reorderer") + 1] == str(req.reorderer)
    assert "--reorderer" not in train_argv(req, vanilla, 1)
    builtin = parse_variant("xl-builtin: --model_type xlpe --reorderer builtin")
    assert "--reorderer" not in train_argv(req, builtin, 1) and "builtin" not in train_argv(req, builtin, 1)
    probe = probe_argv(req, xl)
    assert "--reorderer" not in probe and probe[probe.index("--output_dir") + 1].endswith("probes/xlpe-combination")
    assert probe[-10:-8] == ["--max_steps", str(req.probe_steps)]  # after the run's own --max_steps: it wins


def test_request_needs_data_and_sane_numbers(tmp_path):
    with pytest.raises(CompareError, match="raw files .* or --prepared_dataset"):
        CompareRequest(output_dir=tmp_path, variants=parse_variants(None))
    with pytest.raises(CompareError, match="need --test_source, --test_target, --source_lang"):
        CompareRequest(output_dir=tmp_path, variants=parse_variants(None), data={"source": "a", "target": "b"})
    with pytest.raises(CompareError, match="--seeds 0"):
        request(tmp_path, seeds=0)
    with pytest.raises(CompareError, match="--jobs 0"):
        request(tmp_path, jobs=0)


def test_a_rerun_is_checked_against_the_record(tmp_path):
    old = {
        "kind": "xlpe-compare",
        "format": 1,
        "data": {"--prepared_dataset": "abc"},
        "variants": {"vanilla": ["--model_type", "vanilla"], "xl": ["--model_type", "xlpe"]},
        "seeds": 2,
        "--train_args": ["--max_steps", "40"],
        "--prepare_args": [],
        "--reorder_args": [],
    }
    assert check_record(old, json.loads(json.dumps(old)), tmp_path) == []
    more = {**old, "seeds": 3, "variants": {**old["variants"], "xl-in": ["--model_type", "xlpe"]}}
    assert check_record(old, more, tmp_path) == ["variant xl-in", "seeds 3-3"]
    with pytest.raises(CompareError, match=r"--train_args differs from its first run \(--max_steps '40' -> '80'\)"):
        check_record(old, {**old, "--train_args": ["--max_steps", "80"]}, tmp_path)
    with pytest.raises(CompareError, match="--variant xl: was '--model_type xlpe'"):
        check_record(old, {**old, "variants": {**old["variants"], "xl": ["--model_type", "dpe"]}}, tmp_path)
    with pytest.raises(CompareError, match="other data: --prepared_dataset differs"):
        check_record(old, {**old, "data": {"--prepared_dataset": "def"}}, tmp_path)
    assert flag_difference(["--a", "1"], ["--a", "1", "--b", "2"]) == "--b (not given) -> '2'"


def test_finished_runs_are_checked_against_their_own_record(tmp_path):
    folder = tmp_path / "run"
    assert run_state(folder) == "new"
    folder.mkdir()
    assert run_state(folder) == "restart"
    (folder / "checkpoint-4").mkdir()
    (folder / "checkpoint-4" / "trainer_state.json").write_text("{}")
    assert run_state(folder) == "resume"
    options = {"--seed": 2, "--max_steps": 40, "--model_type": "xlpe", "--bf16": False, "--report_to": []}
    (folder / "xlpe_artefact.json").write_text(json.dumps({"kind": "training-run", "options": options}))
    for name in ("test_scores.json", "generated_predictions.txt", "all_results.json"):
        (folder / name).write_text("{}")
    assert run_state(folder) == "finished"
    check_finished_run(folder, ["--seed", "2", "--max_steps", "40", "--model_type", "xlpe", "--bf16", "false"])
    check_finished_run(folder, ["--report_to", "none"])  # transformers records `none` as []
    with pytest.raises(CompareError, match=r"a finished run with --report_to \[\], but .* 'tensorboard'"):
        check_finished_run(folder, ["--report_to", "tensorboard"])
    with pytest.raises(
        CompareError, match="a finished run with --max_steps 40, but this comparison trains it with '80'"
    ):
        check_finished_run(folder, ["--seed", "2", "--max_steps", "80"])


def test_jobs_follow_the_machine():
    assert default_jobs(gpus=0, cpus=2) == 1 and default_jobs(gpus=0, cpus=16) == 4 and default_jobs(gpus=3) == 3
    assert job_environment(1, 4, gpus=0, cpus=16) == {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4"}
    assert job_environment(2, 2, gpus=2) == {"CUDA_VISIBLE_DEVICES": "0"}
    assert job_environment(0, 1, gpus=0) == {}


# ---------------------------------------------------------------------------------------------------------
# The report from run folders
# ---------------------------------------------------------------------------------------------------------


def fake_comparison(tmp_path, seeds: int = 2):
    """A prepared test split of 60 references and run folders whose translations are the reference with a share of
    words dropped: the XL PE variant drops fewer (so it is better in every seed)."""
    import datasets

    rng = random.Random(0)
    words = "the a man dog cat runs sees blue red small house tree in on with".split()
    references = [" ".join(rng.choice(words) for _ in range(rng.randint(6, 12))) for _ in range(60)]
    prepared = tmp_path / "prepared"
    splits = {"test": references, "validation": references[:40]}
    datasets.DatasetDict(
        {name: datasets.Dataset.from_dict({"target_text": rows, "source_text": rows}) for name, rows in splits.items()}
    ).save_to_disk(str(prepared))
    (prepared / "report.json").write_text(json.dumps({"train": {"languages": {"source": "de", "target": "en"}}}))
    req = request(tmp_path, seeds=seeds)

    def damaged(share: float, seed: int) -> list[str]:
        local = random.Random(seed)
        return [" ".join(w for w in line.split() if local.random() > share) for line in references]

    for variant, seed in req.runs():
        folder = req.run_dir(variant, seed)
        folder.mkdir(parents=True)
        share = 0.1 if variant.is_xlpe else 0.5
        (folder / "generated_predictions.txt").write_text("\n".join(damaged(share, seed)) + "\n")
        if variant.is_xlpe:
            (folder / "generated_predictions_oracle.txt").write_text("\n".join(damaged(0.05, seed)) + "\n")
        dev = dev_translations(req, variant, seed)
        dev.parent.mkdir(exist_ok=True)
        dev.write_text("\n".join(damaged(share * 0.8, seed + 10)[:40]) + "\n")
        (folder / "xlpe_elapsed.json").write_text(json.dumps({"seconds": 120.0}))
    return req


def test_report_scores_tests_and_verdicts(tmp_path):
    req = fake_comparison(tmp_path)
    report = compare_report.build_report(req)
    vanilla, xl = report["variants"]
    assert report["baseline"] == "vanilla" and report["test_sentences"] == 60
    assert "tok:13a" in report["signatures"]["bleu"] and "nrefs:1" in report["signatures"]["chrf"]
    assert xl["bleu"]["mean"] > vanilla["bleu"]["mean"] + 10
    assert [r["seed"] for r in xl["runs"]] == [1, 2]
    for run, base in zip(xl["runs"], vanilla["runs"]):
        assert run["against_baseline"]["bleu_delta"] == pytest.approx(run["bleu"] - base["bleu"])
        assert run["against_baseline"]["bleu_p"] < 0.05
        assert run["oracle"]["bleu"] > run["bleu"] and run["oracle"]["bleu_gap"] > 0
    assert xl["verdict_bleu"]["outcome"] == "better" and xl["verdict_bleu"]["seeds"] == 2
    assert "verdict_bleu" not in vanilla and "oracle" not in vanilla["runs"][0]
    for run, base in zip(xl["runs"], vanilla["runs"]):  # dev: scored from its translations, paired bootstrap too
        assert run["dev_sentences"] == 40 and run["dev_bleu"] > base["dev_bleu"]
        assert run["dev_against_baseline"]["bleu_delta"] == pytest.approx(run["dev_bleu"] - base["dev_bleu"])
        assert "dev_against_baseline" not in base
    assert report["dev_sentences"] == 40 and "nrefs:1" in report["dev_bleu_signature"]
    assert xl["dev_bleu"]["mean"] > vanilla["dev_bleu"]["mean"]

    compare_report.write_report(report, req.output_dir, echo=lambda line: None)
    text = (req.output_dir / "report.md").read_text()
    assert "| `xlpe-combination` |" in text and "better (significant in 2/2 seeds, p<0.05)" in text
    assert f"{xl['runs'][0]['dev_bleu']:.2f}" in text and "(dev: `nrefs:1" in text
    assert (
        json.loads((req.output_dir / "report.json").read_text())["variants"][1]["verdict_bleu"]["outcome"] == "better"
    )
    png = (req.output_dir / "report.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_report_refuses_translations_that_do_not_match_the_test_split(tmp_path):
    req = fake_comparison(tmp_path, seeds=1)
    folder = req.run_dir(req.variants[1], 1)
    (folder / "generated_predictions.txt").write_text("one line\n")
    with pytest.raises(ValueError, match="generated_predictions.txt: 1 lines, the test split has 60"):
        compare_report.build_report(req)
    dev_translations(req, req.variants[0], 1).write_text("one line\n")
    with pytest.raises(ValueError, match="vanilla-seed1.txt: 1 lines, the validation split has 40"):
        compare_report.build_report(req)


# ---------------------------------------------------------------------------------------------------------
# The command line: one line, exit 2, before any work
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--variant", "x"], "--variant 'x': expected 'NAME: xlpe-train flags'"),
        (["--seeds", "0"], "--seeds 0: expected at least 1"),
        (["--train_args", "--seed 4"], "--train_args '--seed 4': --seed is set by xlpe-compare"),
        (
            ["--variant", "a: --model_type vanilla", "--variant", "x: --model_type nonsense"],
            "--variant x: unknown --model_type 'nonsense'; known: ['dpe', 'mvpe_pos', 'vanilla', 'xlpe']",
        ),
        (
            ["--variant", "a: --model_type vanilla", "--variant", "x: --model_type xlpe --learnig_rate 1e-3"],
            "--variant x: unrecognized arguments: --learnig_rate 1e-3 (did you mean --learning_rate?)",
        ),
        (
            ["--variant", "a: --model_type vanilla", "--variant", "x: --model_type xlpe --eval_strategy sometimes"],
            "--variant x: argument --eval_strategy/--eval-strategy: invalid choice: 'sometimes'",
        ),
        (["--train_args", "--recipe nope"], "--variant vanilla: --recipe 'nope' is not a recipe"),
    ],
)
def test_cli_bad_input_is_one_line(tmp_path, capsys, extra, message):
    status = compare_cli.main(["--prepared_dataset", str(tmp_path), "--output_dir", str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and err.startswith("xlpe-compare: error: ") and message in err
    assert not (tmp_path / "out").exists()  # refused before anything is prepared or written


def test_cli_refuses_missing_data_before_any_work(tmp_path, capsys):
    status = compare_cli.main(["--prepared_dataset", str(tmp_path / "nope"), "--output_dir", str(tmp_path / "out")])
    assert status == 2 and "not a prepared dataset" in capsys.readouterr().err
    args = ["--source", str(tmp_path / "train.de"), "--target", str(tmp_path / "train.en")]
    args += ["--test_source", "t.de", "--test_target", "t.en", "--source_lang", "de", "--target_lang", "en"]
    status = compare_cli.main([*args, "--output_dir", str(tmp_path / "out")])
    assert status == 2 and "train.de: no such file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------------
# The orchestration, with a runner that stands in for the commands
# ---------------------------------------------------------------------------------------------------------


class FakeCommands:
    """Records every command; `xlpe-train` "trains" by copying a finished run's files from `source` (the
    fake comparison's folders) and `xlpe-translate` writes its dev translations, `fail` names runs whose command
    exits 1."""

    def __init__(self, finished: dict, fail=()):
        self.calls, self.finished, self.fail = [], finished, set(fail)

    def __call__(self, program, argv, log, env):
        from pathlib import Path

        self.calls.append((program, list(argv)))
        if program == "xlpe-translate":
            output = Path(argv[argv.index("--output") + 1])
            assert len(Path(argv[argv.index("--input") + 1]).read_text().splitlines()) == 40  # the dev sources
            output.write_text(self.finished[f"dev {output.stem}"])
            return 0
        if program != "xlpe-train":
            return 0
        out = Path(argv[argv.index("--output_dir") + 1])
        if out.name in self.fail:
            return 1
        out.mkdir(parents=True, exist_ok=True)
        for name, text in self.finished[out.name].items():
            (out / name).write_text(text)
        options = {"--seed": int(argv[argv.index("--seed") + 1])}
        (out / "xlpe_artefact.json").write_text(json.dumps({"kind": "training-run", "options": options}))
        for name in ("test_scores.json", "all_results.json"):
            (out / name).write_text("{}")
        return 0


def test_run_compare_trains_reuses_resumes_and_adds(tmp_path):
    from xlpe.training.compare import RunFailed, run_compare

    req = fake_comparison(tmp_path, seeds=3)
    (req.prepared / "tokenizer").mkdir()
    finished = {}
    for variant, seed in req.runs():  # the fake folders become what the fake xlpe-train writes
        folder = req.run_dir(variant, seed)
        finished[folder.name] = {p.name: p.read_text() for p in folder.iterdir()}
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()
        dev = dev_translations(req, variant, seed)
        finished[f"dev {folder.name}"] = dev.read_text()
        dev.unlink()
    for name in ("runs", "dev", ""):
        (req.output_dir / name).rmdir()
    two = CompareRequest(output_dir=req.output_dir, variants=req.variants, prepared_dataset=req.prepared, seeds=2)
    two.probe_steps = 0
    lines = []
    commands = FakeCommands(finished, fail={"xlpe-combination-seed2"})
    with pytest.raises(RunFailed, match=r"1 of 4 runs failed \(xlpe-combination-seed2\)"):
        run_compare(two, runner=commands, echo=lines.append)
    assert [program for program, _ in commands.calls] == ["xlpe-reorder"] + ["xlpe-train"] * 4
    assert json.loads((req.output_dir / "compare.json").read_text())["seeds"] == 2

    # the failed run left a checkpoint: resumed; the three finished ones are reused; seed 3 is added
    (req.run_dir(req.variants[1], 2) / "checkpoint-2").mkdir(parents=True)
    (req.run_dir(req.variants[1], 2) / "checkpoint-2" / "trainer_state.json").write_text("{}")
    three = CompareRequest(output_dir=req.output_dir, variants=req.variants, prepared_dataset=req.prepared, seeds=3)
    three.probe_steps = 0
    commands = FakeCommands(finished)
    report = run_compare(three, runner=commands, echo=lines.append)
    trained = {
        argv[argv.index("--output_dir") + 1].rsplit("/", 1)[1]: argv for p, argv in commands.calls if p == "xlpe-train"
    }
    assert sorted(trained) == ["vanilla-seed3", "xlpe-combination-seed2", "xlpe-combination-seed3"]
    assert trained["xlpe-combination-seed2"][-2:] == ["--resume_from_checkpoint", "last"]
    assert "--resume_from_checkpoint" not in trained["vanilla-seed3"]
    assert "xlpe-compare: adding to" in "\n".join(lines) and "seeds 3-3" in "\n".join(lines)
    assert [len(v["runs"]) for v in report["variants"]] == [3, 3] and report["variants"][1]["verdict_bleu"][
        "seeds"
    ] == 3
    translated = sorted(Path(argv[1]).name for p, argv in commands.calls if p == "xlpe-translate")
    assert translated == ["vanilla-seed1", "vanilla-seed2", "vanilla-seed3", "xlpe-combination-seed1"] + [
        "xlpe-combination-seed2",
        "xlpe-combination-seed3",
    ]  # the first call stopped at the failed run, before any dev translation
    assert all("dev_bleu" in r for v in report["variants"] for r in v["runs"])

    # a finished run lacking only its dev translations gets only that step, not a retraining
    dev_translations(req, req.variants[1], 3).unlink()
    commands = FakeCommands(finished)
    run_compare(three, runner=commands, echo=lines.append)
    assert [(p, Path(argv[1]).name) for p, argv in commands.calls] == [("xlpe-translate", "xlpe-combination-seed3")]

    # a finished run whose record disagrees is refused by name, before any work
    record = req.run_dir(req.variants[0], 1) / "xlpe_artefact.json"
    record.write_text(json.dumps({"kind": "training-run", "options": {"--seed": 7}}))
    commands = FakeCommands(finished)
    with pytest.raises(CompareError, match="a finished run with --seed 7, but this comparison trains it with '1'"):
        run_compare(three, runner=commands, echo=lines.append)
    assert commands.calls == []
