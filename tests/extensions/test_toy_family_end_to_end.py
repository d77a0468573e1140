"""A new family added as CONTRIBUTING.md says, and nothing else touched: a file pair in the models folder and one
registration, then trained, generated, saved and loaded, loaded as Hub remote code where xlpe cannot be imported,
exported and benchmarked.

The test works on a copy of the package (tmp dir), so the repository is never written: the toy's
`configuration_toy.py` / `modeling_toy.py` go into the copy's `xlpe/models/`, and a child process with the copy
first on its path registers the family with one `register_family` call (what a row of `BUILTIN_FAMILIES` does) and
runs each layer. Every test suite that loops over the registry (flat classes, compile, generation consistency,
transformers' common tests, the speed bench) reads the same registration; this test shows the layers a user
touches. The toy is XL PE with a field of its own, so it reuses XL PE's modules (a variant of where the signal
enters would be a strategy instead: test_add_family_and_strategy.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO_ROOT

CONFIGURATION = '''
"""Toy PE: XL PE with a field of its own (a test family)."""

from transformers import AutoConfig

from .configuration_xlpe import XLPEMarianConfig


class ToyPEConfig(XLPEMarianConfig):
    model_type = "toy_pe_marian"
    toy_scale: float = 1.0  # the family's own field (`xlpe-train --toy_scale`)


ToyPEConfig.register_for_auto_class()
if not __name__.startswith("transformers_modules."):
    AutoConfig.register(ToyPEConfig.model_type, ToyPEConfig, exist_ok=True)
'''

MODELING = '''
"""Toy PE's models: XL PE's, under the toy's config."""

from transformers import AutoModel, AutoModelForSeq2SeqLM

from .configuration_toy import ToyPEConfig
from .modeling_xlpe import XLPEMarianModel, XLPEMarianMTModel


class ToyPEModel(XLPEMarianModel):
    config_class = ToyPEConfig


class ToyPEMTModel(XLPEMarianMTModel):
    config_class = ToyPEConfig


ToyPEModel.register_for_auto_class("AutoModel")
ToyPEMTModel.register_for_auto_class("AutoModelForSeq2SeqLM")
if not __name__.startswith("transformers_modules."):
    AutoModel.register(ToyPEConfig, ToyPEModel, exist_ok=True)
    AutoModelForSeq2SeqLM.register(ToyPEConfig, ToyPEMTModel, exist_ok=True)
