"""bench/reproduce.py end to end in smoke mode: vanilla + Combination on a few hundred Multi30k pairs, one seed,
a few steps. `--workers 2` trains them side by side in two processes; the JSON lines file has both runs with
BLEU/chrF and their sacrebleu signatures; a second call skips them (resumable); a run that trains the same model
as a finished one reuses its result (and says so when that run is missing); the report writes a table into the
`## Reproduction` section of a benchmark page, its rows into the page's results file."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import sys
import time

import datasets
import pytest
from conftest import REPO_ROOT, TINY_MODEL_ARGS
from transformers import AutoModelForSeq2SeqLM


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

    assert driver.main(common + ["--workers", "2"]) == 0  # two worker processes, one run each
    assert "worker starts smoke|de-en|combination|1" in capsys.readouterr().out
    records = sorted(
        (json.loads(line) for line in (work / "results.jsonl").read_text().splitlines()),
        key=lambda r: r["name"] != "vanilla",
    )
    (work / "results.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records)
    )  # vanilla first, as one process writes them
    assert [r["name"] for r in records] == ["vanilla", "combination"]
    assert sorted(p.name for p in (work / "logs").iterdir()) == [
        "smoke_de-en_combination_1.log",
        "smoke_de-en_vanilla_1.log",
    ]
    for record in records:
        assert 0.0 <= record["bleu"] <= 100.0 and 0.0 <= record["chrf"] <= 100.0
        assert record["bleu_signature"].startswith("nrefs:1|") and "tok:13a" in record["bleu_signature"]
        assert record["chrf_signature"].startswith("nrefs:1|")
        assert record["mode"] == "smoke" and record["seed"] == 1 and os.path.isfile(record["hypotheses"])
        assert record["date"] == time.strftime("%Y-%m-%d")

    capsys.readouterr()
    assert (
        driver.main(common + ["--report", "--run", "--benchmarks", str(benchmarks), "--plot_dir", str(tmp_path)]) == 0
    )
    assert "skip (already in results.jsonl)" in capsys.readouterr().out  # resumable: nothing retrained
    assert len((work / "results.jsonl").read_text().splitlines()) == 2
    text = benchmarks.read_text()
    assert text.startswith("# Benchmarks\n\n## Speed\n\nkept as it is\n")  # only the new section is touched
    section = text[text.index("## Reproduction") :]
    assert "### xl-combination (smoke mode)" in section and "| combination | de-en | 1 |" in section
    # the XL PE run is also decoded with oracle positions in the same xlpe-train run: its row beside the predicted
    assert "oracle_bleu" in records[1] and "oracle_bleu" not in records[0]
    assert "| XL PE run | pair | seeds | BLEU, predicted positions | BLEU, oracle positions |" in section
    assert "| combination | de-en | 1 | " in section
    assert "Mode(s): **smoke**" in section and f"Date: {records[0]['date']}." in section
    # the numbers live in results/<page>.json beside the page; the page shows them between markers
    tables = json.loads((tmp_path / "results" / "BENCHMARKS.json").read_text())["tables"]
    assert ["combination", "de-en", "1"] == tables["BENCHMARKS/xl-combination-smoke-mode"]["rows"][1][:3]
    assert "<!-- table: BENCHMARKS/xl-combination-smoke-mode -->" in section

    # noise ratio 0 is the clean Combination model: its result is reused, nothing is trained
    monkeypatch.setattr(driver.reproduction, "NOISE_RATIOS", (0.0,))
    runs_before = sorted(p.name for p in (work / "runs").iterdir())
    # (--max_minutes already past: a reused result costs no time, so it is still recorded)
    assert (
        driver.main(
            ["--mode", "smoke", "--groups", "noise", "--seeds", "1", "--work_dir", str(work), "--max_minutes", "1e-6"]
        )
        == 0
    )
    records = [json.loads(line) for line in (work / "results.jsonl").read_text().splitlines()]
    reused = records[-1]
    assert len(records) == 3 and reused["name"] == "combination-noise0.0" and reused["group"] == "noise"
    assert reused["same_as"] == "smoke|de-en|combination|1" and reused["data"] == "noise0.0"
    assert (reused["bleu"], reused["hypotheses"]) == (records[1]["bleu"], records[1]["hypotheses"])
    assert sorted(p.name for p in (work / "runs").iterdir()) == runs_before
    capsys.readouterr()
    assert driver.main(["--report", "--work_dir", str(work), "--plot_dir", str(tmp_path)]) == 0
    assert "| combination-noise0.0 (= combination) | de-en | 1 |" in capsys.readouterr().out

    # bench/studies/predictor_variants.py: the Combination model's predictor retrained as is and without dropout, on its
    # frozen input; tau and BLEU of each, the report pairs the second with the first
    spec = importlib.util.spec_from_file_location(
        "predictor_variants", REPO_ROOT / "bench" / "studies" / "predictor_variants.py"
    )
    variants = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(variants)
    base = ["--work_dir", str(work), "--pair", "de-en", "--run", "combination", "--seeds", "1"]
    variants.main(base + ["--variant", "default:", "--variant", "d0:reorder_predictor_dropout=0.0", "--decode"])
    (line,) = [json.loads(text) for text in (work / "predictor_variants.jsonl").read_text().splitlines()]
    assert list(line["variants"]) == ["default", "d0"] and -1.0 <= line["joint_tau"] <= 1.0
    assert line["variants"]["d0"]["overrides"] == {"reorder_predictor_dropout": 0.0}
    for result in line["variants"].values():
        assert -1.0 <= result["tau"] <= 1.0 and 0.0 <= result["bleu"] <= 100.0 and os.path.isfile(result["hypotheses"])
    saved = json.loads((work / "runs" / "de-en-combination-predictor-d0-p1-seed1" / "config.json").read_text())
    assert saved["reorder_predictor_dropout"] == 0.0
    capsys.readouterr()
    variants.main(["--work_dir", str(work), "--report"])
    table = capsys.readouterr().out
    assert "| de-en (combination) | default | 1 / 1 |" in table and "| de-en (combination) | d0 | 1 / 1 |" in table
    with pytest.raises(SystemExit):  # a field that is not the predictor's: refused
        variants.main(base + ["--variant", "x:d_model=64"])
    # a rerun reuses what is recorded (no second line, no double count in the report) ...
    variants.main(base + ["--variant", "default:", "--variant", "d0:reorder_predictor_dropout=0.0", "--decode"])
    assert "skip (already recorded)" in capsys.readouterr().out
    assert len((work / "predictor_variants.jsonl").read_text().splitlines()) == 1
    # ... and refuses a recorded name with other overrides, or a work dir that is not one (one line, exit 2)
    for argv in (base + ["--variant", "d0:reorder_predictor_dropout=0.2"], ["--work_dir", str(tmp_path), "--report"]):
        with pytest.raises(SystemExit) as stop:
            variants.main(argv)
        assert stop.value.code == 2

    # a variant of the predictor's FFN width, reported against a named reference (its run dir named without the
    # name's spaces and commas); a width given alone keeps the FFN at 4 x that width, as a new config would
    variants.main(
        base + ["--variant", "ffn 8, d0:reorder_predictor_dropout=0.0,reorder_predictor_ffn_size=8", "--decode"]
    )
    saved = json.loads((work / "runs" / "de-en-combination-predictor-ffn-8-d0-p1-seed1" / "config.json").read_text())
    assert saved["reorder_predictor_ffn_size"] == 8
    capsys.readouterr()
    variants.main(["--work_dir", str(work), "--report", "--reference", "d0"])
    table = capsys.readouterr().out
    assert "| Δtau vs d0 |" in table and "| de-en (combination) | ffn 8, d0 | 1 / 1 |" in table
    assert table.index("| de-en (combination) | d0 |") < table.index("| de-en (combination) | default |")
    trained = AutoModelForSeq2SeqLM.from_pretrained(str(work / "runs" / "de-en-combination-seed1"))
    mode = variants.reproduction.MODES["smoke"]
    train = datasets.load_from_disk(str(variants.reproduction.prepared_dir(work, "de-en", "clean", mode)))["train"]
    for overrides, ffn in (({"reorder_predictor_ffn_size": 8}, 8), ({"reorder_predictor_hidden_size": 4}, 16)):
        model = variants.train_predictor(copy.deepcopy(trained), overrides, {**mode, "steps": 1}, train, 0)
        assert model.get_encoder().reorder_predictor.encoder.layers[0].linear1.out_features == ffn

    # ... and when the run it reuses has not been made, it is reported as not run, not silently dropped
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "results.jsonl").write_text(json.dumps(records[0]) + "\n")  # vanilla only
    capsys.readouterr()
    assert driver.main(["--mode", "smoke", "--groups", "noise", "--seeds", "1", "--work_dir", str(fresh)]) == 0
    assert "not yet run: smoke|de-en|combination-noise0.0|1 reuses 'combination'" in capsys.readouterr().out
    assert len((fresh / "results.jsonl").read_text().splitlines()) == 1

    with pytest.raises(SystemExit, match="--only 'smoke|de-en|nonexistent|1' is not a run"):
        driver.main(
            [
                "--mode",
                "smoke",
                "--groups",
                "xl",
                "--seeds",
                "1",
                "--work_dir",
                str(fresh),
                "--only",
                "smoke|de-en|nonexistent|1",
            ]
        )

    with pytest.raises(SystemExit, match="holds smoke-mode runs; use another --work_dir for --mode cpu"):
        driver.main(["--mode", "cpu", "--groups", "xl", "--seeds", "1", "--work_dir", str(fresh)])

    # init group: Table 5's deeper encoders and the baselines again with a small init of the linear layers; the
    # runs it shares with other groups (vanilla, combination) are reused by key and shown in its table
    capsys.readouterr()
    assert (
        driver.main(
            [
                "--mode",
                "smoke",
                "--groups",
                "init",
                "--seeds",
                "1",
                "--work_dir",
                str(work),
                "--report",
                "--run",
                "--plot_dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    records = {r["name"]: r for r in map(json.loads, (work / "results.jsonl").read_text().splitlines())}
    assert {"init-vanilla", "table5-8E", "init-8E", "table5-10E", "init-10E", "init-combination"} <= set(records)
    layers = driver.MODES["smoke"]["layers"]
    for name, depth, init_std in (
        ("init-8E", layers + 2, 0.02),
        ("table5-10E", layers + 4, driver.MODES["smoke"]["d_model"] ** -0.5),
    ):
        config = json.loads((work / "runs" / f"de-en-{name}-seed1" / "config.json").read_text())
        assert (config["encoder_layers"], config["decoder_layers"]) == (depth, layers)
        assert config["init_std"] == pytest.approx(init_std)
    table = capsys.readouterr().out.split("### init (smoke mode)")[1].split("###")[0]
    assert (
        "| combination | de-en | 1 |" in table and "| init-combination | de-en | 1 |" in table
    )  # combination: from xl-combination


def test_init_probe_table(capsys):
    """bench/studies/init_probe.py: one row per (width, init), cosines in [-1, 1]; at init, the small linear init keeps
    the tokens of a 3-layer encoder more distinct than gain-1 linears."""
    spec = importlib.util.spec_from_file_location("init_probe", REPO_ROOT / "bench" / "studies" / "init_probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    assert probe.main(["--d_model", "64", "--layers", "1,3"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 64 |")]
    cells = {
        row.split(" | ")[1]: [tuple(map(float, c.split(" / "))) for c in row.strip(" |").split(" | ")[2:]]
        for row in rows
    }
    assert set(cells) == set(probe.INITS)
    assert all(-1.0 <= v <= 1.0 for pairs in cells.values() for pair in pairs for v in pair)
    (_, gain_one_deep), (_, small_deep) = cells["all d^-1/2"][1], cells["emb d^-1/2, linear 0.02"][1]
    assert small_deep > gain_one_deep  # own-token cosine after 3 layers


def test_depth_check_trains_both_backends_on_the_same_batches(capsys):
    """bench/studies/depth_check.py: a row per (depth, backend) with a finite loss; pre-LN is the torch backend's
    alone."""
    spec = importlib.util.spec_from_file_location("depth_check", REPO_ROOT / "bench" / "studies" / "depth_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    assert (
        check.main(["--steps", "3", "--warmup_steps", "1", "--train_pairs", "64", "--depths", "1+1", "--d_model", "16"])
        == 0
    )
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| 1+1 |")]
    assert [row[1] for row in rows] == ["marian", "torch"]
    assert all(0.0 < float(row[2]) < 20.0 for row in rows)  # validation loss in nats, not NaN
    with pytest.raises(SystemExit):
        check.main(["--norm_first", "--backends", "marian,torch"])
    assert "--norm_first applies to the torch backend only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        check.main(["--depths", "6x2"])
    assert "--depths: '6x2' is not ENCODER+DECODER layers" in capsys.readouterr().err


@pytest.mark.slow  # a whole bench driver; the driver's core path: test_reproduce_smoke_vanilla_vs_combination
def test_speed_driver_counts_flops_of_every_family_beside_its_baseline(capsys):
    """bench/speed.py (driver + benchlib) end to end in its cheapest mode: one row per model, ratios vs stock."""
    spec = importlib.util.spec_from_file_location("speed", REPO_ROOT / "bench" / "speed.py")
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)
    speed.main(["--flops-only", "--families", "xlpe"])
    out = capsys.readouterr().out
    assert "| Marian | — |" in out and "| XL PE combination | Marian |" in out and "(×1.0" in out


@pytest.mark.slow  # a whole bench driver; the driver's core path: test_reproduce_smoke_vanilla_vs_combination
def test_oracle_stability_driver(capsys, shared_dir, monkeypatch):
    """bench/studies/oracle_stability.py on a small slice: a row per K with τ in [-1, 1], and the symmetrisation row."""
    monkeypatch.setenv("XLPE_SHARED_DIR", str(shared_dir))
    spec = importlib.util.spec_from_file_location(
        "oracle_stability", REPO_ROOT / "bench" / "studies" / "oracle_stability.py"
    )
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    assert driver.main(["--pairs", "de-en", "--limit", "150", "--runs", "1,3"]) == 0
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| de-en | 150 |")]
    stability = [row for row in rows if len(row) == 6]
    assert [row[2] for row in stability] == ["1", "3"] and all(-1.0 <= float(row[3]) <= 1.0 for row in stability)
    assert len([row for row in rows if len(row) == 4]) == 1  # reference vs previous grow-diag-final-and


@pytest.mark.slow  # a whole bench driver; the driver's core path: test_reproduce_smoke_vanilla_vs_combination
def test_reorderer_words_driver(tmp_path, capsys):
    """bench/studies/reorderer_words.py on a tiny XL PE model: both rows, and ranking whole words never splits one."""
    from xlpe.training.run import main as xlpe_train

    xlpe_train(
        [
            "--output_dir",
            str(tmp_path / "run"),
            "--cache_dir",
            str(tmp_path / "cache"),
            *TINY_MODEL_ARGS,
            "--max_train_samples",
            "64",
            "--max_predict_samples",
            "8",
            "--tokenizer_vocab_size",
            "300",
            "--tokenizer_model",
            "unigram",
            "--max_steps",
            "2",
            "--do_train",
            "--do_predict",
            "--save_strategy",
            "no",
            "--report_to",
            "none",
        ]
    )
    prepared = next((tmp_path / "cache" / "prepared").glob("xlpe-prepare-*/data"))
    spec = importlib.util.spec_from_file_location(
        "reorderer_words", REPO_ROOT / "bench" / "studies" / "reorderer_words.py"
    )
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    capsys.readouterr()
    assert driver.main(["--model", str(tmp_path / "run"), "--prepared", str(prepared), "--num_beams", "1"]) == 0
    rows = {
        line.split(" | ")[0].strip("| "): line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")
    }
    assert set(rows) >= {"pieces (reorder_unit=token)", "words (reorder_unit=word)"}
    split, words = rows["words (reorder_unit=word)"].rstrip(" |").split(" | ")[-1].split(" ")[0].split("/")
    assert split == "0" and int(words) > 0  # multi-piece words exist (unigram, 300 pieces) and none is split

    # bench/studies/reorderer.py on the same corpus: the standalone reorderer (both decoders: the rank decoder needs the
    # pairwise loss, so both losses are summed here) next to the built-in predictor
    spec = importlib.util.spec_from_file_location("reorderer_bench", REPO_ROOT / "bench" / "studies" / "reorderer.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    record = bench.main(
        [
            "--prepared",
            str(prepared),
            "--tokenizer",
            str(tmp_path / "run"),
            "--output_dir",
            str(tmp_path / "reorderer"),
            "--model",
            str(tmp_path / "run"),
            "--epochs",
            "1",
            "--config",
            '{"training_loss": "pairwise+btg_crf"}',
        ]
    )
    prior = record["order_prior"]  # chosen on a held-out tenth of the training pairs
    named = {
        f"standalone reorderer, btg decoder, order prior {prior}",
        f"standalone reorderer, rank decoder, order prior {prior}",
        "built-in ranking predictor (in-model)",
        "monotone",
    } | ({"standalone reorderer, btg decoder, order prior 0"} if prior else set())
    held_out = len(__import__("datasets").load_from_disk(str(prepared))["train"]) // 10
    assert set(record["rows"]) == named and record["calibration_pairs"] == held_out > 0
    assert all(-1.0 <= row["kendall_tau"] <= 1.0 and row["sentences"] > 0 for row in record["rows"].values())
    # xlpe-train --reorderer: the trained model decodes its test split with the standalone reorderer's positions
    metrics = xlpe_train(
        [
            "--model_name_or_path",
            str(tmp_path / "run"),
            "--reorderer",
            str(tmp_path / "reorderer"),
            "--output_dir",
            str(tmp_path / "with_reorderer"),
            "--cache_dir",
            str(tmp_path / "cache"),
            "--max_train_samples",
            "16",
            "--max_predict_samples",
            "8",
            "--max_steps",
            "1",
            "--do_train",
            "--do_predict",
            "--save_strategy",
            "no",
            "--report_to",
            "none",
        ]
    )
    assert "predict_bleu" in metrics
    saved = json.loads((tmp_path / "with_reorderer" / "config.json").read_text())
    assert saved["reorderer_config"]["model_type"] == "xlpe_reorderer"


def test_reorderer_bench_prepares_raw_files(tmp_path):
    """bench/studies/reorderer.py --raw: tokenizer, joint alignment and oracle features made from raw files."""
    import random

    rng = random.Random(0)
    words = "the cat dog sees chases small red ball man reads book garden".split()
    sources = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 6))) for _ in range(60)]
    files = []
    for name, lines in [
        ("train.src", sources[:50]),
        ("train.tgt", [s.upper() for s in sources[:50]]),
        ("test.src", sources[50:]),
        ("test.tgt", [s.upper() for s in sources[50:]]),
    ]:
        (tmp_path / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        files.append(str(tmp_path / name))
    spec = importlib.util.spec_from_file_location(
        "reorderer_bench_raw", REPO_ROOT / "bench" / "studies" / "reorderer.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    record = bench.main(
        [
            "--raw",
            *files,
            "--output_dir",
            str(tmp_path / "out"),
            "--epochs",
            "1",
            "--config",
            '{"d_model": 32, "ffn_dim": 64, "token_layers": 1}',
        ]
    )
    assert (record["train_pairs"], record["calibration_pairs"]) == (45, 5) and record["rows"]["monotone"][
        "sentences"
    ] == 10
    assert (tmp_path / "out" / "prepared" / "tokenizer" / "tokenizer.json").is_file()


def test_language_pairs_of_the_shared_data(shared_dir, monkeypatch, capsys):
    """--pair: every pair of the shared data loads at the mode's sizes; zh-en is split by English sentence (no
    test reference in training) with jieba-segmented Chinese; groups tied to their data refuse another pair."""
    monkeypatch.setenv("XLPE_SHARED_DIR", str(shared_dir))
    driver = load_driver()
    reproduction = driver.reproduction
    mode = dict(reproduction.MODES["smoke"], train=2000, val=50, test=100)
    for pair in reproduction.PAIRS:
        splits = reproduction.raw_splits(pair, mode)
        sizes = [len(splits[s].sources) for s in ("train", "validation", "test")]
        assert sizes == [2000, 50, 100], (pair, sizes)
        for split in splits.values():
            assert len(split.sources) == len(split.targets) and all(
                s.strip() and t.strip() for s, t in zip(split.sources, split.targets)
            )
    zh_en = reproduction.raw_splits("zh-en", dict(mode, train=10**6))
    assert not set(zh_en["test"].targets) & set(zh_en["train"].targets)  # split by English sentence
    assert not set(zh_en["test"].targets) & set(zh_en["validation"].targets)
    assert all(" " in s for s in zh_en["test"].sources[:20])  # segmented into words
    assert len(zh_en["train"].sources) + 150 > 28000  # every other pair of the file is training data
    assert reproduction.raw_splits("zh-en", mode)["test"].targets == zh_en["test"].targets  # the split is fixed
    runs = reproduction.for_pair(reproduction.group_runs("baselines", mode), "en-ja", "baselines")
    assert {spec["pair"] for spec in runs} == {"en-ja"}
    with pytest.raises(SystemExit, match="group 'alignment' runs on en-fr only"):
        driver.main(["--groups", "alignment", "--pair", "en-ja"])
    with pytest.raises(SystemExit, match="unknown --pair 'en-xx'"):
        driver.main(["--groups", "xl", "--pair", "en-xx"])


def test_reorderer_group_resolves_the_pair_reorderer(monkeypatch, tmp_path):
    """The `reorderer` group's third run gets the pair's standalone reorderer (trained once per pair) as --reorderer."""
    driver = load_driver()
    reproduction = driver.reproduction
    runs = reproduction.for_pair(
        reproduction.group_runs("reorderer", reproduction.MODES["smoke"]), "en-ja", "reorderer"
    )
    assert [spec["name"] for spec in runs] == ["vanilla", "combination", "combination+reorderer"]
    trained = []
    monkeypatch.setattr(
        reproduction, "reorderer_dir", lambda work, pair, mode: trained.append(pair) or tmp_path / pair / "reorderer"
    )
    fields = reproduction.resolved_fields(tmp_path, runs[2], reproduction.MODES["smoke"])
    assert fields == {"xl_strategy": "combination", "reorderer": str(tmp_path / "en-ja" / "reorderer")} and trained == [
        "en-ja"
    ]
    assert reproduction.resolved_fields(tmp_path, runs[1], reproduction.MODES["smoke"]) == {
        "xl_strategy": "combination"
    }
    args = reproduction.train_args(
        reproduction.MODES["smoke"], tmp_path / "out", 1, "en-ja", tmp_path / "tok", "xlpe", fields
    )
    assert args[args.index("--reorderer") + 1] == str(tmp_path / "en-ja" / "reorderer")


def test_tagged_runs_take_the_pairs_offline_taggers(tmp_path, capsys):
    """The `pos` / `table1` rows with POS tags get each side's offline tagger (nltk-en, jieba-zh); a side without
    one gets none (mvPE+POS then tags its encoder only); a source without one leaves the rows out, with a note."""
    reproduction = load_driver().reproduction
    mode = reproduction.MODES["smoke"]
    names = lambda runs: [spec["name"] for spec in runs]  # noqa: E731
    assert names(reproduction.group_runs("pos", mode)) == [
        "vanilla",
        "combination",
        "combination+pos",
        "mvpe_pos-steps",
        "mvpe-steps",
        "sinusoid-steps",
    ]
    table = reproduction.group_runs("table1", mode)
    assert {
        "relative",
        "disan",
        "in",
        "head",
        "combination+relative",
        "combination+reorderer",
        "combination+pos",
        "mvpe_pos-steps",
        "mvpe-steps",
        "dpe-lambda0.5",
        "2pt",
    } <= set(names(table))
    assert len(set(names(table))) == len(table)
    de_en = names(reproduction.for_pair(table, "de-en", "table1"))
    assert "combination+pos" in de_en and "mvpe_pos-steps" in de_en  # German: the tagger trained on UD German-GSD
    assert not reproduction.has_source_tagger(table[0], "ja-en")  # a language with neither: its tagged rows left out
    assert "no offline POS tagger for 'ja'" in capsys.readouterr().out
    zh_en = {spec["name"]: spec for spec in reproduction.for_pair(reproduction.group_runs("pos", mode), "zh-en", "pos")}
    assert zh_en["combination+pos"]["data"] == "tagged"
    assert reproduction.resolved_fields(tmp_path, zh_en["mvpe_pos-steps"], mode) == {
        "source_tagger": "jieba-zh",
        "target_tagger": "nltk-en",
        "nltk_data": str(reproduction.NLTK_DATA),
        "config_overrides": f"pos_dim={mode['d_model'] // 4}",
    }
    en_ja = reproduction.for_pair([zh_en["mvpe_pos-steps"]], "en-ja", "pos")[0]
    assert reproduction.resolved_fields(tmp_path, en_ja, mode)["source_tagger"] == "nltk-en"
    assert "target_tagger" not in reproduction.resolved_fields(tmp_path, en_ja, mode)


def test_dpe_paper_group_builds_the_published_settings():
    """`dpe-paper`: DPE with the gate fixed at 1 (the paper's X + r) and with the reference code's loss weighting;
    the overrides are real DPEMarianConfig fields (a misspelt one would silently train the default model)."""
    from xlpe.models import DPEMarianConfig
    from xlpe.training.model_setup import parse_config_overrides

    reproduction = load_driver().reproduction
    runs = {spec["name"]: spec for spec in reproduction.group_runs("dpe-paper", reproduction.MODES["smoke"])}
    assert list(runs) == ["vanilla", "dpe-lambda0.5", "dpe-paper-gate", "dpe-reference-loss"]
    configs = {
        name: DPEMarianConfig(
            order_loss_weight=runs[name]["fields"]["order_loss_weight"],
            **parse_config_overrides(runs[name]["fields"].get("config_overrides")),
        )
        for name in ("dpe-lambda0.5", "dpe-paper-gate", "dpe-reference-loss")
    }
    assert configs["dpe-lambda0.5"].dpe_learn_gate and not configs["dpe-paper-gate"].dpe_learn_gate
    reference = configs["dpe-reference-loss"]
    assert not reference.dpe_learn_gate
    assert (reference.order_loss_lambda_side, reference.order_loss_normalization) == ("order", "reference")
    for name, config in configs.items():
        assert set(parse_config_overrides(runs[name]["fields"].get("config_overrides"))) <= set(config.to_dict()), name


def test_xl_forms_group_builds_xl_relative_and_rotary_models_beside_their_parts():
    """`xl-forms`: every XL run is a real XL PE config in relative or rotary form (tau heads of layer 1,
    or every layer), compared with its non-XL counterpart; the reorderer rows take the pair's reorderer."""
    from xlpe.models import XLPEMarianConfig, XLPEMarianMTModel
    from xlpe.training.model_setup import parse_config_overrides

    reproduction = load_driver().reproduction
    mode = reproduction.MODES["smoke"]
    runs = {spec["name"]: spec for spec in reproduction.group_runs("xl-forms", mode)}
    assert list(runs) == [
        "vanilla",
        "relative",
        "rope",
        "xl-relative",
        "xl-relative-all",
        "xl-rope",
        "xl-rope-all",
        "xl-relative+reorderer",
        "xl-relative-all+reorderer",
        "xl-rope+reorderer",
        "xl-rope-all+reorderer",
    ]
    expected = {
        "xl-relative": ("relative", "first"),
        "xl-relative-all": ("relative", "all"),
        "xl-rope": ("rotary", "first"),
        "xl-rope-all": ("rotary", "all"),
    }
    for name in expected:  # each XL model is decoded again with the pair's reorderer: no model of its own
        again = runs[f"{name}+reorderer"]
        assert (again["kind"], again["model_of"], again["fields"]) == (
            "retest",
            name,
            {"reorderer": reproduction.PAIR_REORDERER},
        )
        counterpart = "relative" if "relative" in name else "rope"
        assert reproduction.COMPONENTS[f"{name}+reorderer"] == (counterpart, name)
    small = dict(
        d_model=16,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_layers=2,
        decoder_layers=1,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        vocab_size=30,
        pad_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        reorder_predictor_hidden_size=8,
    )
    for name in ("relative", "rope", *expected):
        fields = dict(runs[name]["fields"])
        overrides = parse_config_overrides(fields.pop("config_overrides"))
        config = XLPEMarianConfig(**small, xl_strategy=fields.pop("xl_strategy"), **overrides)
        assert set(overrides) <= set(config.to_dict()), name  # no misspelt field
        model = XLPEMarianMTModel(config)
        if name in expected:
            assert (config.xl_position_form, config.xl_position_layers) == expected[name]
            xl_layers = [layer.self_attn.xl_heads > 0 for layer in model.model.encoder.layers]
            assert xl_layers == ([True, True] if expected[name][1] == "all" else [True, False]), name
        assert not config.absolute_positions  # every row of the group compares position forms without a sinusoid
    for name, parts in {"xl-relative": ("relative",), "xl-rope": ("rope",), "xl-rope-all": ("rope", "xl-rope")}.items():
        assert reproduction.COMPONENTS[name] == parts


@pytest.mark.slow  # trains an XL model and a reorderer (~2 CPU-minutes); the rows' specs: the xl-forms group test
def test_reorderer_rows_decode_the_saved_xl_model_again_without_training(tmp_path, shared_dir, monkeypatch, capsys):
    """A `+reorderer` row of xl-forms trains nothing: it waits for its XL run, then decodes that run's saved model
    with the pair's standalone reorderer's positions (its own directory and hypotheses; the model untouched; with
    oracle positions the same weights give the same lines), and the report compares it with its counterpart and
    with the built-in predictor's positions."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("XLPE_SHARED_DIR", str(shared_dir))
    driver = load_driver()
    work = tmp_path / "work"
    common = ["--mode", "smoke", "--groups", "xl-forms", "--seeds", "1", "--work_dir", str(work), "--only"]
    assert driver.main(common + ["smoke|de-en|xl-rope+reorderer|1"]) == 0
    assert "not yet run: smoke|de-en|xl-rope+reorderer|1 decodes the model of smoke|de-en|xl-rope|1" in (
        capsys.readouterr().out
    )
    assert not (work / "results.jsonl").is_file()
    assert driver.main(common + ["smoke|de-en|xl-rope|1"]) == 0
    base = work / "runs" / "de-en-xl-rope-seed1"
    weights = (base / "model.safetensors").read_bytes()
    assert driver.main(common + ["smoke|de-en|xl-rope+reorderer|1"]) == 0
    base_record, again = driver.reproduction.read_results(work / "results.jsonl")
    assert (again["kind"], again["model_of"]) == ("retest", "smoke|de-en|xl-rope|1")
    assert again["fields"] == {"reorderer": driver.reproduction.PAIR_REORDERER}
    assert again["hypotheses"] == str(work / "runs" / "de-en-xl-rope+reorderer-seed1" / "hypotheses.txt")
    assert (base / "model.safetensors").read_bytes() == weights and (work / "data" / "de-en" / "reorderer").is_dir()
    assert again["oracle_bleu"] == base_record["oracle_bleu"]  # the same weights decode the oracle order alike
    assert open(again["oracle_hypotheses"]).read() == open(base_record["oracle_hypotheses"]).read()
    with pytest.raises(ValueError, match="kind 'retest' and model_of go together"):
        driver.reproduction.run("x", "xlpe", model_of="xl-rope")


def test_every_run_keeps_its_own_hypotheses(tmp_path, capsys):
    """Each (pair, run, seed) has its own directory (2PT's seeds used to write runs/hypotheses.txt, one file for
    all of them), and the report refuses a results file whose different models share a hypothesis file, while a run
    that reuses another's model (`same_as`) may point to that model's file."""
    driver = load_driver()
    reproduction = driver.reproduction
    spec = next(s for s in reproduction.group_runs("2pt", reproduction.MODES["smoke"]) if s["name"] == "2pt")
    dirs = {
        reproduction.run_dir(tmp_path, spec, seed, suffix)
        for seed in (1, 2)
        for suffix in ("", "-reorderer", "-translator")
    }
    assert len(dirs) == 6 and all(d.parent == tmp_path / "runs" for d in dirs)

    shared = tmp_path / "runs" / "hypotheses.txt"
    shared.parent.mkdir(parents=True)
    shared.write_text("a\n", encoding="utf-8")
    record = dict(
        group="2pt",
        mode="smoke",
        name="2pt",
        pair="de-en",
        bleu=1.0,
        chrf=1.0,
        hypotheses=str(shared),
        bleu_signature="s",
        chrf_signature="c",
        date="2026-11-25",
    )
    records = [dict(record, key="smoke|de-en|2pt|1", seed=1), dict(record, key="smoke|de-en|2pt|2", seed=2)]
    reused = dict(record, key="smoke|de-en|2pt-again|1", seed=1, same_as="smoke|de-en|2pt|1")
    assert sys.modules[driver.report.__module__].shared_hypotheses([records[0], reused]) == {}
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    clash = r"2 runs share the hypothesis file .*hypotheses.txt \(smoke\|de-en\|2pt\|1, smoke\|de-en\|2pt\|2\)"
    with pytest.raises(SystemExit, match=clash):
        driver.main(["--report", "--work_dir", str(tmp_path)])


@pytest.mark.slow  # a whole bench driver; the driver's core path: test_reproduce_smoke_vanilla_vs_combination
def test_a_german_source_is_tagged_by_a_tagger_trained_on_ud_german_gsd(tmp_path, shared_dir, monkeypatch, capsys):
    """de-en's tagged rows: the tagger is trained once per work dir ("perceptron:<file>", STTS tags), the tagged
    preparation tags the German source with it, and a tagged XL PE run trains, scores, and ships the tagger file."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("XLPE_SHARED_DIR", str(shared_dir))
    driver = load_driver()
    reproduction = driver.reproduction
    work = tmp_path / "work"
    table = reproduction.group_runs("table1", reproduction.MODES["smoke"])
    spec = {s["name"]: s for s in reproduction.for_pair(table, "de-en", "table1")}
    fields = reproduction.resolved_fields(work, spec["mvpe_pos-steps"], reproduction.MODES["smoke"])
    tagger_file = work / "data" / "taggers" / "de-xpos.json"
    assert fields["source_tagger"] == f"perceptron:{tagger_file}" and fields["target_tagger"] == "nltk-en"
    assert json.loads(tagger_file.read_text())["details"]["sentences"] == 799 + 977
    common = ["--mode", "smoke", "--groups", "table1", "--pair", "de-en", "--seeds", "1", "--work_dir", str(work)]
    assert driver.main(common + ["--only", "smoke|de-en|combination+pos|1"]) == 0
    record = json.loads((work / "results.jsonl").read_text().splitlines()[-1])
    assert record["name"] == "combination+pos" and 0.0 <= record["bleu"] <= 100.0
    model_dir = os.path.dirname(record["hypotheses"])
    config = json.loads(open(os.path.join(model_dir, "config.json")).read())
    assert config["pos_tagger"] == "perceptron:pos_tagger.json" and "NN" in config["pos_tags"]  # STTS
    assert os.path.isfile(os.path.join(model_dir, "pos_tagger.json"))


def test_stacked_runs_are_compared_with_their_parts(tmp_path, capsys):
    """A stacked run (XL PE + POS, XL PE + relative PE, mvPE + tags) is tested against each of its parts per seed,
    not only against vanilla: here Combination + POS reproduces the references and beats Combination in every
    seed, while Combination + relative PE decodes exactly what relative PE does (+0.00, within noise)."""
    import datasets

    driver = load_driver()
    report_module = sys.modules[driver.report.__module__]
    words = "a man rides a red bike down the hill while two dogs run after him in the rain".split()
    references = [" ".join(words[i % 7 :] + words[: i % 7]) for i in range(80)]
    datasets.DatasetDict(
        {"test": datasets.Dataset.from_dict({"source_text": references, "target_text": references})}
    ).save_to_disk(str(tmp_path / "data" / "de-en" / "clean"))
    garbled = [" ".join(r.split()[::-1][:6]) for r in references]
    half = [r if i % 2 else g for i, (r, g) in enumerate(zip(references, garbled))]
    outputs = {
        "vanilla": garbled,
        "combination": half,
        "combination+pos": references,
        "relative": references,
        "combination+relative": references,
    }
    records = []
    for seed in (1, 2, 3):
        for name, lines in outputs.items():
            path = tmp_path / "runs" / f"{name}-{seed}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            records.append(
                dict(
                    group="table1",
                    mode="smoke",
                    name=name,
                    pair="de-en",
                    seed=seed,
                    key=f"smoke|de-en|{name}|{seed}",
                    kind="train",
                    bleu=1.0,
                    chrf=1.0,
                    hypotheses=str(path),
                    bleu_signature="s",
                    chrf_signature="c",
                    date="2026-11-26",
                )
            )
    table = report_module.components_table(records, tmp_path)
    rows = {
        tuple(cell.strip() for cell in line.split("|")[1:3]): line for line in table if line.startswith("| combination")
    }
    assert set(rows) == {
        ("combination+relative", "relative"),
        ("combination+relative", "combination"),
        ("combination+pos", "combination"),
    }
    assert "better (significant in 3/3 seeds" in rows["combination+pos", "combination"]
    assert (
        "| +0.00 |" in rows["combination+relative", "relative"]
        and "within noise (significant in 0/3" in rows["combination+relative", "relative"]
    )
    assert "better (significant in 3/3 seeds" in rows["combination+relative", "combination"]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert (
        driver.main(
            [
                "--report",
                "--work_dir",
                str(tmp_path),
                "--report_groups",
                "table1",
                "--plot_dir",
                str(tmp_path / "plots"),
            ]
        )
        == 0
    )
    assert "| combination+pos | combination | de-en | 3 |" in capsys.readouterr().out


