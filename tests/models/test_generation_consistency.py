"""`generate` with the KV cache computes what `generate` without it computes, and a generation longer than the
model's positions is a clear ValueError: for every family and every position stack, under every transformers
release the suite runs against (CI: the pinned one and the newest; .ci/run).

Why per stack: each stack keeps its own decoder-side state across cached steps (relative distances from the cache
length, the absolute sinusoid's offset, mvPE+POS's hypothesis tags over a window that reaches into earlier
steps), and transformers 5.24 renamed the cache argument (`past_key_values` -> `cache`): a family that reads
the cache under the wrong name silently restarts positions at 0 in every step (transformers_compat.py)."""

from __future__ import annotations

import pytest
import torch

from xlpe.models.configuration_dpe import DPEMarianConfig
from xlpe.models.configuration_mvpe_pos import MvPEPosConfig
from xlpe.models.configuration_xlpe import XLPEMarianConfig
from xlpe.models.modeling_dpe import DPEMarianMTModel
from xlpe.models.modeling_mvpe_pos import MvPEPosForConditionalGeneration
from xlpe.models.modeling_xlpe import XLPEMarianMTModel
from xlpe.models.registry import MODEL_FAMILIES, TINY_LAYOUT, family_of_model_type, generate_inputs

VOCAB, PAD, EOS, START, MAX_POSITIONS = 40, 1, 2, 1, 24
BODY = dict(  # the registry's tiny layout (ids as it sets them: pad 1, EOS 2, BOS 0) with fewer positions
    TINY_LAYOUT, vocab_size=VOCAB, dropout=0.0, attention_dropout=0.0, max_position_embeddings=MAX_POSITIONS
)
assert (TINY_LAYOUT["pad_token_id"], TINY_LAYOUT["eos_token_id"], TINY_LAYOUT["decoder_start_token_id"]) == (
    PAD,
    EOS,
    START,
)
XL = dict(reorder_predictor_hidden_size=8, reorder_predictor_heads=2)
RELATIVE = dict(relative_attention_max_distance=3)
TAGS = dict(pos_tagger="nltk-en")

