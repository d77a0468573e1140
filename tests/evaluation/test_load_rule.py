"""The load rule (xlpe.evaluation.model_loading.load_whole): a model folder whose config.json and weights disagree
(tensors the weights lack, tensors the config does not build, tensors of another shape, an attached reorderer the
config does not name) is refused in one line by every family, and an intact folder, a stock checkpoint and its
upgrade load with no false refusal; the layout fields of config.json (config_checks.LAYOUT_FIELDS) and
--config_overrides items are checked by name; the commands say each in one line."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from conftest import save_tiny_xlpe_model
from transformers import AutoModelForSeq2SeqLM, MarianConfig, MarianMTModel

from xlpe.evaluation.model_loading import WeightsConfigMismatch, load_model, load_whole
from xlpe.models.registry import MODEL_FAMILIES, TINY_LAYOUT

FAMILIES = sorted(MODEL_FAMILIES)


def edit_config(directory, **fields):
    path = directory / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))
    return directory


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """family -> a folder holding a tiny model of that family (2 + 2 layers), saved once per module."""
    root = tmp_path_factory.mktemp("families")
    folders = {}
    for name in FAMILIES:
        family = MODEL_FAMILIES[name]
        torch.manual_seed(0)
        family.generation_model_class(family.tiny_config()).save_pretrained(root / name)
        folders[name] = root / name
    return folders


def copy_of(saved, family, tmp_path):
    return shutil.copytree(saved[family], tmp_path / family)


def refusal(directory) -> str:
    with pytest.raises(WeightsConfigMismatch) as error:
        load_model(str(directory))
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{directory}: config.json and the weights disagree")
    assert "put back the config.json saved with these weights" in message
    return message


# ---------------------------------------------------------------------------------------------------------
# The rule on its own: each disagreement class, every family
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_an_intact_folder_loads_whole_and_computes_what_was_saved(saved, family):
    """Sinusoid tables (never saved), tied embeddings and `final_logits_bias` are no disagreement."""
    model = load_model(str(saved[family]))
    torch.manual_seed(0)
    original = MODEL_FAMILIES[family].generation_model_class(MODEL_FAMILIES[family].tiny_config()).eval()
    ids = torch.tensor([[5, 6, 7, 2]])
    assert torch.equal(model.generate(ids, max_new_tokens=4), original.generate(ids, max_new_tokens=4))

    def trainable(m):
        return sorted(name for name, parameter in m.named_parameters() if parameter.requires_grad)

    assert trainable(model) == trainable(original)  # the sinusoid tables stay frozen (a resume's optimiser)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_config_building_more_layers_than_the_weights_hold_is_refused(saved, family, tmp_path, caplog):
    folder = edit_config(copy_of(saved, family, tmp_path), encoder_layers=3)
    message = refusal(folder)
    assert "config.json has encoder_layers 3, the weights hold 2 encoder layers" in message
    assert "the weights lack 16 tensors config.json builds (model.encoder.layers.2." in message
    assert "(16 in all)" in message
    assert "LOAD REPORT" not in caplog.text  # the one line says it all


@pytest.mark.parametrize("family", FAMILIES)
def test_a_config_building_fewer_layers_than_the_weights_hold_is_refused(saved, family, tmp_path):
    folder = edit_config(copy_of(saved, family, tmp_path), decoder_layers=1)
    message = refusal(folder)
    assert "config.json has decoder_layers 1, the weights hold 2 decoder layers" in message
    assert "config.json does not build" in message and "model.decoder.layers.1." in message


@pytest.mark.parametrize("family", FAMILIES)
def test_a_config_whose_shapes_differ_from_the_weights_is_refused_naming_the_shapes(saved, family, tmp_path):
    folder = edit_config(copy_of(saved, family, tmp_path), vocab_size=98)
    message = refusal(folder)
    model = MODEL_FAMILIES[family].generation_model_class(MODEL_FAMILIES[family].tiny_config())
    width = model.get_input_embeddings().weight.shape[1]  # (mvPE+POS: d_model - pos_dim)
    assert f"model.shared.weight 99x{width} in the weights but 98x{width} by config.json" in message
    assert "tensors have other shapes" in message


@pytest.mark.parametrize("family", FAMILIES)
def test_a_position_limit_below_one_is_refused_naming_the_field(saved, family, tmp_path):
    for value in (0, -4):
        folder = edit_config(copy_of(saved, family, tmp_path / str(value)), max_position_embeddings=value)
        with pytest.raises(ValueError, match=rf"max_position_embeddings must be an integer >= 1, got {value}"):
            load_model(str(folder))


def test_layout_fields_are_checked_from_one_table():
    from xlpe.models.config_checks import LAYOUT_FIELDS, check_layout_fields

    for name, low in LAYOUT_FIELDS:
        for family in FAMILIES:
            with pytest.raises(ValueError, match=rf"^{name} must be an integer >= {low}, got {low - 1}$"):
                MODEL_FAMILIES[family].tiny_config(**{name: low - 1})
        with pytest.raises(ValueError, match=rf"^{name} must be an integer"):
            check_layout_fields({**TINY_LAYOUT, name: "8"})  # a stock config's dict too
    with pytest.raises(ValueError, match="d_model must be divisible by decoder_attention_heads, got d_model=16 and "):
        check_layout_fields({**TINY_LAYOUT, "decoder_attention_heads": 3})
    check_layout_fields(TINY_LAYOUT)


def test_weights_holding_a_reorderer_the_config_does_not_name_are_refused(tmp_path):
    from xlpe.models.configuration_reorderer import XLPEReordererConfig
    from xlpe.models.modeling_reorderer import XLPEReordererModel

    family = MODEL_FAMILIES["xlpe"]
    torch.manual_seed(0)
    model = family.generation_model_class(family.tiny_config())
    fields = dict(vocab_size=99, d_model=16, ffn_dim=32, pair_dim=8, attention_heads=2, token_layers=1)
    fields.update(word_layers=1, pad_token_id=1, eos_token_id=2, max_source_positions=64, max_words=20)
    reorderer = XLPEReordererModel(XLPEReordererConfig(**fields))
    model.attach_reorderer(reorderer)
    model.save_pretrained(tmp_path / "attached")
    assert isinstance(load_model(str(tmp_path / "attached")).get_encoder().reorderer, XLPEReordererModel)
    folder = edit_config(tmp_path / "attached", reorderer_config=None)
    message = refusal(folder)
    assert "the weights hold an attached reorderer that config.json does not name (no reorderer_config)" in message
    assert "model.encoder.reorderer." in message


# ---------------------------------------------------------------------------------------------------------
# Stock checkpoints and their upgrade: the family's new parts start from scratch, the stock ones must be there
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def stock(tmp_path):
    torch.manual_seed(0)
    MarianMTModel(MarianConfig(**TINY_LAYOUT)).save_pretrained(tmp_path / "stock")
    return tmp_path / "stock"


def test_a_stock_checkpoint_and_its_upgrade_load_whole(stock):
    assert type(load_model(str(stock))) is MarianMTModel
    for name in ("xlpe", "dpe"):
        family = MODEL_FAMILIES[name]
        model = load_whole(family.generation_model_class, stock, **family.tiny_fields)
        assert type(model) is family.generation_model_class


def test_a_stock_checkpoint_lacking_one_of_its_tensors_is_refused_even_as_an_upgrade(stock):
    from safetensors.torch import load_file, save_file

    weights = load_file(stock / "model.safetensors")
    del weights["model.encoder.layers.0.fc1.weight"]
    save_file(weights, stock / "model.safetensors", metadata={"format": "pt"})
    for model_class in (AutoModelForSeq2SeqLM, MODEL_FAMILIES["xlpe"].generation_model_class):
        with pytest.raises(WeightsConfigMismatch, match=r"the weights lack 1 tensors config.json builds \(model\.enc"):
            load_whole(model_class, stock)


# ---------------------------------------------------------------------------------------------------------
# --config_overrides items
# ---------------------------------------------------------------------------------------------------------


def test_config_override_items_are_field_equals_value_of_the_fields_type():
    from xlpe.training.errors import UsageError
    from xlpe.training.model_setup import check_override_types, parse_config_overrides

    assert parse_config_overrides("dropout=0.1,xl_strategy=head") == {"dropout": 0.1, "xl_strategy": "head"}
    for text, item in (("dropout", "dropout"), ("dropout=0.1,=3", "=3")):
        with pytest.raises(UsageError, match=rf"^--config_overrides '{text}': '{item}' is not FIELD=VALUE"):
            parse_config_overrides(text)
    config_class = MODEL_FAMILIES["xlpe"].config_class
    check_override_types(config_class, {"encoder_layers": 1, "dropout": 0.1, "xl_strategy": "head"})
    with pytest.raises(UsageError, match=r"^--config_overrides encoder_layers=1.0: encoder_layers takes int, got 1.0"):
        check_override_types(config_class, parse_config_overrides("encoder_layers=1.0"))
    with pytest.raises(UsageError, match=r"^--config_overrides dropout=\"\": dropout takes float \| int, got ''"):
        check_override_types(config_class, parse_config_overrides("dropout="))


# ---------------------------------------------------------------------------------------------------------
# The commands: one line, exit 2
# ---------------------------------------------------------------------------------------------------------


def error_lines(capsys, prog: str) -> list[str]:
    """The error lines on stderr, after checking that nothing else of the load is there (no table, no bar)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err and "LOAD REPORT" not in err and "Loading weights" not in err, err[-3000:]
    return [line for line in err.splitlines() if line.startswith(f"{prog}: error:")]