def test_runs_of_two_pairs_in_one_work_dir_are_never_pooled(tmp_path):
    """One work dir may hold the same runs on several pairs (`--pair en-ja` after the de-en runs): every table row
    is one pair's seeds (the main table, oracle vs predicted, each run against its parts, 2PT), never both pairs'
    seeds as one row under the first pair's name."""
    import datasets

    driver = load_driver()
    report_module = sys.modules[driver.report.__module__]
    words = "a man rides a red bike down the hill while two dogs run after him in the rain".split()
    references = [" ".join(words[i % 7 :] + words[: i % 7]) for i in range(60)]
    garbled = [" ".join(r.split()[::-1][:6]) for r in references]
    half = [r if i % 2 else g for i, (r, g) in enumerate(zip(references, garbled))]
    outputs = {"vanilla": garbled, "relative": half, "xl-relative": references}
    records = []
    for pair, seeds in (("de-en", (1, 2)), ("en-de", (1,))):
        datasets.DatasetDict(
            {"test": datasets.Dataset.from_dict({"source_text": references, "target_text": references})}
        ).save_to_disk(str(tmp_path / "data" / pair / "clean"))
        for seed in seeds:
            for name, lines in outputs.items():
                path = tmp_path / "runs" / f"{pair}-{name}-{seed}.txt"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("\n".join(lines) + "\n", encoding="utf-8")
                record = dict(
                    group="xl-forms",
                    mode="smoke",
                    name=name,
                    pair=pair,
                    seed=seed,
                    key=f"smoke|{pair}|{name}|{seed}",
                    kind="train",
                    bleu=10.0 if pair == "de-en" else 30.0,
                    chrf=1.0,
                    hypotheses=str(path),
                    bleu_signature="s",
                    chrf_signature="c",
                )
                if name == "xl-relative":
                    record.update(oracle_hypotheses=str(path), oracle_bleu=record["bleu"] + 1)
                records.append(record)
    records.append({**records[0], "name": "2pt", "kind": "two_pass", "oracle_bleu": 1.0, "oracle_chrf": 1.0})
    records.append({**records[-1], "pair": "en-de", "bleu": 50.0})
    text = "\n".join(report_module.group_table("xl-forms", records, tmp_path, {"smoke"}))
    for row in (
        "| vanilla | de-en | 2 | 10.00 ± 0.00 |",
        "| vanilla | en-de | 1 | 30.00 ± 0.00 |",
        "| xl-relative | de-en | 2 | 10.00 ± 0.00 | 11.00 ± 0.00 | +1.00 |",
        "| xl-relative | en-de | 1 | 30.00 ± 0.00 | 31.00 ± 0.00 | +1.00 |",
        "| xl-relative | relative | de-en | 2 |",
        "| xl-relative | relative | en-de | 1 |",
        "| 2PT (reorderer + translator) | de-en | 10.00 ± 0.00 |",
        "| 2PT (reorderer + translator) | en-de | 50.00 ± 0.00 |",
    ):
        assert row in text, row
    assert "| vanilla | de-en | 3 |" not in text and "| xl-relative | relative | de-en | 3 |" not in text


