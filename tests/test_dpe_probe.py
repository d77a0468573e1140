"""bench/studies/dpe_probe.py: what DPE's block learned. Checked against signals whose answers are known: a block that
outputs its own sinusoid row scores exactly as the monotone order, one that outputs the target row decodes every
token to its target rank."""

from __future__ import annotations

import importlib.util
import json

import datasets
import numpy as np
import pytest
import torch
from conftest import REPO_ROOT
from family_tester import TINY_MARIAN

from xlpe.models import DPEMarianConfig, DPEMarianMTModel


def load_probe():
    spec = importlib.util.spec_from_file_location("dpe_probe", REPO_ROOT / "bench" / "studies" / "dpe_probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def split():
    rng = np.random.default_rng(0)
    rows = []
    for length in rng.integers(3, 12, size=24).tolist():
        targets = rng.permutation(length - 1).tolist() + [-100]  # the final </s> has no target rank
        if length > 4:
            targets[1] = -100  # an unaligned token
        rows.append(
            {
                "input_ids": rng.integers(3, 50, size=length - 1).tolist() + [0],
                "attention_mask": [1] * length,
                "target_positions": targets,
            }
        )
    return datasets.Dataset.from_list(rows)


@pytest.fixture
def model():
    torch.manual_seed(0)
    config = DPEMarianConfig(**TINY_MARIAN, vocab_size=60, pad_token_id=1, eos_token_id=0, decoder_start_token_id=1)
    return DPEMarianMTModel(config).eval()


def test_tau_b_handles_ties_and_constants():
    probe = load_probe()
    assert probe.tau_b(np.array([0, 1, 2, 3]), np.array([0, 1, 2, 3])) == pytest.approx(1.0)
    assert probe.tau_b(np.array([0, 1, 2, 3]), np.array([3, 2, 1, 0])) == pytest.approx(-1.0)
    assert probe.tau_b(np.array([0, 1, 2]), np.array([5, 5, 5])) is None
    assert probe.tau_b(np.array([0, 1, 2]), np.array([0, 0, 1])) == pytest.approx(2 / np.sqrt(6))


def test_a_block_that_outputs_its_own_position_scores_as_the_monotone_order(model, split, monkeypatch):
    block = model.model.encoder.dynamic_position
    monkeypatch.setattr(block, "forward", lambda enriched, pe_abs, mask, **kw: (pe_abs.expand_as(enriched),) * 2)
    stats = load_probe().probe(model, split, batch_size=5)
    assert stats["order_loss"] == pytest.approx(stats["order_loss_monotone"], rel=1e-4)
    assert stats["tau_decoded"] == pytest.approx(stats["tau_monotone"])
    assert stats["exact_decoded"] == stats["exact_monotone"] and stats["exact_source"] == 1.0
    assert stats["closer_to_target"] == 0.0 and stats["norm_ratio"] == pytest.approx(1.0)
    assert stats["order_loss_zero"] > stats["order_loss_monotone"] > 0
    assert stats["tokens"] == sum(sum(t != -100 for t in row) for row in split["target_positions"])


def test_a_block_that_outputs_the_target_row_decodes_every_token_to_its_target(model, split, monkeypatch):
    table = model.model.encoder.embed_positions.weight
    batches = iter(
        [
            torch.nn.utils.rnn.pad_sequence([torch.tensor(t) for t in split["target_positions"][s : s + 5]], True, -100)
            for s in range(0, len(split), 5)
        ]
    )

    def oracle_block(enriched, pe_abs, mask, **kw):
        targets = next(batches)
        r = torch.where((targets >= 0)[..., None], table[targets.clamp(min=0)], pe_abs)
        return r, r

    monkeypatch.setattr(model.model.encoder.dynamic_position, "forward", oracle_block)
    stats = load_probe().probe(model, split, batch_size=5)
    assert stats["order_loss"] == pytest.approx(0.0, abs=1e-6)
    assert stats["exact_decoded"] == 1.0 and stats["tau_decoded"] == pytest.approx(1.0)
    assert stats["closer_to_target"] == 1.0 and stats["tau_monotone"] < 0.5


def test_cli_on_a_saved_model(model, split, tmp_path, capsys):
    model.save_pretrained(tmp_path / "dpe")
    datasets.DatasetDict({"test": split}).save_to_disk(str(tmp_path / "data"))
    probe = load_probe()
    out = tmp_path / "probe.json"
    assert (
        probe.main(
            [
                "--model",
                str(tmp_path / "dpe"),
                str(tmp_path / "dpe"),
                "--prepared",
                str(tmp_path / "data"),
                "--json",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads(out.read_text())
    assert len(record["rows"]) == 2 and record["std"]["order_loss"] == 0.0  # the same model twice
    assert record["mean"]["gate"] == 1.0 and -1.0 <= record["mean"]["tau_decoded"] <= 1.0
    datasets.DatasetDict({"test": split.remove_columns("target_positions")}).save_to_disk(str(tmp_path / "bare"))
    with pytest.raises(SystemExit, match="no target_positions column"):
        probe.main(["--model", str(tmp_path / "dpe"), "--prepared", str(tmp_path / "bare")])
