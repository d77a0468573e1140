"""bench/speed.py, the GPU benchmark's harness, in its seconds-long CPU form: the report is complete and
well-formed (rows, ratios with their spread, the warm-up, token batches of real lengths, MFU columns when a peak
is given, flags). Timings are never asserted: this machine is shared. Also: real-length token batches are
built as xlpe-train builds them, and bench/gpu_session.sh's dry run names every stage's command."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))


def load_bench(name: str):
    """bench/<name>.py or bench/studies/<name>.py as a module (the bench scripts are not a package)."""
    path = REPO_ROOT / "bench" / f"{name}.py"
    path = path if path.exists() else REPO_ROOT / "bench" / "studies" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_speed():
    return load_bench("speed")


def test_tiny_cpu_run_writes_a_complete_report(tmp_path):
    speed = load_speed()
    report = speed.main(
        [
            "--size",
            "tiny",
            "--families",
            "xlpe",
            "--rows",
            "XL PE combination",
            "--repeats",
            "2",
            "--gen-batches",
            "1",
            "--warmup",
            "1",
            "--warmup-max-cycles",
            "2",
            "--stable-window",
            "1",
            "--no-memory",
            "--no-plot",
            "--peak-tflops",
            "0.001",
            "--json",
            str(tmp_path / "r.json"),
            "--markdown",
            str(tmp_path / "r.md"),
        ]
    )
    assert json.loads((tmp_path / "r.json").read_text())["models"][1]["name"] == "XL PE combination"
    assert [row["name"] for row in report["models"]] == ["Marian", "XL PE combination"]
    assert report["repeats"] == 2 and report["train_steps"] % report["batching"]["batches_per_cycle"] == 0
    assert report["batching"]["kind"].startswith("tokens") and "newstest" in report["batching"]["lengths"]
    assert report["peak_source"] == "--peak-tflops" and isinstance(report["flags"], list)
    row = report["models"][1]
    assert row["baseline"] == "Marian" and set(row["train_ratio"]) >= {"min", "median", "max", "spread", "values"}
    assert len(row["train_ratio"]["values"]) == 2 and len(row["times"]["train_wall"]) == 2
    assert row["train_ratio"]["min"] <= row["train_ratio"]["median"] <= row["train_ratio"]["max"]
    assert row["gen_ratio"] is not None and row["flagged"] in (True, False)
    assert all(
        r["train_mfu"] > 0 and r["train_counted_flops_utilisation"] > 0 and r["warmup_train"]["cycles"] >= 1
        for r in report["models"]
    )
    table = (tmp_path / "r.md").read_text()
    assert "| XL PE combination | Marian |" in table and "train MFU" in table and "Switches (every model" in table


def test_token_batches_have_real_lengths_and_the_family_inputs():
    from benchlib.lengths import load
    from benchlib.speed_models import EOS, batch_from_lengths, token_batches

    batches = token_batches(load("newstest-deen"), max_tokens=2048, count=3, vocab_size=500, seed=0)
    padded = [b.input_ids.shape[0] * max(b.input_ids.shape[1], b.labels.shape[1]) for b in batches]
    assert all(0.75 * 2048 <= p <= 2048 for p in padded)
    assert batches[0].input_ids.shape[1] <= batches[-1].input_ids.shape[1]  # short to long
    batch = batch_from_lengths([5, 3], [4, 6], 100, torch.Generator().manual_seed(0))
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert batch.input_ids[0, 4] == EOS and batch.input_ids[1, 2] == EOS and batch.labels[0, 4:].eq(-100).all()
    assert sorted(batch.reorder_positions[0, :4].tolist()) == [0, 1, 2, 3] and batch.reorder_positions[
        1, 2:
    ].tolist() == [2, 3, 4]
    assert (batch.target_positions[1, 2:] == -100).all() and batch.target_tokens == 10 and batch.source_tokens == 8
    with pytest.raises(ValueError, match="lengths >= 2"):
        batch_from_lengths([1], [3], 100, torch.Generator())


def test_gpu_session_dry_run_lists_every_stage(tmp_path):
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "bench" / "gpu_session.sh"), "--print", "all"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
        env={**os.environ, "OUT": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    for stage in ("setup", "tests", "bench", "bench-compiled", "train"):
        assert f"== {stage}" in result.stdout
    assert "pytest tests/gpu" in result.stdout and "bench/speed.py --device cuda" in result.stdout
    assert "xlpe.cli.train" in result.stdout
    bad = subprocess.run(
        ["bash", str(REPO_ROOT / "bench" / "gpu_session.sh"), "--print", "nonsense"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
        env={**os.environ, "OUT": str(tmp_path)},
    )
    assert bad.returncode == 2 and "unknown stage 'nonsense'" in bad.stderr


def test_xlpe_step_ratio_check_reports_both_clocks_and_the_checks_off_ratio():
    """bench/studies/xlpe_step_ratio.py (the XL PE step-ratio check) at tiny dims: one batch of the asked shape,
    ratios of
    medians on both clocks, with and without the input checks. Timings are not asserted (shared machine)."""
    check = load_bench("xlpe_step_ratio")
    threads = torch.get_num_threads()
    try:
        (result,) = check.main(["--size", "tiny", "--threads", "1", "--pairs", "2", "--warmup", "1", "--length", "12"])
    finally:
        torch.set_num_threads(threads)
    assert result["shape"] == (32, 12) and result["labels"] == (32, 12)
    for key in ("wall_ratio", "wall_ratio_unchecked", "cpu_ratio", "cpu_ratio_unchecked"):
        assert 0 < result[key] < float("inf"), key
    assert set(result["wall"]) == {"stock", "xlpe", "xlpe_unchecked"}
    # --instances: copies of each model interleaved and pooled; each copy's median is reported against the pool's
    try:
        (pooled,) = check.main(
            ["--size", "tiny", "--threads", "1", "--pairs", "2", "--warmup", "0", "--instances", "3"]
        )
    finally:
        torch.set_num_threads(threads)
    for clock in ("wall", "cpu"):
        for name, spread in pooled[clock + "_instance_spread"].items():
            assert len(spread) == 3 and min(spread) <= 1 + 1e-9 <= max(spread) + 2e-9, (clock, name, spread)
    models = check.build_models(dict(check.SIZES["tiny"]), seed=0)
    batch = check.make_batch(4, 8, check.SIZES["tiny"]["vocab_size"], seed=0)
    # fused AdamW by default: what the Trainer runs (transformers' default optim), CPU included
    assert check.step_fn("stock", models["stock"], batch).optimizer.defaults["fused"] is True
    assert not check.step_fn("xlpe", models["xlpe"], batch, "default").optimizer.defaults["fused"]


def test_predictor_cost_times_variants_and_the_attention_both_ways(capsys):
    """bench/studies/predictor_cost.py: each variant's predictor step (its config fields, SDPA or written-out
    attention) and
    the attention alone at each length, as Markdown tables; the package's length threshold is restored after; a
    field that is not the predictor's is refused. Timings are not asserted (shared machine)."""
    bench = load_bench("predictor_cost")
    limit = bench.reorder_predictor.WRITTEN_OUT_ATTENTION_MAX_LENGTH
    threads = torch.get_num_threads()
    try:
        bench.main(
            [
                "--threads",
                "1",
                "--steps",
                "2",
                "--warmup",
                "1",
                "--variant",
                "a:attention=sdpa",
                "--variant",
                "b:reorder_predictor_dropout=0.1,reorder_predictor_hidden_size=32",
            ]
        )
        rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
        assert rows[0] == "| predictor variant | ms a step (median) | vs the first |"
        assert rows[2].startswith("| a | ") and rows[2].endswith(" | +0.00 |") and rows[3].startswith("| b | ")
        bench.main(["--threads", "1", "--attention-lengths", "8,16"])
        lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
        assert lines[0] == "| tokens | written out, ms | SDPA, ms |" and [line.split()[1] for line in lines[2:]] == [
            "8",
            "16",
        ]
    finally:
        torch.set_num_threads(threads)
    assert bench.reorder_predictor.WRITTEN_OUT_ATTENTION_MAX_LENGTH == limit
    with pytest.raises(SystemExit):
        bench.main(["--variant", "c:d_model=64"])
    with pytest.raises(SystemExit):
        bench.main(["--variant", "c:attention=flash"])