@pytest.mark.slow  # a whole bench driver; the driver's core path: test_reproduce_smoke_vanilla_vs_combination
def test_reorderer_calibration_bench_redecodes_the_runs(tmp_path, shared_dir, monkeypatch, capsys):
    """bench/studies/reorderer_calibration.py on a smoke work dir: the pair reorderer (calibrated on the validation
    split
    when trained) is calibrated again, the run is re-decoded at its own prior line for line, at prior 0 and at the
    chosen prior, and the comparisons land in a JSON file."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("XLPE_SHARED_DIR", str(shared_dir))
    driver = load_driver()
    work = tmp_path / "work"
    assert driver.main(["--mode", "smoke", "--groups", "reorderer", "--seeds", "1", "--work_dir", str(work)]) == 0
    trained = json.loads((work / "data" / "de-en" / "reorderer" / "reorderer_training.json").read_text())[
        "order_prior_calibration"
    ]
    assert trained["held_out_pairs"] > 0 and str(trained["chosen"]) in trained["by_prior"]
    spec = importlib.util.spec_from_file_location(
        "reorderer_calibration", REPO_ROOT / "bench" / "studies" / "reorderer_calibration.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    capsys.readouterr()
    result = bench.main(["--work_dir", str(work), "--pair", "de-en", "--mode", "smoke", "--prior", "1.0"])
    out = capsys.readouterr().out
    assert result["decoded_prior"] == 1.0 and set(result["test_kendall_tau"]) >= {"0.0", "1.0", "monotone"}
    seed = result["seeds"][1]
    assert seed["identical_lines_as_run"] == 30  # the smoke test split
    assert seed["prior_as_run"] == trained["chosen"] and 0.0 <= seed["p_vs_prior_0"] <= 1.0
    assert json.loads((work / "reorderer_calibration_de-en.json").read_text())["decoded_prior"] == 1.0
    assert "| prior | tau, validation |" in out and "re-decoded identically: 30 lines of 30" in out
    assert sorted(p.name for p in (work / "calibration" / "de-en").iterdir() if p.name.startswith("seed")) == sorted(
        {f"seed1-prior{p}" for p in (0.0, trained["chosen"], 1.0)}
    )


@pytest.mark.slow  # a whole bench driver; the driver's core path: test_reproduce_smoke_vanilla_vs_combination
def test_train_positions_group_trains_on_jackknifed_and_mixed_positions(tmp_path, shared_dir, monkeypatch):
    """The `train-positions` group trains Combination on the oracle, on k-fold predicted (jackknifed)
    positions, and on a mix, every one decoded with the pair reorderer. The jackknifed split keeps the oracle beside the
    predicted positions; the mixed split takes each row from one of the two, about half from each."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("XLPE_SHARED_DIR", str(shared_dir))
    import datasets

    driver = load_driver()
    reproduction = driver.reproduction
    work = tmp_path / "work"
    assert driver.main(["--mode", "smoke", "--groups", "train-positions", "--seeds", "1", "--work_dir", str(work)]) == 0
    records = {r["name"]: r for r in map(json.loads, (work / "results.jsonl").read_text().splitlines())}
    assert set(records) == {
        "vanilla",
        "combination+reorderer",
        "combination-jackknife+reorderer",
        "combination-mixed+reorderer",
    }
    assert {records[n]["data"] for n in records} == {"clean", "jackknife", "jackknife-mixed"}
    assert all(
        r["fields"].get("reorderer") == reproduction.PAIR_REORDERER for n, r in records.items() if n != "vanilla"
    )
    clean = datasets.load_from_disk(str(work / "data" / "de-en" / "clean"))["train"]["reorder_positions"]
    jackknifed = datasets.load_from_disk(str(work / "data" / "de-en" / "jackknife"))["train"]
    mixed = datasets.load_from_disk(str(work / "data" / "de-en" / "jackknife-mixed"))["train"]
    assert jackknifed["oracle_reorder_positions"] == clean == mixed["oracle_reorder_positions"]
    predicted = jackknifed["reorder_positions"]
    assert all(sorted(p) == sorted(o) for p, o in zip(predicted, clean))  # a permutation of the same positions
    differs = [p != o for p, o in zip(predicted, clean)]
    assert any(differs)  # five one-epoch smoke reorderers do not reproduce the oracle
    took_predicted = [m == p for m, p, d in zip(mixed["reorder_positions"], predicted, differs) if d]
    assert all(m in (p, o) for m, p, o in zip(mixed["reorder_positions"], predicted, clean))
    assert 0.2 < sum(took_predicted) / len(took_predicted) < 0.8
    assert reproduction.COMPONENTS["combination-jackknife+reorderer"] == ("combination+reorderer",)
    # the hypothesis probe on the same work dir: orders read off the vanilla run's translations, the reference aligned
    # again (the ceiling), the pair reorderer with a vote for the translation's pair orders, cross-attention links
    spec = importlib.util.spec_from_file_location(
        "reorderer_probe", REPO_ROOT / "bench" / "studies" / "reorderer_probe.py"
    )
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    vanilla = work / "runs" / "de-en-vanilla-seed1"
    orders = tmp_path / "hypothesis.order"
    result = probe.main(
        [
            "hypothesis",
            "--prepared",
            str(work / "data" / "de-en" / "clean"),
            "--hypotheses",
            str(vanilla / "hypotheses.txt"),
            "--reorderer",
            str(work / "data" / "de-en" / "reorderer"),
            "--model",
            str(vanilla),
            "--write_orders",
            str(orders),
        ]
    )
    test = datasets.load_from_disk(str(work / "data" / "de-en" / "clean"))["test"]
    several = sum(len(text.split()) > 1 for text in test["source_text"])
    rows = [k for k in result if isinstance(result[k], dict)]
    assert {"hypothesis", "reference, aligned again", "hypothesis, cross-attention links"} <= set(rows)
    assert len([k for k in rows if k.startswith("reorderer + hypothesis")]) == len(probe.HYPOTHESIS_WEIGHTS)
    assert all(result[k]["sentences"] == several and -1 <= result[k]["kendall_tau"] <= 1 for k in rows)
    assert (
        result["reference, aligned again"]["kendall_tau"] > 0.5
    )  # de-en: nearly monotone, the aligner agrees with itself
    lines = orders.read_text().splitlines()
    assert len(lines) == len(test) and all(
        sorted(map(int, line.split())) == list(range(len(text.split())))
        for line, text in zip(lines, test["source_text"])
    )
    # the positions probe: the jackknifed training positions scored against the oracle kept beside them
    scored = probe.main(
        [
            "positions",
            "--prepared",
            str(work / "data" / "de-en" / "jackknife"),
            "--reorderer",
            str(work / "data" / "de-en" / "reorderer"),
        ]
    )
    several_train = sum(len(text.split()) > 1 for text in jackknifed["source_text"])
    assert scored["reorder_positions"]["sentences"] == scored["monotone"]["sentences"] == several_train
    assert scored["reorder_positions"]["exact_match"] < 1.0  # some rows differ from the oracle (asserted above)
    with pytest.raises(SystemExit, match="no oracle_reorder_positions"):
        probe.main(
            [
                "positions",
                "--prepared",
                str(work / "data" / "de-en" / "clean"),
                "--reorderer",
                str(work / "data" / "de-en" / "reorderer"),
            ]
        )


