"""The families' class shape: one pre-trained base per family, flat base and generation models, one
generation head, and the old names of generic pieces importable with a DeprecationWarning.

transformers keeps one flat class per role (`MarianMTModel(MarianPreTrainedModel, GenerationMixin)`); so do the
families: `<Family>PreTrainedModel(HubModelMixin, <Stock>PreTrainedModel)` is the only pre-trained base, the base
model derives from it alone and the generation model from it and `GenerationMixin`. What the families used to
inherit from the stock MarianModel/MarianMTModel/BartModel/BartForConditionalGeneration is checked here to be
still there (the transformers common tests, test_transformers_common.py, exercise it further).
"""

from __future__ import annotations

import importlib
import inspect
import warnings

import pytest
import torch
from transformers import GenerationMixin

from xlpe.models.hub_support import HubModelMixin
from xlpe.models.registry import MODEL_FAMILIES
from xlpe.training.collator import ExtraInputsDataCollator

# a tiny vocabulary with Marian's conventions (pad = decoder start = the last id), as an OPUS-MT checkpoint
TINY = dict(vocab_size=40, pad_token_id=39, eos_token_id=0, decoder_start_token_id=39)

# every registered family: (its pre-trained base, base model, generation model, the stock classes it extends)
FAMILIES = [
    pytest.param(
        family.generation_model_class.__bases__[0],
        family.base_model_class,
        family.generation_model_class,
        *family.stock_classes(),
        id=name,
    )
    for name, family in MODEL_FAMILIES.items()
]
CONFIGS = {
    family.generation_model_class: lambda family=family: family.tiny_config(**TINY)
    for family in MODEL_FAMILIES.values()
}


@pytest.mark.parametrize("pretrained, base, generation, stock_pretrained, stock_generation", FAMILIES)
def test_one_pretrained_base_and_flat_models(pretrained, base, generation, stock_pretrained, stock_generation):
    assert pretrained.__bases__ == (HubModelMixin, stock_pretrained)
    assert base.__bases__ == (pretrained,)
    assert generation.__bases__ == (pretrained, GenerationMixin)
    module = inspect.getsource(importlib.import_module(generation.__module__))
    assert "PreTrainedModel.__init__(self" not in module  # no grandparent __init__ call skips a stock __init__
    # the generation head's forward is the shared one (seq2seq_scaffold.generation_head_forward)
    assert "generation_head_forward(" in inspect.getsource(generation.forward)
    assert "lm_head(" not in inspect.getsource(generation.forward)


@pytest.mark.parametrize("pretrained, base, generation, stock_pretrained, stock_generation", FAMILIES)
def test_stock_generation_model_behaviour_kept(pretrained, base, generation, stock_pretrained, stock_generation):
    for name in ("base_model_prefix", "_keys_to_ignore_on_load_missing", "_keys_to_ignore_on_save"):
        assert getattr(generation, name) == getattr(stock_generation, name), name
    for flag in ("supports_gradient_checkpointing", "_supports_sdpa", "_supports_flash_attn", "_can_compile_fullgraph"):
        assert getattr(generation, flag) == getattr(stock_generation, flag), flag
    torch.manual_seed(0)
    model = generation(CONFIGS[generation]())
    assert torch.equal(model.final_logits_bias, torch.zeros_like(model.final_logits_bias))
    labels = torch.tensor([[5, 6, 0]])
    assert model.prepare_decoder_input_ids_from_labels(labels).tolist() == [[39, 5, 6]]
    assert model.get_encoder() is model.model.encoder and model.get_decoder() is model.model.decoder
    model.resize_token_embeddings(44)
    assert model.get_input_embeddings().num_embeddings == 44
    assert model.final_logits_bias.shape[-1] == model.get_output_embeddings().weight.shape[0] == 44


@pytest.mark.parametrize(
    "module, old, new",
    [
        ("xlpe.models.hub_support", "XLPEHubMixin", HubModelMixin),
        ("xlpe.training.collator", "XLPEDataCollator", ExtraInputsDataCollator),
        ("xlpe", "XLPEDataCollator", ExtraInputsDataCollator),
    ],
)
def test_old_names_import_with_a_deprecation_warning(module, old, new):
    with pytest.warns(DeprecationWarning, match=f"{old} was renamed {new.__name__}"):
        value = getattr(importlib.import_module(module), old)
    assert value is new
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(importlib.import_module(module), new.__name__) is new  # the new name: no warning


def test_from_import_of_an_old_name_warns():
    with pytest.warns(DeprecationWarning):
        from xlpe.training.collator import XLPEDataCollator  # noqa: F401
