"""xlpe-reorder reruns and reuse: a rerun, a resume or a reused artefact never gives a silently wrong result. Each test
plays a user's sequence through `main([...])` and checks the exit code, the one-line message and that nothing the
user had was lost or overwritten (docs/command_line.md, "Reruns, resumes and reused artefacts")."""

from __future__ import annotations

import json
import random

import pytest
from conftest import save_tiny_xlpe_model

from xlpe.cli.reorder import main

WORDS = "the cat dog sees chases small red ball man reads book garden child plays with a big old".split()
TINY = ["--d-model", "16", "--token-layers", "1", "--word-layers", "1", "--batch-size", "16", "--epochs", "1"]


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def toy_pair(folder, seed: int, reverse: bool = True, pairs: int = 40):
    """A toy language pair (target = source reversed, or kept in order) with its alignments, in `folder`."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    sources = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(pairs)]
    order = (lambda n: list(reversed(range(n)))) if reverse else (lambda n: list(range(n)))
    targets = [" ".join(s.split()[i] for i in order(len(s.split()))).upper() for s in sources]
    links = [" ".join(f"{i}-{j}" for j, i in enumerate(order(len(s.split())))) for s in sources]
    return [str(write_lines(folder / name, lines)) for name, lines in (("s", sources), ("t", targets), ("a", links))]


def train_argv(data, output, *more):
    source, target, alignments = data
    return [
        "train",
        "--source",
        source,
        "--target",
        target,
        "--alignments",
        alignments,
        "--output_dir",
        str(output),
        "--vocab-size",
        "60",
        "--calibration-pairs",
        "0",
        *TINY,
        *more,
    ]


def user_error(argv, capsys) -> str:
    """Run `argv`, expecting exit status 2 with one line on stderr; returns that line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("[transformers]")]
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def snapshot(directory) -> dict:
    """Every file under `directory` (but the lock) -> its bytes: to check that nothing was changed."""
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != ".xlpe.lock"
    }


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished reorderer for pair A, the data of pair B (another pair, same words)."""
    root = tmp_path_factory.mktemp("reuse")
    pair_a, pair_b = toy_pair(root / "a", seed=0), toy_pair(root / "b", seed=1, reverse=False)
    assert main(train_argv(pair_a, root / "r")) == 0
    return root, pair_a, pair_b


# ---------------------------------------------------------------------------------------------------------
# train: an --output_dir holding a reorderer made from other data or options
# ---------------------------------------------------------------------------------------------------------


def test_train_into_a_reorderer_of_another_pair_or_other_flags_is_refused_and_overwrite_replaces_it(trained, capsys):
    root, pair_a, pair_b = trained
    reorderer = root / "r"
    before = snapshot(reorderer)
    message = user_error(train_argv(pair_b, reorderer), capsys)  # another language pair into the same directory
    assert message.startswith(
        f"xlpe-reorder train: error: --output_dir {reorderer}: holds a reorderer made from other data"
    )
    assert "(input alignments:" in message and "pass --overwrite_output to replace it" in message
    for flags, fact in (
        (["--d-model", "32"], "option d_model"),
        (["--decoder", "rank"], "option decoder"),
        (["--pair-scorer", "mlp"], "option pair_scorer"),
        (["--epochs", "2"], "option epochs"),
        (["--seed", "2"], "option seed"),
        (["--vocab-size", "50"], "option tokenizer"),
    ):
        message = user_error(train_argv(pair_a, reorderer, *flags), capsys)
        assert f"other options ({fact}:" in message and "--overwrite_output" in message, (flags, message)
    assert snapshot(reorderer) == before  # nothing retrained, nothing removed
    # the explicit override trains the new pair's reorderer in its place, and records it
    (reorderer / "notes.txt").write_text("the user's own file\n")
    capsys.readouterr()
    assert main(train_argv(pair_b, reorderer, "--overwrite_output", "--d-model", "32")) == 0
    assert json.loads((reorderer / "config.json").read_text())["d_model"] == 32
    assert (reorderer / "notes.txt").read_text() == "the user's own file\n"  # only what `train` writes is replaced
    record = json.loads((reorderer / "xlpe_artefact.json").read_text())
    assert record["kind"] == "reorderer" and record["options"]["d_model"] == 32
    capsys.readouterr()
    assert main(train_argv(pair_b, reorderer, "--d-model", "32")) == 0  # now the same: reused
    assert "reused, not retrained" in capsys.readouterr().err


def test_train_restarts_with_no_resume_and_refuses_foreign_or_unrecorded_directories(trained, tmp_path, capsys):
    from transformers import AutoTokenizer

    root, pair_a, _ = trained
    # a translation model directory is never replaced by a reorderer, even with --overwrite_output
    model = save_tiny_xlpe_model(AutoTokenizer.from_pretrained(root / "r"), tmp_path / "model")
    before = snapshot(model)
    for more in ([], ["--overwrite_output"]):
        message = user_error(train_argv(pair_a, model, *more), capsys)
        assert "holds a xlpe_marian, not a reorderer; choose another directory" in message
    assert snapshot(model) == before
    # reorderer files without a record (an older version's, or copied by hand): refused, then replaced on request
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "tokenizer.json").write_text("{}")
    message = user_error(train_argv(pair_a, legacy), capsys)
    assert "holds no record of what made it" in message and "--overwrite_output" in message
    assert main(train_argv(pair_a, legacy, "--overwrite_output")) == 0
    # --no-resume restarts a run of the same record (a new report), never one made otherwise
    # (marked first: a retrained tiny model can write the very same report, its runtime rounded to the same ms)
    report = json.loads((legacy / "reorderer_training.json").read_text())
    (legacy / "reorderer_training.json").write_text(json.dumps({**report, "marker": "the first run's"}))
    assert main(train_argv(pair_a, legacy, "--no-resume")) == 0
    assert json.loads((legacy / "reorderer_training.json").read_text()).keys() == report.keys()
    assert "option d_model" in user_error(train_argv(pair_a, legacy, "--no-resume", "--d-model", "32"), capsys)


# ---------------------------------------------------------------------------------------------------------
# jackknife: resuming an unfinished run with other folds, seed or data
# ---------------------------------------------------------------------------------------------------------


def test_jackknife_resume_with_other_folds_or_seed_is_refused(trained, tmp_path, capsys, monkeypatch):
    import datasets
    from transformers import AutoTokenizer

    import xlpe.training.reorderer as library
    from xlpe.features.prepare import prepare_dataset

    root, pair_a, pair_b = trained
    tokenizer = AutoTokenizer.from_pretrained(root / "r")
    prepared = {}
    for name, (source, target, alignments) in (("a", pair_a), ("b", pair_b)):
        dataset, _ = prepare_dataset(source, target, tokenizer, alignments=alignments, features=["reorder_positions"])
        datasets.DatasetDict({"train": dataset}).save_to_disk(str(tmp_path / name))
        prepared[name] = str(tmp_path / name)

    def argv(data="a", *more):
        return [
            "jackknife",
            "--prepared",
            prepared[data],
            "--tokenizer",
            str(root / "r"),
            "--folds",
            "2",
            "--output_dir",
            str(tmp_path / "jk"),
            *TINY,
            *more,
        ]

    from xlpe.cli import reorder
    from xlpe.features import artefacts

    assert (reorder.LOCK_NAME, reorder.RECORD_NAME) == (artefacts.LOCK_NAME, artefacts.RECORD_NAME)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the run is killed after its folds, before J/data

    with monkeypatch.context() as patch:
        patch.setattr(library, "with_predicted_positions", killed)
        with pytest.raises(SystemExit) as exit_info:  # Ctrl-C: one line, status 130
            main(argv())
    assert exit_info.value.code == 130
    assert "xlpe-reorder jackknife: interrupted; its folds' checkpoints stay in" in capsys.readouterr().err
    folds = tmp_path / "jk" / "folds"
    assert (folds / "UNFINISHED").exists() and not (tmp_path / "jk" / "data").exists()
    before = snapshot(folds)
    assert json.loads((folds / "fold-1" / "xlpe_artefact.json").read_text())["options"]["fold"] == 1
    for more, fact in (
        (["--folds", "3"], "option folds"),
        (["--seed", "7"], "option seed"),
        (["--d-model", "32"], "option d_model"),
    ):
        message = user_error(argv("a", *more), capsys)
        assert message.startswith(
            f"xlpe-reorder jackknife: error: --output_dir {tmp_path / 'jk'} (an unfinished jackknife)"
        )
        assert f"({fact}:" in message and "pass --overwrite_output" in message
    assert "other data (input train:" in user_error(argv("b"), capsys)  # other prepared data
    assert snapshot(folds) == before  # the old folds' checkpoints are not reused, nor removed
    # --oracle-share only mixes after the folds: a resume applies it and says so
    capsys.readouterr()
    assert main(argv("a", "--oracle-share", "0.5")) == 0
    assert "resuming with --oracle_share 0.5 (was 0.0)" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "jk").iterdir()) == ["data", "folds"]
    # an unfinished J made otherwise is replaced with the override: its folds trained afresh, none resumed
    import shutil

    shutil.rmtree(tmp_path / "jk" / "data")  # (as a run killed before writing data/ leaves it)
    (folds / "UNFINISHED").write_text("")
    assert main(argv("a", "--folds", "3", "--seed", "7", "--overwrite_output")) == 0
    records = [json.loads(p.read_text())["options"] for p in sorted(folds.glob("fold-*/xlpe_artefact.json"))]
    assert [(r["fold"], r["folds"], r["seed"]) for r in records] == [(0, 3, 7), (1, 3, 7), (2, 3, 7)]
    assert all(
        json.loads((folds / f"fold-{k}" / "reorderer_training.json").read_text())["resumed_from"] is None
        for k in range(3)
    )
    assert len(datasets.load_from_disk(str(tmp_path / "jk" / "data"))["train"]) == 40


# ---------------------------------------------------------------------------------------------------------
# attach, predict, evaluate: a --reorderer that is not one, a --model that is not an XL PE model
# ---------------------------------------------------------------------------------------------------------


def test_attach_predict_evaluate_refuse_what_is_not_a_reorderer(trained, tmp_path, capsys):
    from transformers import AutoTokenizer, MarianConfig, MarianMTModel

    root, pair_a, _ = trained
    reorderer = root / "r"
    tokenizer = AutoTokenizer.from_pretrained(reorderer)
    model = save_tiny_xlpe_model(tokenizer, tmp_path / "model")
    before = snapshot(model)
    message = user_error(["attach", "--reorderer", str(model), "--model", str(model)], capsys)
    assert message == (
        f"xlpe-reorder attach: error: --reorderer {model}: holds a xlpe_marian model, not a reorderer "
        "written by `xlpe-reorder train` (model_type xlpe_reorderer)"
    )
    assert snapshot(model) == before  # not rewritten with a randomly initialised reorderer
    message = user_error(["attach", "--reorderer", str(reorderer), "--model", str(reorderer)], capsys)
    assert f"--model {reorderer}: holds a reorderer, not an XL PE translation model" in message
    plain = tmp_path / "plain"
    MarianMTModel(
        MarianConfig(
            vocab_size=len(tokenizer),
            d_model=16,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=16,
            decoder_ffn_dim=16,
            pad_token_id=tokenizer.pad_token_id,
            decoder_start_token_id=tokenizer.pad_token_id,
        )
    ).save_pretrained(plain)
    tokenizer.save_pretrained(plain)
    assert "holds a marian model, not an XL PE model" in user_error(
        ["attach", "--reorderer", str(reorderer), "--model", str(plain)], capsys
    )
    # an unfinished `train` run (killed before its first checkpoint): refused by name, not loaded half-made
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "xlpe_artefact.json").write_text((reorderer / "xlpe_artefact.json").read_text())
    source, target, alignments = pair_a
    text = write_lines(tmp_path / "in.txt", ["the cat sees a dog"])
    for bad, expected in ((model, "holds a xlpe_marian model, not a reorderer"), (unfinished, "an unfinished")):
        assert expected in user_error(["predict", "--reorderer", str(bad), "--input", str(text)], capsys)
        assert expected in user_error(
            ["evaluate", "--reorderer", str(bad), "--source", source, "--target", target, "--alignments", alignments],
            capsys,
        )
        assert expected in user_error(["attach", "--reorderer", str(bad), "--model", str(model)], capsys)
    assert snapshot(model) == before


def test_a_directory_in_use_by_another_run_is_refused(trained, capsys):
    from xlpe.features.artefacts import directory_lock

    root, pair_a, _ = trained
    before = snapshot(root / "r")
    with directory_lock(root / "r", "xlpe-reorder train (another run)"):
        message = user_error(train_argv(pair_a, root / "r", "--overwrite_output"), capsys)
    assert f"{root / 'r'} is in use by xlpe-reorder train (another run)" in message
    assert snapshot(root / "r") == before


def test_a_damaged_record_or_report_is_named_with_its_line(trained, tmp_path, capsys):
    import shutil

    root, pair_a, _ = trained
    copy = tmp_path / "r"
    shutil.copytree(root / "r", copy, ignore=shutil.ignore_patterns(".xlpe.lock"))
    record = (copy / "xlpe_artefact.json").read_text()
    (copy / "xlpe_artefact.json").write_text(record[: len(record) // 2])
    message = user_error(train_argv(pair_a, copy), capsys)
    assert f"{copy / 'xlpe_artefact.json'}:" in message and "not a valid artefact record" in message
    message = user_error(["predict", "--reorderer", str(copy), "--input", pair_a[0]], capsys)
    assert "not a valid artefact record" in message


# ---------------------------------------------------------------------------------------------------------
# train: Ctrl-C, then a rerun (restart when nothing was saved, resume from a checkpoint), default epochs
# ---------------------------------------------------------------------------------------------------------


def interrupt_at(monkeypatch, step: int) -> None:
    """Make the next `train` run raise KeyboardInterrupt (as Ctrl-C does) at the end of training step `step`."""
    from xlpe.training.interrupts import InterruptWatch

    seen = InterruptWatch.on_step_end

    def on_step_end(self, args, state, control, **kwargs):
        seen(self, args, state, control, **kwargs)
        if state.global_step == step:
            raise KeyboardInterrupt

    monkeypatch.setattr(InterruptWatch, "on_step_end", on_step_end)


def interrupted(argv, capsys) -> str:
    """Run `argv`, expecting Ctrl-C's exit: status 130, no traceback, one `interrupted` line (the last on stderr)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 130
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if "interrupted" in line]
    assert "Traceback" not in err and len(lines) == 1 and err.strip().splitlines()[-1] == lines[0], err[-2000:]
    return lines[0]