'''

# the child process: one registration, then every layer (results as JSON on the last line)
SCRIPT = """
import json, subprocess, sys
from pathlib import Path

import xlpe
from xlpe.models.registry import FamilyField, ModelFamily, register_family

assert xlpe.__file__.startswith(sys.argv[2]), xlpe.__file__  # the copy, not the repository
work = Path(sys.argv[1])
register_family(
    ModelFamily(
        "toy_pe",
        "xlpe.models.configuration_toy:ToyPEConfig",
        "xlpe.models.modeling_toy:ToyPEModel",
        "xlpe.models.modeling_toy:ToyPEMTModel",
        model_type="toy_pe_marian",
        title="Toy PE (a test family)",
        fields=(FamilyField("toy_scale", float, "Toy PE: a scale of nothing"),),
        strategy_field="xl_strategy",
        extra_inputs=("reorder_positions",),
        tiny_fields=dict(xl_strategy="combination", xl_heads=1, reorder_predictor_hidden_size=8),
        translation_loss_only=dict(reorder_loss_weight=0.0),
    )
)
results = {}

# trained by xlpe-train (in this process: the registration is the process's), on the built-in corpus
from xlpe.training.run import main

run = work / "run"
metrics = main([
    "--output_dir", str(run), "--cache_dir", str(work / "cache"), "--model_type", "toy_pe", "--toy_scale", "2",
    "--d_model", "16", "--ffn_dim", "32", "--attention_heads", "2", "--encoder_layers", "1", "--decoder_layers", "1",
    "--max_train_samples", "64", "--max_eval_samples", "6", "--max_predict_samples", "6",
    "--tokenizer_vocab_size", "300", "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "8",
    "--max_steps", "4", "--num_beams", "2", "--do_train", "--do_eval", "--do_predict",
])
results["trained"] = {key: metrics[key] for key in ("train_loss", "eval_bleu") if key in metrics}

# saved and loaded through the Auto classes, generating the same tokens
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

model = AutoModelForSeq2SeqLM.from_pretrained(run).eval()
tokenizer = AutoTokenizer.from_pretrained(run)
batch = tokenizer(["the cat sees the dog"], return_tensors="pt")
ids = model.generate(**batch, num_beams=2, max_new_tokens=6)
again = AutoModelForSeq2SeqLM.from_pretrained(run).eval().generate(**batch, num_beams=2, max_new_tokens=6)
same = bool(torch.equal(ids, again))
results["loaded"] = {"class": type(model).__name__, "toy_scale": model.config.toy_scale, "same": same}
results["card"] = "Toy PE (a test family)" in (run / "README.md").read_text()

# Hub remote code: a fresh process where `import xlpe` fails loads and translates the saved folder
fresh = subprocess.run([sys.executable, "-c", sys.argv[3], str(run)], capture_output=True, text=True, timeout=300)
assert fresh.returncode == 0, fresh.stderr[-3000:]
results["remote_code"] = json.loads(fresh.stdout.strip().splitlines()[-1])
results["remote_code"]["same"] = results["remote_code"]["ids"] == ids.tolist()

# exported (ONNX) and generating what PyTorch generates
from xlpe.export.exporter import export_directory
from xlpe.export.runtime import OnnxTranslator

export_directory(run, work / "onnx")
onnx_ids = OnnxTranslator(work / "onnx", threads=1).generate(
    batch["input_ids"].numpy(), batch["attention_mask"].numpy(), num_beams=2, max_new_tokens=6
)
results["exported"] = {"same": onnx_ids.tolist() == ids.tolist()}

# benchmarked: bench/speed.py times it beside the stock model it extends (its registry row)
sys.path.insert(0, sys.argv[4])
sys.path.insert(0, str(Path(sys.argv[4]) / "bench"))
import importlib.util

spec = importlib.util.spec_from_file_location("speed", Path(sys.argv[4]) / "bench" / "speed.py")
speed = importlib.util.module_from_spec(spec)
spec.loader.exec_module(speed)
report = speed.main([
    "--size", "tiny", "--families", "toy_pe", "--repeats", "1", "--gen-batches", "1", "--warmup", "1",
    "--warmup-max-cycles", "1", "--stable-window", "1", "--no-memory", "--no-plot", "--peak-tflops", "0.001",
    "--json", str(work / "speed.json"),
])
rows = json.loads((work / "speed.json").read_text())["models"]
results["benchmarked"] = {row["name"]: row["baseline"] for row in rows}
print(json.dumps(results))
"""

FRESH = """
import json, sys
sys.modules["xlpe"] = None  # the package is NOT importable here
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)
batch = tokenizer(["the cat sees the dog"], return_tensors="pt")
ids = model.generate(**batch, num_beams=2, max_new_tokens=6)
print(json.dumps({"module": type(model).__module__, "class": type(model).__name__, "ids": ids.tolist()}))
"""


@pytest.fixture(scope="module")
def toy_results(tmp_path_factory):
    work = tmp_path_factory.mktemp("toy")
    copy = work / "package"
    for folder in ("xlpe", "hub_cards"):  # the package and the card template beside it, as in a source checkout
        shutil.copytree(REPO_ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "xlpe" / "models" / "configuration_toy.py").write_text(textwrap.dedent(CONFIGURATION).lstrip())
    (copy / "xlpe" / "models" / "modeling_toy.py").write_text(textwrap.dedent(MODELING).lstrip())
    environment = {**os.environ, "PYTHONPATH": str(copy), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(work), str(copy), FRESH, str(REPO_ROOT)],
        capture_output=True,
        text=True,
        env=environment,
        cwd=work,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(results))  # shown with -s: what each layer gave
    return results


def test_trained_by_xlpe_train(toy_results):
    assert toy_results["trained"]["train_loss"] > 0 and "eval_bleu" in toy_results["trained"]
    assert toy_results["card"]  # the model card names the family by its registered title


def test_saved_and_loaded_through_the_auto_classes(toy_results):
    assert toy_results["loaded"] == {"class": "ToyPEMTModel", "toy_scale": 2.0, "same": True}


def test_loaded_as_remote_code_without_xlpe(toy_results):
    remote = toy_results["remote_code"]
    assert remote["class"] == "ToyPEMTModel" and remote["module"].startswith("transformers_modules")
    assert remote["same"]


def test_exported_and_generating_as_pytorch(toy_results):
    assert toy_results["exported"]["same"]


def test_benchmarked_beside_the_stock_model(toy_results):
    assert toy_results["benchmarked"]["Toy PE (a test family)"] == "Marian"  # its row, divided by stock Marian's


def test_the_repository_was_not_touched():
    assert not (Path(REPO_ROOT) / "xlpe" / "models" / "modeling_toy.py").exists()