STACKS = {  # name -> (config class, model class, config fields)
    "xlpe-inxl": (XLPEMarianConfig, XLPEMarianMTModel, dict(XL, xl_strategy="in")),
    "xlpe-headxl": (XLPEMarianConfig, XLPEMarianMTModel, dict(XL, xl_strategy="head", xl_heads=2)),
    "xlpe-combination": (XLPEMarianConfig, XLPEMarianMTModel, dict(XL, xl_strategy="combination", xl_heads=2)),
    "xlpe-combination+relative": (
        XLPEMarianConfig,
        XLPEMarianMTModel,
        dict(XL, xl_strategy="combination", xl_heads=2, **RELATIVE),
    ),
    "xlpe-combination+relative-decoder-only": (
        XLPEMarianConfig,
        XLPEMarianMTModel,
        dict(XL, xl_strategy="combination", xl_heads=2, relative_attention_sides="decoder", **RELATIVE),
    ),
    "marian-relative-only-no-absolute": (
        XLPEMarianConfig,
        XLPEMarianMTModel,
        dict(xl_strategy="none", absolute_positions=False, **RELATIVE),
    ),
    "marian-rotary-only-no-absolute": (
        XLPEMarianConfig,
        XLPEMarianMTModel,
        dict(xl_strategy="none", absolute_positions=False, rotary_attention=True),
    ),
    "xlpe-xl-rotary+rotary-no-absolute": (
        XLPEMarianConfig,
        XLPEMarianMTModel,
        dict(
            XL,
            xl_strategy="head",
            xl_heads=2,
            xl_position_form="rotary",
            rotary_attention=True,
            absolute_positions=False,
        ),
    ),
    "marian-alibi-only-no-absolute": (
        XLPEMarianConfig,
        XLPEMarianMTModel,
        dict(xl_strategy="none", absolute_positions=False, alibi_attention=True),
    ),
    "xlpe-xl-alibi-every-layer+alibi-no-absolute": (
        XLPEMarianConfig,
        XLPEMarianMTModel,
        dict(
            XL,
            xl_strategy="head",
            xl_heads=2,
            xl_position_form="alibi",
            xl_position_layers="all",
            alibi_attention=True,
            absolute_positions=False,
        ),
    ),
    "dpe+alibi-decoder": (
        DPEMarianConfig,
        DPEMarianMTModel,
        dict(dpe_layers=1, alibi_attention=True, alibi_attention_sides="decoder"),
    ),
    "xlpe-xl-relative-every-layer+relative": (
        XLPEMarianConfig,
        XLPEMarianMTModel,
        dict(
            XL,
            xl_strategy="head",
            xl_heads=2,
            xl_position_form="relative",
            xl_position_layers="all",
            xl_relative_max_distance=3,
            **RELATIVE,
        ),
    ),
    "dpe+rotary-decoder": (
        DPEMarianConfig,
        DPEMarianMTModel,
        dict(dpe_layers=1, rotary_attention=True, rotary_attention_sides="decoder"),
    ),
    "xlpe-combination+directional": (
        XLPEMarianConfig,
        XLPEMarianMTModel,
        dict(XL, xl_strategy="combination", xl_heads=2, directional_attention=True),
    ),
    "xlpe-combination+source-tags": (
        XLPEMarianConfig,
        XLPEMarianMTModel,
        dict(XL, xl_strategy="combination", xl_heads=2, **TAGS),
    ),
    "dpe+relative+directional": (
        DPEMarianConfig,
        DPEMarianMTModel,
        dict(dpe_layers=1, directional_attention=True, **RELATIVE),
    ),
    "dpe+source-tags": (DPEMarianConfig, DPEMarianMTModel, dict(dpe_layers=1, **TAGS)),
    "mvpe_pos-decoder-tags-learned": (
        MvPEPosConfig,
        MvPEPosForConditionalGeneration,
        dict(
            pos_tag_sides="decoder",
            pos_tags=["NOUN", "VERB"],
            pos_dim=4,
            decoder_tagger_window=2,
            decoder_tagger_hidden_size=8,
            pos_tag_encoding="learned",
            pe_step=2.0,
        ),
    ),
    "mvpe_pos-encoder-tags": (
        MvPEPosConfig,
        MvPEPosForConditionalGeneration,
        dict(pos_tag_sides="encoder", pos_tags=["NOUN", "VERB", "DET"], pos_dim=4, pe_step=1.0),
    ),
}

# every registered family in its tiny config (`ModelFamily.tiny_fields`): a new family is covered with no edit here
STACKS.update(
    {
        name: (family.config_class, family.generation_model_class, family.tiny_fields)
        for name, family in MODEL_FAMILIES.items()
    }
)


def build(name: str):
    config_class, model_class, fields = STACKS[name]
    torch.manual_seed(0)
    model = model_class(config_class(**BODY, **fields)).eval()
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(3, VOCAB, (3, 7), generator=generator)
    input_ids[:, -1] = EOS
    input_ids[2, 4:] = PAD  # a padded row
    input_ids[2, 3] = EOS
    source = {"input_ids": input_ids, "attention_mask": input_ids.ne(PAD).long()}
    # the test-time extra inputs the model reads (source tags; oracles are predicted by the model itself)
    examples = family_of_model_type(model.config.model_type).example_inputs(
        model.config, input_ids, attention_mask=source["attention_mask"], generator=generator
    )
    source.update({name: value for name, value in examples.items() if name in generate_inputs()})
    return model, source