def without_epochs(argv: list[str]) -> list[str]:
    at = argv.index("--epochs")
    return argv[:at] + argv[at + 2 :]


def test_ctrl_c_before_any_checkpoint_then_a_rerun_with_other_options_starts_over(trained, tmp_path, capsys):
    root, pair_a, _ = trained
    output = tmp_path / "r"
    with pytest.MonkeyPatch.context() as patch:  # 40 pairs, 16 a step: 3 steps an epoch, a checkpoint after step 3
        interrupt_at(patch, 2)
        line = interrupted(train_argv(pair_a, output), capsys)
    assert line.startswith("xlpe-reorder train: interrupted at step 2 of 3; no checkpoint or model saved in ")
    assert not list(output.glob("checkpoint-*")) and not (output / "config.json").exists()
    assert json.loads((output / "xlpe_artefact.json").read_text())["options"]["epochs"] == 1.0
    capsys.readouterr()
    assert main(train_argv(pair_a, output, "--epochs", "2")) == 0  # other options, no --overwrite_output needed
    err = capsys.readouterr().err
    assert f"nothing was saved by the interrupted run in {output}; starting over with the new options" in err
    assert json.loads((output / "xlpe_artefact.json").read_text())["options"]["epochs"] == 2.0
    assert json.loads((output / "reorderer_training.json").read_text())["resumed_from"] is None


