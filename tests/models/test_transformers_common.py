"""transformers' own common model tests run on every family, as a model file in transformers is tested:
`ModelTesterMixin` of the installed release (vendored per release: 5.23.0 and 5.24.0) and `GenerationTesterMixin`
(vendored from upstream main at 5.16.0.dev0, the closest copy obtainable; see tests/transformers_testing/README.md),
with one ModelTester per family (tiny config, inputs including valid extra ids), plus `GenerationChecks`, the one
generation property the mixins do not check (cached and uncached decoding agree; every position stack:
test_generation_consistency.py).

Stock `MarianMTModel` / `BartForConditionalGeneration` run through the same testers when
`XLPE_STOCK_BASELINE=1` (not in CI: they only establish which upstream tests the stock models skip or fail here).
Every skip below names its reason, which also holds for the stock model the family extends (upstream's own
Marian/BART test skips, or an environment limit that skips the test for stock too).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import unittest
import unittest.mock
from pathlib import Path

import torch
from transformers import BartConfig, BartForConditionalGeneration, BartModel, MarianConfig, MarianModel, MarianMTModel
from transformers.modeling_outputs import Seq2SeqLMOutput, Seq2SeqModelOutput
from transformers.models.auto.modeling_auto import MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, MODEL_MAPPING_NAMES

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the vendored package

from transformers_testing import modeling_common  # noqa: E402
from transformers_testing.generation.test_utils import GenerationTesterMixin  # noqa: E402

_upstream = modeling_common()  # upstream's test_modeling_common.py of the installed release (skips if none)
ModelTesterMixin, ids_tensor = _upstream.ModelTesterMixin, _upstream.ids_tensor

from xlpe.models.registry import MODEL_FAMILIES, ModelFamily  # noqa: E402

STOCK_BASELINE = os.environ.get("XLPE_STOCK_BASELINE") == "1"

# ---------------------------------------------------------------------------------------------------------
# ModelTesters
# ---------------------------------------------------------------------------------------------------------


class Seq2SeqModelTester:
    """Upstream's MarianModelTester/BartModelTester shape (batch 13, length 7, vocab 99, d_model 16, 2 layers of 4
    heads), for a config class and its extra per-token inputs (`extra_inputs`)."""

    config_class = MarianConfig
    config_kwargs: dict = {}

    def __init__(
        self,
        parent,
        batch_size=13,
        seq_length=7,
        vocab_size=99,
        hidden_size=16,
        num_layers=2,
        heads=4,
        ffn=4,
        max_position_embeddings=100,
        eos_token_id=2,
        pad_token_id=1,
        bos_token_id=0,
        decoder_start_token_id=3,
    ):
        self.parent, self.batch_size, self.seq_length, self.vocab_size = parent, batch_size, seq_length, vocab_size
        self.hidden_size, self.num_hidden_layers, self.num_attention_heads = hidden_size, num_layers, heads
        self.ffn, self.max_position_embeddings = ffn, max_position_embeddings
        self.eos_token_id, self.pad_token_id, self.bos_token_id = eos_token_id, pad_token_id, bos_token_id
        self.decoder_start_token_id = decoder_start_token_id
        self.is_training = True
        self.encoder_seq_length = self.decoder_seq_length = seq_length
        self.key_length = seq_length

    def get_config(self):
        return self.config_class(
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            encoder_layers=self.num_hidden_layers,
            decoder_layers=self.num_hidden_layers,
            encoder_attention_heads=self.num_attention_heads,
            decoder_attention_heads=self.num_attention_heads,
            encoder_ffn_dim=self.ffn,
            decoder_ffn_dim=self.ffn,
            dropout=0.1,
            attention_dropout=0.1,
            max_position_embeddings=self.max_position_embeddings,
            eos_token_id=self.eos_token_id,
            bos_token_id=self.bos_token_id,
            pad_token_id=self.pad_token_id,
            decoder_start_token_id=self.decoder_start_token_id,
            **self.config_kwargs,
        )

    def extra_inputs(self, config, input_ids, decoder_input_ids) -> dict:
        return {}

    def prepare_config_and_inputs(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        input_ids[:, -1] = self.eos_token_id
        decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        config = self.get_config()
        attention_mask = input_ids.ne(config.pad_token_id)
        inputs = {
            "input_ids": input_ids,
            "decoder_input_ids": decoder_input_ids,
            "attention_mask": attention_mask,
            "decoder_attention_mask": decoder_input_ids.ne(config.pad_token_id),
        }
        inputs.update(self.extra_inputs(config, input_ids, decoder_input_ids))
        return config, inputs

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()


class BartModelTester(Seq2SeqModelTester):
    config_class = BartConfig

    def get_config(self):
        config = super().get_config()
        config.max_position_embeddings = 20
        return config


def family_tester(family: ModelFamily, **config_kwargs) -> type:
    """The ModelTester of a registered family: its `tiny_fields` (plus `config_kwargs`) on upstream's shape, and
    valid extra inputs made from its extra inputs' `example` kinds (`ModelFamily.example_inputs`)."""

    class FamilyModelTester(BartModelTester if issubclass(family.config_class, BartConfig) else Seq2SeqModelTester):
        config_class = family.config_class

        def extra_inputs(self, config, input_ids, decoder_input_ids):
            return family.example_inputs(config, input_ids, decoder_input_ids)

    FamilyModelTester.config_kwargs = {**family.tiny_fields, **config_kwargs}
    FamilyModelTester.__name__ = f"{family.name}ModelTester"
    return FamilyModelTester


# ---------------------------------------------------------------------------------------------------------
# Generation: what upstream's GenerationTesterMixin does not check
# ---------------------------------------------------------------------------------------------------------


