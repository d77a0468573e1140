"""Token-based batches (`--max_tokens`, `TokenBatchSampler`): properties of the sampler (every example once per
epoch, the token budget, determinism, the shards of N processes partition the batches), and training with
them: the budget reaches the model, padding is reported, a resumed run sees the same batches, two processes
each train on their half."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO_ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file
from test_train import StopAt, log_history, tiny

from xlpe.training.collator import ExtraInputsDataCollator
from xlpe.training.run import main
from xlpe.training.sampling import TokenBatchSampler, batch_sizes, example_side_lengths


def without_batch_size(args: list[str]) -> list[str]:
    index = args.index("--per_device_train_batch_size")
    return args[:index] + args[index + 2 :]


# ---------------------------------------------------------------------------------------------------------
# The sampler
# ---------------------------------------------------------------------------------------------------------


pairs = st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40)), min_size=1, max_size=250)


@settings(deadline=None, max_examples=80)
@given(pairs, st.integers(40, 400), st.integers(0, 1000), st.integers(0, 4))
def test_every_example_once_per_epoch_within_the_budget_and_reproducible(lengths, max_tokens, seed, epoch):
    source, target = np.array(lengths).T
    sampler = TokenBatchSampler(source, target, max_tokens=max_tokens, seed=seed)
    sampler.set_epoch(epoch)
    batches = list(sampler)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))  # each example exactly once
    longest = np.maximum(source, target)
    assert all(len(batch) * longest[batch].max() <= max_tokens for batch in batches)  # padded size within budget
    assert list(sampler) == batches and len(batches) == len(sampler)  # reproducible for (seed, epoch)
    sampler.set_epoch(epoch + 1)
    assert len(list(sampler)) == len(batches)  # the Trainer counts the batches once: same number every epoch


@settings(deadline=None, max_examples=60)
@given(pairs, st.integers(40, 400), st.integers(1, 5), st.integers(0, 3))
def test_shards_of_n_processes_partition_the_batches(lengths, max_tokens, processes, epoch):
    source, target = np.array(lengths).T
    if len(lengths) < processes:
        with pytest.raises(ValueError, match="cannot fill one batch on each of"):
            TokenBatchSampler(source, target, max_tokens=max_tokens, num_replicas=processes)
        return
    shards = []
    for rank in range(processes):
        sampler = TokenBatchSampler(source, target, max_tokens=max_tokens, seed=3, num_replicas=processes, rank=rank)
        sampler.set_epoch(epoch)
        shards.append(list(sampler))
    reference = [b.tolist() for b in sampler.all_batches()]
    assert len({len(shard) for shard in shards}) == 1  # every process takes the same number of steps
    assert sorted(map(tuple, (b for shard in shards for b in shard))) == sorted(map(tuple, reference))  # a partition
    served = sorted(i for shard in shards for batch in shard for i in batch)
    if sampler.repeated == 0:  # halving big batches made the count divisible: every example exactly once
        assert served == list(range(len(lengths)))
    else:  # only single-sentence batches left (tiny sets): a few served twice, none missing
        assert set(served) == set(range(len(lengths))) and max(sampler.sizes) == 1 and sampler.repeated < processes


def test_batches_are_length_homogeneous_and_served_in_random_order():
    rng = np.random.default_rng(0)
    source = rng.integers(1, 60, 5000)
    sampler = TokenBatchSampler(source, source + rng.integers(0, 3, 5000), max_tokens=1000, seed=1)
    batches = sampler.batches()
    spread = [int(sampler.lengths[b].max() - sampler.lengths[b].min()) for b in batches]
    assert np.mean(spread) < 1 and sampler.plan()["padding_waste"] < 0.05
    longest = [int(sampler.lengths[b].max()) for b in batches]
    assert sum(a <= b for a, b in zip(longest, longest[1:])) / (len(longest) - 1) < 0.7  # not one sorted sweep
    sampler.set_epoch(1)
    assert [b.tolist() for b in sampler.batches()] != [b.tolist() for b in batches]  # a new order every epoch


def test_greedy_cut_and_bad_budgets():
    assert batch_sizes(np.array([1, 1, 1, 2, 2, 3, 5]), 6).tolist() == [2, 2, 2, 1]  # 2x1, 2x2, 2x3, 1x5 tokens
    # (the greedy cut gives 3x1, 2x2, 1x3, 1x5; the lone 3 takes the last 2 of the batch before it, which takes a 1)
    assert batch_sizes(np.array([2] * 6), 12, num_replicas=4).tolist() == [2, 1, 2, 1]  # halved until 4 divides
    assert batch_sizes(np.array([1, 1, 21, 21, 21]), 40, num_replicas=3).tolist() == [1] * 5  # 6 impossible
    with pytest.raises(ValueError, match=r"--max_tokens 10 is smaller than the longest training example \(12 tokens\)"):
        TokenBatchSampler([3, 12], [4, 5], max_tokens=10)
    with pytest.raises(ValueError, match="--max_tokens must be >= 1, got 0"):
        TokenBatchSampler([3], [4], max_tokens=0)


def test_side_lengths_come_from_arrow():
    import datasets

    data = datasets.Dataset.from_dict({"input_ids": [[5] * 3, [5] * 9], "labels": [[6] * 7, [6] * 2]})
    assert [x.tolist() for x in example_side_lengths(data)] == [[3, 9], [7, 2]]


# ---------------------------------------------------------------------------------------------------------
# Training with token batches
# ---------------------------------------------------------------------------------------------------------


def test_training_batches_respect_the_budget_and_padding_is_reported(tmp_path, monkeypatch):
    shapes = []
    original = ExtraInputsDataCollator.__call__

    def record(self, features, *args, **kwargs):
        batch = original(self, features, *args, **kwargs)
        if "labels" in batch:
            shapes.append((batch["input_ids"].shape, batch["labels"].shape))
        return batch

    monkeypatch.setattr(ExtraInputsDataCollator, "__call__", record)
    main(
        without_batch_size(
            tiny(tmp_path, "--do_train", "--max_steps", "6", "--max_tokens", "120", "--logging_steps", "3")
        )
    )
    assert len(shapes) >= 6 and all(s[0] * max(s[1], t[1]) <= 120 for s, t in shapes)
    assert len({s[0] for s, _ in shapes}) > 1  # the number of sentences varies with their length
    results = json.loads((tmp_path / "run" / "train_results.json").read_text())
    assert 0 <= results["train_padding_waste"] < 0.5 and results["train_tokens_per_second"] > 0
    assert results["train_token_batches_per_epoch"] >= 64 * 10 // 120  # 64 pairs of >= 10 padded tokens
    logged = [e["padding_waste"] for e in log_history(tmp_path / "run") if "loss" in e]
    assert len(logged) == 2 and all(0 <= w < 0.5 for w in logged)


def test_sentence_batches_report_their_padding_too(tmp_path):
    main(tiny(tmp_path, "--do_train", "--max_steps", "2"))
    assert 0 < json.loads((tmp_path / "run" / "train_results.json").read_text())["train_padding_waste"] < 1


def test_resume_with_token_batches_sees_the_same_batches(tmp_path):
    """Interrupted in the second epoch (64 pairs make ~7 batches of 160 tokens): same losses, same weights."""
    common = ["--max_steps", "12", "--do_train", "--max_tokens", "160", "--logging_steps", "1"]
    main(without_batch_size(tiny(tmp_path, *common, name="straight")))
    main(without_batch_size(tiny(tmp_path, *common, name="interrupted")), callbacks=[StopAt(10)])
    main(without_batch_size(tiny(tmp_path, *common, "--resume_from_checkpoint", "last", name="interrupted")))
    straight, resumed = log_history(tmp_path / "straight"), log_history(tmp_path / "interrupted")
    assert next(e["epoch"] for e in straight if e.get("step") == 10) > 1  # the resume point is in epoch 2
    losses = lambda logs: [(e["step"], round(e["loss"], 4)) for e in logs if "loss" in e]
    assert losses(resumed) == losses(straight) and losses(resumed)[-1][0] == 12
    a, b = (load_file(tmp_path / name / "model.safetensors") for name in ("straight", "interrupted"))
    assert all(np.allclose(a[k].numpy(), b[k].numpy(), atol=1e-6) for k in a)


def test_two_processes_each_train_on_half_of_the_token_batches(tmp_path):
    launch = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--num_cpu_threads_per_process",
        "1",
        str(REPO_ROOT / "scripts" / "train.py"),
        "--use_cpu",
    ]
    args = without_batch_size(
        tiny(
            tmp_path,
            "--do_train",
            "--max_steps",
            "-1",
            "--num_train_epochs",
            "1",
            "--max_tokens",
            "160",
            "--save_steps",
            "100",
        )
    )
    run = subprocess.run(
        launch + args,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert run.returncode == 0, run.stderr[-4000:]
    results = json.loads((tmp_path / "run" / "train_results.json").read_text())
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert results["train_token_batches_per_epoch"] % 2 == 0  # every process gets as many batches
    assert state["global_step"] == results["train_token_batches_per_epoch"] // 2  # one epoch = each process' half