def test_ctrl_c_after_a_checkpoint_is_resumed_and_other_options_are_refused(trained, tmp_path, capsys):
    root, pair_a, _ = trained
    output = tmp_path / "r"
    with pytest.MonkeyPatch.context() as patch:
        interrupt_at(patch, 4)  # epoch 2's first step: epoch 1's checkpoint-3 is saved
        line = interrupted(train_argv(pair_a, output, "--epochs", "2"), capsys)
    assert line == (
        f"xlpe-reorder train: interrupted at step 4 of 6; newest checkpoint {output / 'checkpoint-3'} "
        "(rerun the same command to resume from it)"
    )
    before = snapshot(output)
    message = user_error(train_argv(pair_a, output, "--epochs", "3"), capsys)  # a saved checkpoint: refused
    assert "other options (option epochs: 2.0, now 3.0)" in message and "--overwrite_output" in message
    assert snapshot(output) == before
    assert main(train_argv(pair_a, output, "--epochs", "2")) == 0  # the same command resumes
    assert json.loads((output / "reorderer_training.json").read_text())["resumed_from"] == str(output / "checkpoint-3")


def test_default_epochs_fit_the_time_budget_and_are_kept_by_a_rerun(trained, tmp_path, capsys, monkeypatch):
    import xlpe.training.reorderer as library

    root, pair_a, _ = trained
    output = tmp_path / "r"
    monkeypatch.setattr(library, "training_step_seconds", lambda *args, **kwargs: 100.0)  # 3 steps: 300 s an epoch
    capsys.readouterr()
    assert main(without_epochs(train_argv(pair_a, output))) == 0
    err = capsys.readouterr().err
    assert (
        "xlpe-reorder train: --epochs not given: 2 (estimated 10.0 min of training; one epoch of 40 pairs is 3 "
        "steps at 100.00 s a step" in err
    )
    assert "as many as fit 10.0 min, at least 1, at most 3; give --epochs to choose" in err
    assert json.loads((output / "xlpe_artefact.json").read_text())["options"]["epochs"] == 2.0
    assert json.loads((output / "reorderer_training.json").read_text())["options"]["epochs"] == 2.0
    # a rerun without --epochs keeps the recorded choice (the finished reorderer is reused), not a new estimate
    monkeypatch.setattr(library, "training_step_seconds", lambda *args, **kwargs: 1e6)
    assert main(without_epochs(train_argv(pair_a, output))) == 0
    err = capsys.readouterr().err
    assert "--epochs not given: 2, as the run that made" in err and "reused, not retrained" in err
    # a given --epochs always wins: nothing is timed
    monkeypatch.setattr(library, "training_step_seconds", lambda *args, **kwargs: pytest.fail("timed"))
    assert main(train_argv(pair_a, tmp_path / "given", "--epochs", "1")) == 0
    assert "--epochs not given" not in capsys.readouterr().err
    assert library.default_epochs(10_000.0) == 1 and library.default_epochs(1.0) == 3  # at least 1, at most 3


