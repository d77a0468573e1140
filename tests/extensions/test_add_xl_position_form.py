"""A new XL position form is one module and one registration (CONTRIBUTING.md, "Adding an XL position form"): the
config accepts it, `xlpe-train --xl_position_form` lists it, every attention with XL heads builds it under its
attribute and asks it for a score bias, and the model uses it (XL order in, another output; gate 0, the stock
function). Nothing else of xlpe is touched; the registration is undone afterwards."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

from xlpe.models.configuration_xlpe import XLPEMarianConfig
from xlpe.models.modeling_xlpe import XLPEMarianMTModel
from xlpe.models.position_attention import PositionAwareSelfAttention
from xlpe.models.position_modules import XLPositionForm
from xlpe.models.registry import TINY_LAYOUT
from xlpe.models.xl_position_forms import (
    XL_POSITION_FORMS,
    XLFormSpec,
    register_xl_position_form,
    unregister_xl_position_form,
)

TINY = dict(TINY_LAYOUT, vocab_size=40, decoder_layers=1, dropout=0.0)  # the registry's tiny layout


class XLDirectionForm(XLPositionForm):
    """The contributor's module: a score bias by the direction of the XL order, one learned value per XL head for
    keys whose XL position comes before the query's and one for those after, times the gate g."""

    biases = True

    def __init__(self, config, head_dim: int):
        super().__init__()
        self.before = nn.Parameter(torch.linspace(-1.0, 1.0, config.xl_heads))
        self.after = nn.Parameter(torch.linspace(1.0, -1.0, config.xl_heads))

    def attention_bias(self, query, xl_positions, gate, scaling):
        direction = (xl_positions[:, None, :] - xl_positions[:, :, None]).sign()[:, None]  # (B, 1, L, L)
        before, after = (table.to(query.dtype)[None, :, None, None] for table in (self.before, self.after))
        bias = torch.where(direction < 0, before, torch.where(direction > 0, after, torch.zeros_like(before)))
        return bias * gate.to(query.dtype), None


@pytest.fixture
def direction_form():
    before = dict(XL_POSITION_FORMS)
    register_xl_position_form(
        XLFormSpec("direction", "before/after of the XL order, per XL head", XLDirectionForm, "xl_direction")
    )
    try:
        yield
    finally:
        unregister_xl_position_form("direction")
    assert XL_POSITION_FORMS == before


def model(**fields) -> XLPEMarianMTModel:
    torch.manual_seed(0)
    config = XLPEMarianConfig(
        **TINY, xl_strategy="head", xl_heads=2, xl_position_form="direction", xl_position_layers="all", **fields
    )
    return XLPEMarianMTModel(config).eval()


def logits(xl_model, positions) -> torch.Tensor:
    ids = torch.tensor([[5, 6, 7, 8, 9, 2]])  # EOS last (the tiny layout: 2)
    with torch.no_grad():
        return xl_model(input_ids=ids, reorder_positions=torch.tensor([positions]), decoder_input_ids=ids).logits


def test_the_config_and_the_flag_take_it(direction_form):
    from xlpe.training.run_config import parse_arguments

    assert XLPEMarianConfig(**TINY, xl_strategy="head", xl_heads=2, xl_position_form="direction").xl_heads == 2
    model_args, _, _ = parse_arguments(["--output_dir", "unused", "--xl_position_form", "direction"])
    assert model_args.xl_position_form == "direction"


def test_every_layer_builds_it_and_the_model_uses_it(direction_form):
    xl_model = model()
    for layer in xl_model.model.encoder.layers:  # xl_position_layers="all"
        assert isinstance(layer.self_attn.xl_direction, XLDirectionForm)
        assert layer.self_attn.xl_form is layer.self_attn.xl_direction
    monotone, reversed_order = logits(xl_model, [0, 1, 2, 3, 4, 5]), logits(xl_model, [4, 3, 2, 1, 0, 5])
    assert not torch.allclose(monotone, reversed_order)  # the XL order reaches the output
    xl_model.model.encoder.xl_position.gate.data.zero_()  # g = 0: no XL term, whatever the order
    torch.testing.assert_close(logits(xl_model, [0, 1, 2, 3, 4, 5]), logits(xl_model, [4, 3, 2, 1, 0, 5]))
    names = {name for name, _ in xl_model.named_parameters()}
    assert "model.encoder.layers.1.self_attn.xl_direction.before" in names  # its weights under its attribute


def test_a_saved_model_loads_and_generates_with_it(direction_form, tmp_path):
    xl_model = model()
    xl_model.save_pretrained(tmp_path)
    loaded = XLPEMarianMTModel.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(logits(loaded, [4, 3, 2, 1, 0, 5]), logits(xl_model, [4, 3, 2, 1, 0, 5]))
    ids = torch.tensor([[5, 6, 7, 8, 9, 2]])  # EOS last (the tiny layout: 2)
    assert loaded.generate(ids, max_new_tokens=4, num_beams=2).shape[0] == 1


def test_the_attention_asks_the_form_never_its_name():
    source = inspect.getsource(PositionAwareSelfAttention)
    for name in XL_POSITION_FORMS:
        assert f'"{name}"' not in source, name


def test_unknown_and_builtin_forms_are_refused():
    with pytest.raises(ValueError, match="xl_position_form"):
        XLPEMarianConfig(**TINY, xl_strategy="head", xl_heads=2, xl_position_form="direction")
    with pytest.raises(ValueError, match="built-in"):
        unregister_xl_position_form("relative")
    with pytest.raises(ValueError, match="already registered"):
        register_xl_position_form(XLFormSpec("rotary", "another rotary", XLDirectionForm))
