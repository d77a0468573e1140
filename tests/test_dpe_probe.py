"""bench/studies/dpe_probe.py, a one-off study (bench/studies/README.md): its one smoke test, on a saved tiny DPE
model and a split with known target ranks."""

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