class GenerationChecks:
    """Greedy and beam `generate` with and without the KV cache give the same tokens. The mixin checks cached
    generation's output format, continuation from a returned cache, static vs dynamic cache and compiled vs eager,
    but never compares against uncached decoding, which recomputes the families' decoder-side extras (positions
    after the cache, MvPE+POS's hypothesis tags over a window reaching into earlier steps) from scratch each step."""

    def _generation_model(self):
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        config.dropout = config.attention_dropout = 0.0
        torch.manual_seed(0)
        model = self.all_model_classes[-1](config).eval()
        source = {k: v for k, v in inputs.items() if not k.startswith("decoder_")}
        return model, source

    def test_generate_with_and_without_cache_agree(self):
        model, source = self._generation_model()
        for num_beams in (1, 2):
            kwargs = dict(max_new_tokens=6, min_new_tokens=6, num_beams=num_beams, do_sample=False)
            cached = model.generate(**source, use_cache=True, **kwargs)
            uncached = model.generate(**source, use_cache=False, **kwargs)
            self.assertTrue(torch.equal(cached, uncached), f"num_beams={num_beams}: {cached} != {uncached}")


# ---------------------------------------------------------------------------------------------------------
# The test classes
# ---------------------------------------------------------------------------------------------------------


class CommonFamilyTests(ModelTesterMixin, GenerationTesterMixin, GenerationChecks):
    is_encoder_decoder = True
    test_missing_keys = False  # as upstream's Marian and BART tests
    model_tester_class = Seq2SeqModelTester

    def setUp(self):
        self.model_tester = self.model_tester_class(self)
        # the family's base model is registered with AutoModel (xlpe/models/__init__.py) at run time; upstream's
        # tests read transformers' static table of base models (e.g. test_training skips base models)
        base, head = self.all_model_classes
        for table, model_class in ((MODEL_MAPPING_NAMES, base), (MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, head)):
            patch = unittest.mock.patch.dict(table, {base.config_class.model_type: model_class.__name__})
            patch.start()
            self.addCleanup(patch.stop)

    def test_attention_outputs(self):
        """Upstream's test, adapted as upstream adapts it for models with extra outputs: it checks the number of
        fields of the output (5, + loss, + cache); a family's own fields (`reorder_positions`, `translation_loss`,
        ...: documented in its output dataclass) are not counted, everything else is checked unchanged."""
        patches = []
        for model_class in self.all_model_classes:
            output_class = inspect.signature(model_class.forward).return_annotation
            if not inspect.isclass(output_class):  # e.g. stock BART's `tuple | Seq2SeqLMOutput`: no extra fields
                continue
            standard = Seq2SeqLMOutput if issubclass(output_class, Seq2SeqLMOutput) else Seq2SeqModelOutput
            if output_class is not standard:
                names = set(standard.__dataclass_fields__)
                patches.append(
                    unittest.mock.patch.object(
                        output_class,
                        "__len__",
                        lambda output, names=names: sum(1 for key in output.keys() if key in names),
                    )
                )
        with contextlib.ExitStack() as stack:
            for patch in patches:
                stack.enter_context(patch)
            super().test_attention_outputs()


class FamilyCommonTests(CommonFamilyTests):
    family: ModelFamily

    def test_encoder_decoder_loss_no_double_shift(self):
        """Adapted, not skipped: upstream's check (the loss is the cross-entropy against `labels`, not against labels
        shifted once more) runs under the family's `translation_loss_only` fields (DPE's lambda = 1: its Eq. 2 loss,
        lambda * CE + (1 - lambda) * L_order, scales the CE's gradient by lambda otherwise)."""
        saved = self.model_tester.config_kwargs
        self.model_tester.config_kwargs = {**saved, **self.family.translation_loss_only}
        try:
            super().test_encoder_decoder_loss_no_double_shift()
        finally:
            self.model_tester.config_kwargs = saved


def family_test_case(family: ModelFamily, suffix: str = "", **config_kwargs) -> type:
    """The unittest class of transformers' common tests for `family` (its base and generation models)."""
    name = "".join(part.title() for part in family.name.split("_")) + suffix + "CommonTest"
    attributes = dict(
        family=family,
        all_model_classes=(family.base_model_class, family.generation_model_class),
        model_tester_class=family_tester(family, **config_kwargs),
        __module__=__name__,
        __qualname__=name,
    )
    return type(name, (FamilyCommonTests, unittest.TestCase), attributes)


# every registered family, and XL PE with the paper's Table 1 baselines stacked on its Combination
# (position_attention.py): relative position representations on both sides and DiSAN-style directional heads
for _family in MODEL_FAMILIES.values():
    globals()[family_test_case(_family).__name__] = family_test_case(_family)
_stacked = family_test_case(
    MODEL_FAMILIES["xlpe"], "StackedPositions", relative_attention_max_distance=3, directional_attention=True
)
globals()[_stacked.__name__] = _stacked
_alibi = family_test_case(MODEL_FAMILIES["xlpe"], "ALiBi", alibi_attention=True)  # beside the sinusoid (Combination)
globals()[_alibi.__name__] = _alibi
del _family, _stacked, _alibi


@unittest.skipUnless(STOCK_BASELINE, "baseline of the stock model: set XLPE_STOCK_BASELINE=1")
class StockMarianCommonTest(CommonFamilyTests, unittest.TestCase):
    all_model_classes = (MarianModel, MarianMTModel)
    model_tester_class = Seq2SeqModelTester


@unittest.skipUnless(STOCK_BASELINE, "baseline of the stock model: set XLPE_STOCK_BASELINE=1")
class StockBartCommonTest(CommonFamilyTests, unittest.TestCase):
    all_model_classes = (BartModel, BartForConditionalGeneration)
    model_tester_class = BartModelTester
