"""Gradient checkpointing, reentrant or not, gives every family the gradients of the plain backward pass: XL PE's
layer-1 input Z_XL (HeadXL, Combination) is a checkpoint input (`seq2seq_scaffold.checkpointed_layer`), not a
keyword tensor the reentrant recomputation would link to the already-freed outer graph."""

from __future__ import annotations

import pytest
import torch

from xlpe.models.configuration_xlpe import XLPEMarianConfig
from xlpe.models.modeling_xlpe import XLPEMarianMTModel
from xlpe.models.registry import MODEL_FAMILIES, TINY_LAYOUT

DIMS = dict(
    vocab_size=40,
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    max_position_embeddings=32,
    dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
)
MARIAN_IDS = dict(pad_token_id=0, eos_token_id=2, decoder_start_token_id=0)
FAMILIES = {
    "xlpe-head": (XLPEMarianConfig, XLPEMarianMTModel, dict(xl_strategy="head", **MARIAN_IDS)),
    "xlpe-combination": (XLPEMarianConfig, XLPEMarianMTModel, dict(xl_strategy="combination", **MARIAN_IDS)),
    "xlpe-rotary-every-layer": (
        XLPEMarianConfig,
        XLPEMarianMTModel,
        dict(
            xl_strategy="head",
            rotary_attention=True,
            xl_position_form="rotary",
            xl_position_layers="all",
            **MARIAN_IDS,
        ),
    ),
}
# every registered family in its tiny config (`ModelFamily.tiny_fields`; DIMS and the tiny layout's ids on top)
FAMILIES.update(
    {
        name: (family.config_class, family.generation_model_class, family.tiny_fields)
        for name, family in MODEL_FAMILIES.items()
    }
)


def gradients(model, inputs) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    model(**inputs).loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("reentrant", [True, False])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_checkpointed_gradients_equal_the_plain_ones(family, reentrant):
    config_class, model_class, extra = FAMILIES[family]
    config = config_class(**{**TINY_LAYOUT, **DIMS, **extra})
    torch.manual_seed(0)
    model = model_class(config).train()
    inputs = dict(input_ids=torch.randint(3, 40, (2, 7)), labels=torch.randint(3, 40, (2, 5)))
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    inputs["attention_mask"][1, 5:] = 0
    plain = gradients(model, inputs)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    checkpointed = gradients(model, inputs)
    assert plain.keys() == checkpointed.keys() and len(plain) > 10
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=1e-4, atol=1e-6, msg=name)