def test_step_ratio_across_commits_times_each_tree_in_fresh_processes(capsys, tmp_path):
    """bench/studies/step_ratio_across_commits.py at tiny dims on this checkout: one process per tree and repeat,
    each a ratio
    of medians from the public API alone (so older commits' packages run it too). Timings are not asserted."""
    bench = load_bench("step_ratio_across_commits")
    argv = ["--trees", str(REPO_ROOT), "--processes", "2", "--pairs", "1", "--warmup", "1", "--threads", "1"]
    written = tmp_path / "ratios.json"
    results = bench.main(
        [*argv, "--size", "tiny", "--length", "12", "--target", "1e9", "--json", str(written), "--control"]
    )
    (values,) = results.values()
    assert len(values) == 2 and all(0 < value["ratio"] < float("inf") for value in values)
    out = capsys.readouterr().out
    assert "2 processes, 2 at or below 1000000000.0" in out and "95 % interval of the mean" in out
    assert all(0 < value["control_ratio"] < float("inf") for value in values) and "control (second stock" in out
    (summary,) = json.loads(written.read_text())["summary"].values()
    both = [value["ratio"] / value["control_ratio"] ** 0.5 for value in values]
    assert summary["against_both_stock"]["mean"] == pytest.approx(sum(both) / 2)
    ratios = sorted(value["ratio"] for value in values)
    assert summary["range"] == ratios and summary["processes"] == 2
    assert ratios[0] <= summary["mean_95"][0] <= summary["mean"] <= summary["mean_95"][1] <= ratios[1]
    assert bench.allocator_env("steady")["MALLOC_TRIM_THRESHOLD_"] == str(bench.TRIM_THRESHOLD_BYTES)
    assert not any(key.startswith("MALLOC_") for key in bench.allocator_env("default"))
    with pytest.raises(SystemExit):
        bench.main(["HEAD", "--trees", str(REPO_ROOT)])  # commits or trees, not both
    with pytest.raises(SystemExit) as error:
        bench.main(["--trees", str(REPO_ROOT), "--processes", "0"])
    assert error.value.code == 2 and "--processes must be at least 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as error:
        bench.main(["no-such-commit-xyz"])
    assert error.value.code == 2 and "cannot check out 'no-such-commit-xyz'" in capsys.readouterr().err