def test_a_reorderer_no_better_than_the_source_order_says_so_and_attach_carries_the_report(trained, tmp_path, capsys):
    from transformers import AutoTokenizer

    root, _, pair_b = trained  # pair B keeps the source order: the oracle is the monotone order, tau 1.0
    output = tmp_path / "r"
    argv = train_argv(pair_b, output)
    argv[argv.index("--calibration-pairs") + 1] = "4"
    capsys.readouterr()
    assert main(argv) == 0
    captured = capsys.readouterr()
    report = json.loads((output / "reorderer_training.json").read_text())
    assert report["monotone_mean_kendall_tau"] == 1.0 and report["beats_source_order"] is False
    assert (
        report["mean_kendall_tau"]
        == report["order_prior_calibration"]["by_prior"][str(report["order_prior_calibration"]["chosen"])][
            "kendall_tau"
        ]
    )
    assert (
        f"xlpe-reorder train: the reorderer (tau {report['mean_kendall_tau']:.3f}) does not beat keeping the source "
        "order (tau 1.000) on 4 held-out pairs: XL PE's predicted positions will add little for this pair"
    ) in captured.err
    assert json.loads(captured.out)["beats_source_order"] is False
    source, target, alignments = pair_b
    assert (
        main(
            ["evaluate", "--reorderer", str(output), "--source", source, "--target", target, "--alignments", alignments]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert json.loads(captured.out)["beats_source_order"] is False
    assert (
        "xlpe-reorder evaluate: the reorderer (tau" in captured.err
        and "does not beat keeping the source" in captured.err
    )
    # attach: the model directory carries the reorderer's report (reorderer/reorderer_training.json)
    model = save_tiny_xlpe_model(AutoTokenizer.from_pretrained(output), tmp_path / "model")
    assert main(["attach", "--reorderer", str(output), "--model", str(model)]) == 0
    assert json.loads((model / "reorderer" / "reorderer_training.json").read_text()) == report