@pytest.mark.parametrize(
    "fields, words",
    [
        (dict(encoder_layers=2), "the weights lack 16 tensors"),
        (dict(max_position_embeddings=0), "max_position_embeddings must be an integer >= 1, got 0"),
    ],
    ids=["layers", "position_limit"],
)
def test_xlpe_translate_and_evaluate_refuse_a_folder_whose_config_and_weights_disagree(
    toy_tokenizer, tmp_path, capsys, fields, words
):
    from xlpe.cli.evaluate import main as evaluate
    from xlpe.cli.translate import main as translate

    folder = edit_config(save_tiny_xlpe_model(toy_tokenizer, tmp_path / "model"), **fields)
    (tmp_path / "in.txt").write_text("the cat sees the dog\n", encoding="utf-8")
    assert translate(["--model", str(folder), "--input", str(tmp_path / "in.txt"), "--quiet"]) == 2
    (line,) = error_lines(capsys, "xlpe-translate")
    assert str(folder) in line and words in line, line
    argv = ["perplexity", "--model", str(folder), "--source", str(tmp_path / "in.txt")]
    assert evaluate([*argv, "--ref", str(tmp_path / "in.txt")]) == 2
    (line,) = error_lines(capsys, "xlpe-evaluate")
    assert str(folder) in line and words in line, line