def test_finetune_group_fine_tunes_the_pretrained_checkpoint_and_tests_out_of_domain():
    """The fine-tuning study: every trained run starts from the pair's pretrained stock checkpoint on the fine-tuning
    data and is compared with continued stock fine-tuning; each is decoded again on the out-of-domain test set
    against that baseline's own decoding; the checkpoint itself is a row on both; pairs without news refuse."""
    reproduction = load_driver().reproduction
    runs = reproduction.group_runs("finetune", reproduction.MODES["cpu"])
    trained = [spec for spec in runs if spec["kind"] == "train"]
    assert [spec["name"] for spec in trained][:4] == ["ft-vanilla", "ft-in", "ft-head", "ft-combination"]
    assert {"ft-dpe", "ft-xl-rope", "ft-rope", "ft-rope-warm"} <= {spec["name"] for spec in trained}
    for spec in trained:
        assert spec["data"] == "finetune" and spec["baseline"] == "ft-vanilla"
        assert spec["fields"]["model_name_or_path"] == reproduction.PRETRAINED
    ood = {spec["model_of"]: spec for spec in runs if spec["kind"] == "retest"}
    assert set(ood) == {spec["name"] for spec in trained}
    assert all(s["data"] == "finetune-ood" and s["baseline"] == "ft-vanilla@ood" for s in ood.values())
    warm = next(spec for spec in trained if spec["name"] == "ft-rope-warm")["fields"]["config_overrides"]
    assert "rotary_warm_start_steps=300" in warm  # a quarter of the cpu mode's 1,200 steps
    assert [(s["name"], s["data"]) for s in runs if s["kind"] == "pretrained"] == [
        ("pretrained", "finetune"),
        ("pretrained@ood", "finetune-ood"),
    ]
    assert reproduction.for_pair(runs, "zh-en", "finetune")[0]["pair"] == "zh-en"
    with pytest.raises(ValueError, match="out-of-domain news of the pair to pretrain on: de-en, zh-en, not --pair"):
        reproduction.for_pair(runs, "en-ja", "finetune")


