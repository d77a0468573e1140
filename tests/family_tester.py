"""ModelTester-style checks that every model family of xlpe must pass (HF `ModelTesterMixin` in spirit).

A family's test module subclasses `RegistryFamilyTests` (everything read off the model-family registry) or
`FamilyTests` and provides:
    model_class             the generation model class (e.g. XLPEMarianMTModel)
    base_model_class        the base model class (e.g. XLPEMarianModel)
    make_config(**kw)       a tiny random config (vocab from the `toy_tokenizer` fixture)
    extra_inputs(batch)     dict of the family's extra forward inputs for a tokenized batch (may be {})
Every test here is offline and runs in seconds on a CPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from xlpe import ExtraInputsDataCollator, XLPETranslationPipeline

# A tiny Marian-shaped configuration (HF ModelTester style): fast on a CPU, big enough to exercise every path.
TINY_MARIAN = dict(
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=64,
    dropout=0.0,
)


def tiny_kwargs(tokenizer) -> dict:
    """TINY_MARIAN plus the vocabulary and special-token ids of `tokenizer` (Marian conventions)."""
    return dict(
        TINY_MARIAN,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
        forced_eos_token_id=tokenizer.eos_token_id,
    )


SOURCES = ["the cat sees the dog", "a dog chases the small cat in the garden"]
TARGETS = ["die katze sieht den hund", "ein hund jagt die kleine katze im garten"]

# Runs in a fresh interpreter where `import xlpe` fails: only the saved directory's custom code is usable.
FRESH_PROCESS_SCRIPT = """
import json, sys
sys.modules["xlpe"] = None  # the package is NOT importable here
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
directory = sys.argv[1]
model = AutoModelForSeq2SeqLM.from_pretrained(directory, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(directory, trust_remote_code=True)
batch = tokenizer(["the cat sees the dog"], return_tensors="pt")
ids = model.generate(**batch, num_beams=2, max_new_tokens=5)
translator = pipeline("translation", model=directory, trust_remote_code=True)
result = translator("the cat sees the dog", num_beams=2, max_new_tokens=5)
print(json.dumps({"module": type(model).__module__, "ids": ids.tolist(), "pipeline": result,
                  "pipeline_class": type(translator).__name__}))
"""


class FamilyTests:
    model_class = None
    base_model_class = None

    # --- to provide -------------------------------------------------------------------------------------
    def make_config(self, tokenizer, **overrides):  # pragma: no cover - abstract
        raise NotImplementedError

    def extra_inputs(self, batch) -> dict:
        return {}

    # --- helpers ----------------------------------------------------------------------------------------
    def make_model(self, tokenizer, seed: int = 0, **overrides):
        torch.manual_seed(seed)
        return self.model_class(self.make_config(tokenizer, **overrides)).eval()

    def make_batch(self, tokenizer, sources=SOURCES, targets=TARGETS):
        batch = tokenizer(list(sources), text_target=list(targets), return_tensors="pt", padding=True)
        batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
        batch = dict(batch)
        batch.update(self.extra_inputs(batch))
        return batch

    # --- tests ------------------------------------------------------------------------------------------
    def test_forward_loss_and_shapes(self, toy_tokenizer):
        model = self.make_model(toy_tokenizer)
        batch = self.make_batch(toy_tokenizer)
        out = model(**batch)
        assert out.logits.shape[:2] == batch["labels"].shape
        assert out.loss is not None and torch.isfinite(out.loss)
        out.loss.backward()
        grads = [p.grad for p in model.parameters() if p.requires_grad]
        assert any(g is not None and g.abs().sum() > 0 for g in grads)

    def test_loss_weighted_by_the_steps_supervised_tokens(self, toy_tokenizer):
        """Split one batch into micro-batches and pass `num_items_in_batch` (what the Trainer does under gradient
        accumulation and DDP): the micro-batch losses sum to their token-weighted mean, and with the auxiliary
        loss switched off their gradients sum to the whole batch's gradients (one token mean, as in fairseq)."""
        batch = self.make_batch(toy_tokenizer)
        halves = [{key: value[i : i + 1] for key, value in batch.items()} for i in range(2)]
        counts = [int((half["labels"] != -100).sum()) for half in halves]
        total = torch.tensor(sum(counts))
        assert counts[0] != counts[1]  # unequal shares: a plain mean of the two means would differ

        model = self.make_model(toy_tokenizer)
        plain = [model(**half) for half in halves]
        weighted = [model(**half, num_items_in_batch=total) for half in halves]
        for p, w, n in zip(plain, weighted, counts):
            torch.testing.assert_close(w.loss, p.loss * n / total.item())
            torch.testing.assert_close(w.translation_loss, p.translation_loss)  # logged parts stay means
        whole = model(**batch)
        mixed = sum(p.translation_loss * n for p, n in zip(plain, counts)) / total.item()
        torch.testing.assert_close(mixed, whole.translation_loss)

        model = self.make_model(toy_tokenizer, **self.auxiliary_loss_off)
        model(**batch).loss.backward()
        expected = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        model.zero_grad()
        for half in halves:
            model(**half, num_items_in_batch=total).loss.backward()
        for name, p in model.named_parameters():
            if name in expected:
                torch.testing.assert_close(p.grad, expected[name], atol=1e-6, rtol=1e-4, msg=name)

    auxiliary_loss_off: dict = {}  # config overrides that give the auxiliary loss weight 0

    def test_save_load_roundtrip_identical_logits(self, toy_tokenizer, tmp_path):
        model = self.make_model(toy_tokenizer)
        batch = self.make_batch(toy_tokenizer)
        model.save_pretrained(tmp_path)
        assert (tmp_path / "model.safetensors").is_file()
        reloaded = self.model_class.from_pretrained(tmp_path).eval()
        with torch.no_grad():
            torch.testing.assert_close(model(**batch).logits, reloaded(**batch).logits, rtol=0, atol=0)
        config = json.loads((tmp_path / "config.json").read_text())
        assert config["model_type"] == model.config.model_type
        assert "translation" in config["custom_pipelines"]
        assert (tmp_path / "pipeline_translation.py").is_file()

    def test_auto_classes(self, toy_tokenizer, tmp_path):
        from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

        model = self.make_model(toy_tokenizer)
        model.save_pretrained(tmp_path)
        assert type(AutoConfig.from_pretrained(tmp_path)) is type(model.config)
        assert type(AutoModelForSeq2SeqLM.from_pretrained(tmp_path)) is self.model_class
        assert type(AutoModel.from_config(model.config)) is self.base_model_class

    def test_sdpa_matches_eager(self, toy_tokenizer):
        batch = self.make_batch(toy_tokenizer)
        eager = self.make_model(toy_tokenizer, attn_implementation="eager")
        sdpa = self.make_model(toy_tokenizer, attn_implementation="sdpa")
        assert eager.config._attn_implementation == "eager" and sdpa.config._attn_implementation == "sdpa"
        sdpa.load_state_dict(eager.state_dict())
        with torch.no_grad():
            torch.testing.assert_close(eager(**batch).logits, sdpa(**batch).logits, rtol=1e-4, atol=1e-5)

    def test_output_attentions(self, toy_tokenizer):
        model = self.make_model(toy_tokenizer, attn_implementation="eager")
        batch = self.make_batch(toy_tokenizer)
        out = model(**batch, output_attentions=True, output_hidden_states=True)
        config = model.config
        assert len(out.encoder_attentions) == config.encoder_layers
        assert len(out.cross_attentions) == config.decoder_layers
        assert len(out.encoder_hidden_states) == config.encoder_layers + 1

    def test_beam_generate(self, toy_tokenizer):
        model = self.make_model(toy_tokenizer)
        batch = self.make_batch(toy_tokenizer)
        inputs = {k: v for k, v in batch.items() if k not in ("labels",) and not k.startswith("decoder_")}
        greedy = model.generate(**inputs, max_new_tokens=6)
        beams = model.generate(**inputs, num_beams=3, num_return_sequences=2, max_new_tokens=6)
        assert greedy.shape[0] == 2 and beams.shape[0] == 4
        plain = {k: inputs[k] for k in ("input_ids", "attention_mask")}
        assert model.generate(**plain, num_beams=3, max_new_tokens=6).shape[0] == 2

    def test_collator_pads_extra_inputs(self, toy_tokenizer):
        model = self.make_model(toy_tokenizer)
        features = []
        for source, target in zip(SOURCES, TARGETS):
            enc = toy_tokenizer(source, text_target=target)
            feature = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": enc["labels"]}
            single = {k: torch.tensor([v]) for k, v in feature.items()}
            for key, value in self.extra_inputs(single).items():
                feature[key] = value[0].tolist()
            features.append(feature)
        batch = ExtraInputsDataCollator(toy_tokenizer, model=model)(features)
        for key in self.extra_inputs({k: torch.tensor([v]) for k, v in features[0].items() if k != "labels"}):
            reference = "labels" if key.startswith("decoder_") else "input_ids"
            assert batch[key].shape == batch[reference].shape
        assert torch.isfinite(model(**batch).loss)

    def test_in_memory_pipeline(self, toy_tokenizer):
        from transformers import pipeline

        model = self.make_model(toy_tokenizer)
        translator = XLPETranslationPipeline(model=model, tokenizer=toy_tokenizer)
        single = translator("the cat sees the dog", num_beams=2, max_new_tokens=5)
        assert isinstance(single, list) and isinstance(single[0]["translation_text"], str)
        several = translator(["the dog", "a cat"], max_new_tokens=4)
        assert len(several) == 2 and all("translation_text" in item for item in several)
        by_task = pipeline("xlpe-translation", model=model, tokenizer=toy_tokenizer)
        assert (
            by_task("the dog", max_new_tokens=4)[0]["translation_text"]
            == translator("the dog", max_new_tokens=4)[0]["translation_text"]
        )
        with pytest.raises(ValueError, match="string"):
            translator(123)

    def test_fresh_process_remote_code_and_pipeline(self, toy_tokenizer, tmp_path):
        model = self.make_model(toy_tokenizer)
        model.save_pretrained(tmp_path)
        toy_tokenizer.save_pretrained(tmp_path)
        expected = model.generate(
            **toy_tokenizer(["the cat sees the dog"], return_tensors="pt"), num_beams=2, max_new_tokens=5
        )
        run = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(FRESH_PROCESS_SCRIPT), str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        result = json.loads(run.stdout.strip().splitlines()[-1])
        assert result["module"].startswith("transformers_modules"), result["module"]
        assert result["ids"] == expected.tolist()
        assert result["pipeline_class"] == "XLPETranslationPipeline"
        assert isinstance(result["pipeline"][0]["translation_text"], str)


class RegistryFamilyTests(FamilyTests):
    """`FamilyTests` of a registered family, everything read off the registry (`xlpe.models.registry`): its classes,
    its tiny config (`ModelFamily.tiny_config` on `tiny_kwargs`, plus `config_fields`), valid extra inputs made from
    their `example` kinds, and the fields that switch its auxiliary loss off. Subclass it with `family_name` set,
    or make one with `registry_family_tests(name)`."""

    family_name: str = ""
    config_fields: dict = {}

    @classmethod
    def family(cls):
        from xlpe.models.registry import get_family

        return get_family(cls.family_name)

    @property
    def model_class(self):
        return self.family().generation_model_class

    @property
    def base_model_class(self):
        return self.family().base_model_class

    @property
    def auxiliary_loss_off(self):
        return self.family().translation_loss_only

    def fields(self) -> dict:
        """`config_fields`, and the shared NLTK data for a config that tags raw text (its pipeline runs offline)."""
        from conftest import SHARED_DIR

        from xlpe.models.registry import declares_field

        shared = {}
        if declares_field(self.family().config_class, "nltk_data"):
            shared["nltk_data"] = str(SHARED_DIR / "data" / "nltk_data")
        return {**shared, **self.config_fields}

    def make_config(self, tokenizer, **overrides):
        return self.family().tiny_config(**{**tiny_kwargs(tokenizer), **self.fields(), **overrides})

    def extra_inputs(self, batch) -> dict:
        labels = batch.get("labels")
        return self.family().example_inputs(
            self.family().tiny_config(**self.fields()),
            batch["input_ids"],
            None if labels is None else labels.clamp_min(0),
            attention_mask=batch.get("attention_mask"),
            decoder_attention_mask=None if labels is None else labels != -100,
        )


def registry_family_tests(family_name: str, **config_fields) -> type:
    """A `RegistryFamilyTests` class for the registered family `family_name` (its tiny config plus `config_fields`)."""
    name = "Test" + "".join(part.title() for part in family_name.split("_")) + "Family"
    return type(name, (RegistryFamilyTests,), {"family_name": family_name, "config_fields": dict(config_fields)})