def test_xlpe_export_refuses_a_folder_whose_config_and_weights_disagree(toy_tokenizer, tmp_path, capsys):
    from xlpe.cli.export import main as export

    folder = edit_config(save_tiny_xlpe_model(toy_tokenizer, tmp_path / "model"), encoder_layers=2)
    assert export(["--model", str(folder), "--output", str(tmp_path / "onnx")]) == 2
    (line,) = error_lines(capsys, "xlpe-export")
    assert "config.json and the weights disagree" in line and "the weights lack 16 tensors" in line, line
    assert not (tmp_path / "onnx").exists()


def test_xlpe_train_refuses_malformed_config_overrides_in_one_line(tmp_path, capsys):
    from xlpe.cli.train import cli

    base = ["--output_dir", str(tmp_path / "run"), "--max_steps", "1", "--do_train"]
    assert cli([*base, "--config_overrides", "dropout"]) == 2
    (line,) = error_lines(capsys, "xlpe-train")
    assert "--config_overrides 'dropout': 'dropout' is not FIELD=VALUE" in line, line


def test_xlpe_train_refuses_to_resume_or_start_from_a_folder_whose_config_and_weights_disagree(
    toy_tokenizer, tmp_path, capsys
):
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    from xlpe.cli.train import cli
    from xlpe.training.errors import UsageError
    from xlpe.training.model_setup import build_model

    folder = edit_config(save_tiny_xlpe_model(toy_tokenizer, tmp_path / "model"), encoder_layers=2)
    hub = SimpleNamespace(cache_dir=None, model_revision=None, token=None, trust_remote_code=False)
    with pytest.raises(UsageError, match=r"config\.json and the weights disagree: config\.json has encoder_layers 2"):
        build_model(hub, None, toy_tokenizer, str(folder), {})  # a resume: the checkpoint's config and weights
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
    from test_train import tiny

    assert cli(tiny(tmp_path, "--model_name_or_path", str(folder))) == 2
    (line,) = error_lines(capsys, "xlpe-train")
    assert f"{folder}: config.json and the weights disagree" in line and "the weights lack 16 tensors" in line, line