def test_out_of_domain_news_splits_hold_out_one_year(shared_dir, monkeypatch):
    monkeypatch.setenv("XLPE_SHARED_DIR", str(shared_dir))
    data = load_driver().reproduction
    splits = data.wmt_newstest_splits("zh-en", 500, 20, 30)
    assert {name: len(pair[0]) for name, pair in splits.items()} == {"train": 500, "validation": 20, "test": 30}
    assert " " in splits["test"][0][0]  # Chinese segmented into words (jieba)
    held_out = set(splits["test"][1]) | set(splits["validation"][1])
    everything = data.wmt_newstest_splits("zh-en", 10**6, 20, 30)
    assert not held_out & set(everything["train"][1])  # newstest2019 is held out
    assert len(everything["train"][0]) == 2001 + 3981 + 2000 + 2791  # 2017, 2018, 2020, 2021


def test_finetune_study_end_to_end_in_smoke_mode(tmp_path, shared_dir, monkeypatch, capsys):
    """The study's mechanics on a slice: the OPUS-MT-layout checkpoint (MarianTokenizer, <pad> last) pretrained on
    news, continued stock fine-tuning and RoPE with its warm start fine-tuned from it, both decoded in and out of
    domain, the checkpoint's own rows; the report compares each test set with its own baseline."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("XLPE_SHARED_DIR", str(shared_dir))
    driver = load_driver()
    work = tmp_path / "work"
    common = ["--mode", "smoke", "--groups", "finetune", "--seeds", "1", "--work_dir", str(work)]
    names = ["ft-vanilla", "ft-rope-warm", "ft-vanilla@ood", "ft-rope-warm@ood", "pretrained", "pretrained@ood"]
    with pytest.raises(SystemExit, match=r"--runs \['ft-nothing'\] not in --groups finetune"):
        driver.main(common + ["--runs", "ft-vanilla,ft-nothing"])
    assert driver.main(common + ["--runs", "ft-vanilla,ft-rope-warm,pretrained"]) == 0  # and their @ood rows
    pretrained = work / "data" / "de-en" / "pretrained"
    assert {"source.spm", "target.spm", "vocab.json"} <= {p.name for p in pretrained.iterdir()}
    config = json.loads((pretrained / "config.json").read_text())
    vocab = json.loads((pretrained / "vocab.json").read_text())
    assert config["pad_token_id"] == vocab["<pad>"] == len(vocab) - 1 and config["eos_token_id"] == 0
    warm = AutoModelForSeq2SeqLM.from_pretrained(work / "runs" / "de-en-ft-rope-warm-seed1")
    assert warm.config.rotary_warm_start_steps == 1 and warm.config.absolute_positions is False
    passes = {float(b) for n, b in warm.named_buffers() if n.endswith("warm_start.passes")}
    assert passes and min(passes) >= 1  # the blend reached 1: plain RoPE after the warm start
    records = {r["name"]: r for r in driver.read_results(work / "results.jsonl")}
    assert set(records) == set(names)
    assert records["ft-rope-warm@ood"]["baseline"] == "ft-vanilla@ood" and records["pretrained"]["kind"] == "pretrained"
    in_domain = datasets.load_from_disk(str(work / "data" / "de-en" / "finetune"))["test"]["target_text"]
    out_of_domain = datasets.load_from_disk(str(work / "data" / "de-en" / "finetune-ood"))["test"]["target_text"]
    assert in_domain[:3] != out_of_domain[:3]
    capsys.readouterr()
    assert driver.main(["--report", "--work_dir", str(work), "--plot_dir", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    assert "vs ft-vanilla / ft-vanilla@ood" in table
    assert "| ft-vanilla | de-en | 1 |" in table and "| baseline |" in table
    baseline_rows = [line for line in table.splitlines() if line.endswith("| baseline |")]
    assert [line.split("|")[1].strip() for line in baseline_rows] == ["ft-vanilla", "ft-vanilla@ood"]