def test_xl_step_parts_times_each_extra_against_its_stock_counterpart(capsys):
    """bench/studies/xl_step_parts.py at tiny dims: every part of XL PE's step beside stock's, the form of HeadXL before
    2026-11-28 as a comparison row, the sum of the extras and the ratio it implies. Timings are not asserted."""
    bench = load_bench("xl_step_parts")
    threads = torch.get_num_threads()
    try:
        results = bench.main(
            ["--size", "tiny", "--threads", "1", "--repeats", "2", "--warmup", "1", "--steps", "2", "--length", "12"]
            + ["--block-repeats", "1"]
        )
    finally:
        torch.set_num_threads(threads)
    names = [name for name, _ in results]
    assert names[0].startswith("layer 1 Q/K/V") and names[-1].startswith("stock train step") and len(names) == 9
    assert set(results[0][1]) == {"stock", "xl", "before"}
    blocks = [name for name in names if name.startswith(bench.BLOCK)]
    assert [name[len(bench.BLOCK) :].split()[0] for name in blocks] == ["encoder", "decoder", "whole"]
    lines = capsys.readouterr().out.splitlines()
    for name, ms in results:
        if name in blocks:  # shown beside the sum, not added to it
            assert (
                f"| {name} | {ms['stock']:.2f} | {ms['xl']:.2f} | {ms['xl'] - ms['stock']:+.2f} (not summed) |" in lines
            )
    extras = sum(ms["xl"] - ms["stock"] for name, ms in results[:-1] if name not in blocks)
    assert f"| **sum of the extras** | | | **{extras:+.2f}** |" in lines
    assert any(line.startswith("| … HeadXL in the form before 2026-11-28 |") for line in lines)
    implied = 1 + extras / results[-1][1]["stock"]
    assert lines[-1].endswith(f"implied ratio **{implied:.3f}** |")
    for bad in (["--repeats", "0"], ["--block-repeats", "-1"]):
        with pytest.raises(SystemExit) as stop:
            bench.main(bad)
        assert stop.value.code == 2