@pytest.mark.parametrize("name", sorted(STACKS))
@pytest.mark.parametrize("num_beams", [1, 3])
def test_generate_with_and_without_cache_agree(name, num_beams):
    model, source = build(name)
    kwargs = dict(max_new_tokens=12, min_new_tokens=12, num_beams=num_beams, do_sample=False)
    with torch.no_grad():
        cached = model.generate(**source, use_cache=True, **kwargs)
        uncached = model.generate(**source, use_cache=False, **kwargs)
    assert cached.shape[1] == 13  # the start token + 12: the comparison covers every position up to 12
    assert torch.equal(cached, uncached), f"{name}, num_beams={num_beams}:\n{cached}\n!=\n{uncached}"


@pytest.mark.parametrize("name", sorted(STACKS))
@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_past_the_positions_is_a_value_error(name, use_cache):
    model, source = build(name)
    too_many = MAX_POSITIONS + 4
    with torch.no_grad(), pytest.raises(ValueError, match="max_position_embeddings"):
        model.generate(**source, use_cache=use_cache, max_new_tokens=too_many, min_new_tokens=too_many, num_beams=2)
    with torch.no_grad():  # up to the last position is fine
        output = model.generate(
            **source, use_cache=use_cache, max_new_tokens=MAX_POSITIONS - 1, min_new_tokens=MAX_POSITIONS - 1
        )
    assert output.shape[1] == MAX_POSITIONS


@pytest.mark.parametrize("name", ["xlpe-combination+relative", "dpe", "mvpe_pos"])
def test_cache_is_accepted_under_either_name(name):
    """`past_key_values=` (transformers <= 5.23) and `cache=` (>= 5.24) continue a decoding identically."""
    from xlpe.models.transformers_compat import output_cache

    model, source = build(name)
    decoder_input_ids = torch.full((3, 1), START)
    with torch.no_grad():
        first = model(**source, decoder_input_ids=decoder_input_ids, use_cache=True)
        next_ids = first.logits[:, -1].argmax(-1, keepdim=True)
        steps = []
        for argument in ("past_key_values", "cache"):
            again = model(**source, decoder_input_ids=decoder_input_ids, use_cache=True)
            with pytest.warns(FutureWarning) if argument == "past_key_values" and _renamed() else _nothing():
                step = model(**source, decoder_input_ids=next_ids, use_cache=True, **{argument: output_cache(again)})
            steps.append(step.logits)
        full = model(**source, decoder_input_ids=torch.cat([decoder_input_ids, next_ids], 1), use_cache=False).logits
    torch.testing.assert_close(steps[0], steps[1], rtol=0, atol=0)
    torch.testing.assert_close(steps[0][:, -1], full[:, -1], rtol=1e-5, atol=1e-5)
    # two different caches: before 5.24 a ValueError; from 5.24 on, as stock models, `cache` wins with a warning
    other = output_cache(model(**source, decoder_input_ids=decoder_input_ids, use_cache=True))
    both = pytest.warns(FutureWarning, match="Both") if _renamed() else pytest.raises(ValueError, match="once")
    with torch.no_grad(), both:
        model(**source, decoder_input_ids=next_ids, past_key_values=output_cache(first), cache=other)


def test_eval_forward_is_deterministic_with_labels():
    """Two identical calls of a model in eval mode, with labels (and gold decoder tags), give identical outputs."""
    for name in ("xlpe-combination+relative", "dpe", "mvpe_pos"):
        model, source = build(name)
        labels = torch.randint(3, VOCAB, (3, 6), generator=torch.Generator().manual_seed(2))
        extra = {"decoder_pos_tag_ids": torch.randint(3, 6, (3, 6))} if name.startswith("mvpe") else {}
        with torch.no_grad():
            first = model(**source, labels=labels, **extra)
            second = model(**source, labels=labels, **extra, return_dict=False)
        assert torch.equal(first.loss, second[0]) and torch.equal(first.logits, second[1]), name


def _renamed() -> bool:
    from xlpe.models.transformers_compat import CACHE_ARGUMENT

    return CACHE_ARGUMENT == "cache"


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