def test_output_projection_study_times_the_step_and_scores_a_trained_run(toy_tokenizer, tmp_path, capsys):
    """bench/studies/onnx_output_projection.py on a tiny model: a step row per graph (fp32 and each scheme) with its
    operator shares, and quality rows (fp32, each int8 scheme) with the bootstrap against fp32."""
    from conftest import save_tiny_xlpe_model

    from xlpe.export.exporter import export_directory

    spec = importlib.util.spec_from_file_location(
        "onnx_output_projection", REPO_ROOT / "bench" / "studies" / "onnx_output_projection.py"
    )
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    run = save_tiny_xlpe_model(toy_tokenizer, tmp_path / "run")
    lines = ["source\treference\ttranslation", "the cat sees the dog\tdie katze\t", "a dog\tein hund\t"]
    (run / "test_translations.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    export_directory(run, tmp_path / "export")
    output = tmp_path / "result.json"
    argv = ["--graph_dir", str(tmp_path / "export"), "--model", f"tiny={run}", "--rows", "4", "--beams", "2"]
    argv += ["--cache", "3"]
    argv += ["--source", "5", "--rounds", "1", "--bootstrap", "4", "--work_dir", str(tmp_path / "work")]
    assert study.main([*argv, "--output", str(output)]) == 0
    result = json.loads(output.read_text())
    assert [row["graph"] for row in result["step"]] == ["fp32", "channel", "channel-all"]
    assert all(row["median_ms"] > 0 and abs(sum(row["op_share"].values()) - 1) < 0.5 for row in result["step"])
    engines = [row["engine"] for row in result["quality"]]
    assert engines == ["onnx fp32", "onnx int8 channel", "onnx int8 channel-all"]
    assert all("p_not_worse" in row for row in result["quality"][1:]) and result["quality"][0]["same_as_fp32"] == 2


def test_onnx_speed_side_by_side_with_ctranslate2_and_memory(tmp_path, capsys):
    """bench/onnx_speed.py on a tiny OPUS-MT-layout stock Marian: PyTorch, the export (fp32, int8) and CTranslate2
    (fp32, int8) in one run, fixed-length decoding, two streams (two batches at once), each engine's peak memory
    measured in a process of its own; fp32 engines give PyTorch's tokens."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("ctranslate2")
    from xlpe.features.opus_mt_layout import build_opus_mt_checkpoint
    from xlpe.features.synthetic import SOURCE_LANG, TARGET_LANG, generate_corpus

    sources, targets, _ = generate_corpus(300, seed=0)
    model = build_opus_mt_checkpoint(
        tmp_path / "marian", sources, targets, SOURCE_LANG, TARGET_LANG, spm_vocab_size=150, init_std=0.3
    )
    spec = importlib.util.spec_from_file_location("onnx_speed", REPO_ROOT / "bench" / "onnx_speed.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    output = tmp_path / "speed.json"
    argv = ["--model", f"marian={model}", "--ctranslate2", "--memory", "--fixed_new_tokens", "4", "--threads", "2"]
    argv += ["--streams", "2", "--num_beams", "2", "--batch_size", "2", "--limit", "4", "--repeats", "1"]
    argv += ["--export_root", str(tmp_path / "exports"), "--output", str(output)]
    assert bench.main(argv) == 0
    result = json.loads(output.read_text())
    engines = {row["engine"]: row for row in result["rows"]}
    assert set(engines) == {"pytorch", "onnx-fp32", "onnx-int8", "ctranslate2-fp32", "ctranslate2-int8"}
    assert result["ctranslate2"] and result["host_allocator"].startswith("host allocator")
    assert result["streams"] == 2 and "int8/fp32 kernels" in result["cpu"]
    for row in engines.values():
        assert row["sentences_per_s"] > 0 and 0 < row["load_rss_mib"] <= row["peak_rss_mib"]
    assert engines["onnx-fp32"]["identical_to_pytorch"] == 1.0 == engines["ctranslate2-fp32"]["identical_to_pytorch"]


def test_onnx_step_times_both_cache_forms_of_one_model_with_profiles(toy_tokenizer, tmp_path):
    """bench/onnx_step.py: one decoder step of an export with the indirect self-attention cache (IO binding) and of
    the same model exported with the appended one, random inputs shaped by each layout, operator profiles, a JSON
    record."""
    pytest.importorskip("onnxruntime")
    from conftest import save_tiny_xlpe_model

    from xlpe.export import exporter

    run = save_tiny_xlpe_model(toy_tokenizer, tmp_path / "run")
    exporter.export_directory(run, tmp_path / "indirect", quantize="int8")
    real_layout = exporter.graph_layout
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            exporter, "graph_layout", lambda m: dataclasses.replace(real_layout(m), self_attention_cache="appended")
        )
        exporter.export_directory(run, tmp_path / "appended", quantize="int8")
    spec = importlib.util.spec_from_file_location("onnx_step", REPO_ROOT / "bench" / "onnx_step.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    output = tmp_path / "step.json"
    argv = [arg for form in ("appended", "indirect") for arg in ("--export", f"{form}={tmp_path / form}")]
    argv += ["--rows", "4", "--beams", "2", "--cache", "3", "--source", "5", "--rounds", "1", "--steps", "2"]
    assert bench.main([*argv, "--profile", "--output", str(output)]) == 0
    record = json.loads(output.read_text())
    rows = {row["export"]: row for row in record["results"]}
    assert {name: row["self_attention_cache"] for name, row in rows.items()} == {name: name for name in rows}
    assert "DecoderMaskedMultiHeadAttention" in rows["indirect"]["operators_ms"]
    assert "DecoderMaskedMultiHeadAttention" not in rows["appended"]["operators_ms"]
    for row in rows.values():
        assert row["ms_per_step"] > 0 and row["operators_ms"] and "speed_vs_appended" in row
        assert any("Quantize" in op or "Integer" in op for op in row["operators_ms"])  # the int8 graphs ran
    assert "int8/fp32 kernels" in record["cpu"]


def test_io_binding_study_runs_both_allocators_with_identical_outputs(toy_tokenizer, tmp_path):
    """bench/studies/onnx_io_binding.py on a tiny export with the appended self-attention cache: both allocator
    settings, each in a process of its own, `session.run` against IO binding, identical outputs, a JSON record; an
    export with the indirect cache is refused by name."""
    pytest.importorskip("onnxruntime")
    from conftest import save_tiny_xlpe_model

    from xlpe.export import exporter

    run = save_tiny_xlpe_model(toy_tokenizer, tmp_path / "run")
    exporter.export_directory(run, tmp_path / "indirect", quantize="int8")
    real_layout = exporter.graph_layout
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            exporter, "graph_layout", lambda m: dataclasses.replace(real_layout(m), self_attention_cache="appended")
        )
        exporter.export_directory(run, tmp_path / "export", quantize="int8")
    spec = importlib.util.spec_from_file_location(
        "onnx_io_binding", REPO_ROOT / "bench" / "studies" / "onnx_io_binding.py"
    )
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    output = tmp_path / "binding.json"
    argv = ["--export", str(tmp_path / "export"), "--rows", "4", "--beams", "2", "--cache", "3", "--source", "5"]
    assert study.main([*argv, "--rounds", "1", "--steps", "1", "--output", str(output)]) == 0
    record = json.loads(output.read_text())
    assert [row["allocator"] for row in record["rows"]] == ["default", "kept"]
    for row in record["rows"]:
        assert row["identical_outputs"] and row["run"] > 0 and row["io_binding"] > 0 and row["io_binding_speedup"] > 0
    child = [sys.executable, str(REPO_ROOT / "bench" / "studies" / "onnx_io_binding.py"), "--allocator", "default"]
    child += ["--export", str(tmp_path / "indirect"), *argv[2:]]
    refused = subprocess.run(child, capture_output=True, text=True)
    assert refused.returncode != 0 and "indirect self-attention cache" in refused.stderr
    assert "Traceback" not in refused.stderr
