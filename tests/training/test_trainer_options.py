"""What the Trainer's options give, checked option by option:

* every auxiliary loss (XL PE reorder predictor, DPE order loss, mvPE+POS hypothesis tagger) is computed, logged
  and trains its module under label smoothing, gradient accumulation, `average_tokens_across_devices` and
  length-grouped batches;
* `group_by_length` makes length-homogeneous batches served in random order (not sorted sweeps);
* predictions come back in input order whatever the evaluation sampler;
* the BLEU tokenizer is chosen per target language or by flag, and an unusable one is a one-line error before
  any work;
* XL PE's test split is scored with predicted and with oracle positions in one run; the test split keeps its
  text by default (scoring needs it), the training split does not.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import sacrebleu.metrics.bleu as sacrebleu_bleu
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_train import log_history, tiny
from torch.utils.data import RandomSampler
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, TrainerCallback

from xlpe.cli import evaluate as evaluate_cli
from xlpe.cli import train
from xlpe.evaluation import check_bleu_tokenizer
from xlpe.features.prepare import PrepareOptions
from xlpe.models.seq2seq_scaffold import translation_loss
from xlpe.training.data import _builtin_splits
from xlpe.training.run import main, parse_arguments
from xlpe.training.sampling import ShuffledLengthGroupedSampler, example_lengths
from xlpe.training.trainer import ExtraInputsSeq2SeqTrainer

AUXILIARY = {  # family -> (the auxiliary loss it logs, the module only that loss trains)
    "xlpe": ("reorder_loss", "reorder_predictor"),
    "dpe": ("order_loss", "dynamic_position"),
    "mvpe_pos": ("tag_loss", "hypothesis_tagger"),
}


class RecordAuxiliaryWeights(TrainerCallback):
    """Copies the auxiliary module's weights at the start and the end of training, and the model's config."""

    def __init__(self, module_name: str):
        self.module_name, self.before, self.after, self.config = module_name, None, None, None

    def _weights(self, model):
        module = next(m for name, m in model.named_modules() if name.endswith(self.module_name))
        return {name: p.detach().clone() for name, p in module.named_parameters()}

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.before = self._weights(model)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self.after, self.config = self._weights(model), model.config


def train_with(tmp_path, family: str, *options: str, shared_dir=None):
    loss_name, module_name = AUXILIARY[family]
    recorder = RecordAuxiliaryWeights(module_name)
    extra = []
    if family == "mvpe_pos":
        extra = ["--config_overrides", "pos_dim=8", "--nltk_data", str(shared_dir / "data" / "nltk_data")]
    main(
        tiny(
            tmp_path,
            "--model_type",
            family,
            "--max_steps",
            "3",
            "--logging_steps",
            "1",
            "--do_train",
            "--save_strategy",
            "no",
            *extra,
            *options,
        ),
        callbacks=[recorder],
    )
    train_logs = [entry for entry in log_history(tmp_path / "run") if "loss" in entry]
    return loss_name, recorder, train_logs


def assert_auxiliary_loss_trains(loss_name, recorder, train_logs):
    assert len(train_logs) == 3, train_logs
    assert all(loss_name in entry and "translation_loss" in entry for entry in train_logs), train_logs
    assert all(entry[loss_name] > 0 for entry in train_logs)
    changed = [name for name, weight in recorder.before.items() if not torch.equal(weight, recorder.after[name])]
    assert changed, f"no weight of {recorder.module_name} changed"


TRAINER_OPTIONS = {
    "label_smoothing": ["--label_smoothing_factor", "0.1"],
    "gradient_accumulation": ["--gradient_accumulation_steps", "2"],
    "average_tokens_across_devices": ["--average_tokens_across_devices", "true"],
    "group_by_length": ["--train_sampling_strategy", "group_by_length"],
}


@pytest.mark.parametrize("option", sorted(TRAINER_OPTIONS))
def test_reorder_loss_is_computed_logged_and_trains_the_predictor_under(option, tmp_path):
    loss_name, recorder, train_logs = train_with(tmp_path, "xlpe", *TRAINER_OPTIONS[option])
    assert_auxiliary_loss_trains(loss_name, recorder, train_logs)
    if option == "label_smoothing":
        assert recorder.config.label_smoothing == 0.1  # applied by the model's own translation loss


@pytest.mark.parametrize("family", ["dpe", "mvpe_pos"])
def test_other_auxiliary_losses_survive_label_smoothing(family, tmp_path, shared_dir):
    loss_name, recorder, train_logs = train_with(
        tmp_path, family, *TRAINER_OPTIONS["label_smoothing"], shared_dir=shared_dir
    )
    assert_auxiliary_loss_trains(loss_name, recorder, train_logs)
    assert recorder.config.label_smoothing == 0.1


def test_model_label_smoothing_is_the_stock_formula():
    torch.manual_seed(0)
    logits, labels = torch.randn(2, 5, 11), torch.randint(0, 11, (2, 5))
    labels[1, 3:] = -100
    log_probs, keep = logits.log_softmax(-1), labels != -100
    nll = -log_probs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)[keep].mean()
    smooth = -log_probs.mean(-1)[keep].mean()
    assert torch.allclose(translation_loss(logits, labels, 0.1), 0.9 * nll + 0.1 * smooth)
    assert torch.allclose(translation_loss(logits, labels), nll)


def test_trainer_routes_label_smoothing_to_family_models_only(tmp_path, toy_tokenizer):
    from transformers import MarianConfig, MarianMTModel, Seq2SeqTrainingArguments

    from xlpe import XLPEMarianConfig, XLPEMarianMTModel

    size = dict(
        vocab_size=len(toy_tokenizer),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        pad_token_id=toy_tokenizer.pad_token_id,
        eos_token_id=toy_tokenizer.eos_token_id,
        decoder_start_token_id=toy_tokenizer.pad_token_id,
    )
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), label_smoothing_factor=0.2, report_to="none")
    family = ExtraInputsSeq2SeqTrainer(model=XLPEMarianMTModel(XLPEMarianConfig(**size)), args=args)
    assert family.label_smoother is None and family.model.config.label_smoothing == 0.2
    stock = ExtraInputsSeq2SeqTrainer(model=MarianMTModel(MarianConfig(**size)), args=args)
    assert stock.label_smoother is not None  # no auxiliary loss to lose: transformers' smoother
    with pytest.raises(ValueError, match="label_smoothing"):
        XLPEMarianConfig(**size, label_smoothing=1.0)


# ---------------------------------------------------------------------------------------------------------
# Predictions in input order
# ---------------------------------------------------------------------------------------------------------


def shuffled_eval_sampler(self, eval_dataset):
    return RandomSampler(eval_dataset, generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("sampler", ["shuffled", "group_by_length"])
def test_predictions_file_is_in_input_order_whatever_the_sampler(sampler, tmp_path, monkeypatch):
    options = ["--train_sampling_strategy", "group_by_length"] if sampler == "group_by_length" else []
    if sampler == "shuffled":
        monkeypatch.setattr(ExtraInputsSeq2SeqTrainer, "_get_eval_sampler", shuffled_eval_sampler)
    main(
        tiny(
            tmp_path,
            "--max_steps",
            "2",
            "--do_train",
            "--do_predict",
            "--max_predict_samples",
            "12",
            "--per_device_eval_batch_size",
            "4",
            "--save_strategy",
            "no",
            *options,
        )
    )
    run = tmp_path / "run"
    lines = (run / "generated_predictions.txt").read_text().splitlines()
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(run).eval(), AutoTokenizer.from_pretrained(run)
    _, data_args, _ = parse_arguments(tiny(tmp_path, "--max_steps", "2"))
    test = _builtin_splits(data_args)["test"]
    fresh = []
    for source in test.sources[:12]:  # one at a time: no padding, no sampler
        batch = tokenizer(source, return_tensors="pt")
        with torch.no_grad():
            ids = model.generate(**batch, num_beams=2, max_length=10)
        fresh.append(tokenizer.decode(ids[0], skip_special_tokens=True).strip())
    assert len(set(fresh)) >= 3, fresh  # the check below means something only if the outputs differ
    assert lines == fresh


# ---------------------------------------------------------------------------------------------------------
# BLEU tokenizer per target language
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def mecab_missing(monkeypatch):
    """sacrebleu as on a machine without mecab-python3: its ja-mecab tokenizer fails to import."""
    original = sacrebleu_bleu._get_tokenizer

    def get_tokenizer(name):
        if name == "ja-mecab":
            raise ModuleNotFoundError("No module named 'MeCab'")
        return original(name)

    monkeypatch.setattr(sacrebleu_bleu, "_get_tokenizer", get_tokenizer)
    check_bleu_tokenizer.cache_clear()
    yield
    check_bleu_tokenizer.cache_clear()


def test_target_language_picks_the_bleu_tokenizer_and_the_flag_overrides_it(tmp_path):
    _, data_args, _ = parse_arguments(tiny(tmp_path, "--target_lang", "ja", "--source_lang", "en"))
    assert data_args.bleu_tokenize == "ja-mecab"  # mecab is installed by the test extra
    _, data_args, _ = parse_arguments(tiny(tmp_path, "--target_lang", "zh", "--source_lang", "en"))
    assert data_args.bleu_tokenize == "zh"
    _, data_args, _ = parse_arguments(tiny(tmp_path, "--bleu_tokenize", "char"))
    assert data_args.bleu_tokenize == "char"


def test_unusable_bleu_tokenizer_is_one_line_before_any_work(tmp_path, monkeypatch, capsys, mecab_missing):
    out = tmp_path / "run"
    monkeypatch.setattr("sys.argv", ["xlpe-train", *tiny(tmp_path, "--target_lang", "ja", "--source_lang", "en")])
    assert train.cli() == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("xlpe-train: error: BLEU tokenizer 'ja-mecab'")
    assert 'pip install "xlpe[ja]"' in err and "--bleu_tokenize" in err
    assert not out.exists()  # nothing trained, prepared or written
    # an explicit tokenizer that runs here goes ahead: the check is about the tokenizer, not the language
    _, data_args, _ = parse_arguments(tiny(tmp_path, "--target_lang", "ja", "--bleu_tokenize", "char"))
    assert data_args.bleu_tokenize == "char"


def test_evaluate_cli_bleu_tokenizer(tmp_path, capsys, mecab_missing):
    hyp, ref = tmp_path / "hyp.ja", tmp_path / "ref.ja"
    hyp.write_text("今日は良い天気です\n", encoding="utf-8")
    ref.write_text("今日は良い天気だ\n", encoding="utf-8")
    code = evaluate_cli.main(["bleu", "--hyp", str(hyp), "--ref", str(ref), "--lang", "ja"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "ja-mecab" in err and "xlpe[ja]" in err
    assert (
        evaluate_cli.main(["bleu", "--hyp", str(hyp), "--ref", str(ref), "--lang", "ja", "--bleu_tokenize", "char"])
        == 0
    )
    assert "tok:char" in json.loads(capsys.readouterr().out)["bleu"]["signature"]


def test_japanese_bleu_uses_mecab_when_installed(tmp_path, capsys):
    hyp, ref = tmp_path / "hyp.ja", tmp_path / "ref.ja"
    hyp.write_text("今日は良い天気です\n", encoding="utf-8")
    ref.write_text("今日は良い天気だ\n", encoding="utf-8")
    assert evaluate_cli.main(["bleu", "--hyp", str(hyp), "--ref", str(ref), "--lang", "ja"]) == 0
    assert "tok:ja-mecab" in json.loads(capsys.readouterr().out)["bleu"]["signature"]


# ---------------------------------------------------------------------------------------------------------
# Oracle and predicted positions in one run; text kept where scoring needs it
# ---------------------------------------------------------------------------------------------------------


def test_xlpe_test_split_is_scored_with_predicted_and_oracle_positions(tmp_path, monkeypatch):
    seen = []
    original = ExtraInputsSeq2SeqTrainer.prediction_step

    def prediction_step(self, *args, **kwargs):
        seen.append(self.eval_with_oracle_positions)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ExtraInputsSeq2SeqTrainer, "prediction_step", prediction_step)
    metrics = main(
        tiny(
            tmp_path,
            "--max_steps",
            "2",
            "--do_train",
            "--do_predict",
            "--bleu_tokenize",
            "char",
            "--save_strategy",
            "no",
        )
    )
    run = tmp_path / "run"
    assert {"predict_bleu", "predict_chrf", "predict_oracle_bleu", "predict_oracle_chrf"} <= set(metrics)
    assert seen == [False, True]  # one batch (6 sentences) each way
    assert len((run / "generated_predictions_oracle.txt").read_text().splitlines()) == 6
    scores = json.loads((run / "test_scores.json").read_text())
    assert "tok:char" in scores["bleu"]["signature"] and "tok:char" in scores["oracle_positions"]["bleu"]["signature"]


def test_prepared_test_split_keeps_its_text_and_the_training_split_does_not(toy_tokenizer):
    from xlpe.features.prepare import ParallelSplit, prepare_splits

    pairs = (["the cat sleeps", "a dog runs"], ["die katze schläft", "ein hund läuft"])
    links = [[0, 0, 1, 1, 2, 2]] * 2
    splits = {name: ParallelSplit(*pairs, name, name, links, "given") for name in ("train", "test")}
    prepared, _ = prepare_splits(splits, toy_tokenizer, features=["reorder_positions"])
    assert "target_text" not in prepared["train"].column_names
    assert prepared["test"]["target_text"] == pairs[1] and prepared["test"]["source_text"] == pairs[0]


def test_text_is_kept_for_evaluation_splits_by_default():
    options = PrepareOptions()
    assert not options.keeps_text("train") and options.keeps_text("test") and options.keeps_text("validation")
    assert PrepareOptions(keep_text=True).keeps_text("train") and not PrepareOptions(keep_text="none").keeps_text(
        "test"
    )
    assert PrepareOptions(keep_text=["train"]).keeps_text("train") and not PrepareOptions(
        keep_text=["train"]
    ).keeps_text("test")
    with pytest.raises(ValueError, match="keep_text"):
        PrepareOptions(keep_text="some")


# ---------------------------------------------------------------------------------------------------------
# Length-grouped batches in random order
# ---------------------------------------------------------------------------------------------------------


@settings(deadline=None, max_examples=80)
@given(st.lists(st.integers(1, 60), min_size=1, max_size=300), st.integers(1, 16), st.integers(1, 4), st.integers(0, 5))
def test_length_grouped_sampler_is_a_permutation_of_homogeneous_batches(lengths, batch_size, mult, epoch):
    sampler = ShuffledLengthGroupedSampler(lengths, batch_size, seed=7, mega_batch_mult=mult)
    sampler.set_epoch(epoch)
    order = list(sampler)
    assert sorted(order) == list(range(len(lengths)))  # every example once per epoch
    batches = [order[k : k + batch_size] for k in range(0, len(order), batch_size)]
    assert [list(b) for b in sampler.batches()] == batches  # the dataloader's chunks are the sampler's batches
    assert all(len(batch) == batch_size for batch in batches[:-1])  # only the last batch may be short
    assert list(sampler) == order  # reproducible for (seed, epoch)


def test_length_grouped_batches_are_served_in_random_order_not_sorted_sweeps():
    lengths = np.arange(6400) % 64 + 1
    sampler = ShuffledLengthGroupedSampler(lengths, 32, seed=0)
    firsts = [int(lengths[b].max()) for b in sampler.batches()]
    spread = [int(lengths[b].max() - lengths[b].min()) for b in sampler.batches()]
    assert max(spread) <= 2  # length-homogeneous (64 distinct lengths, 3200-example windows)
    decreasing = sum(a >= b for a, b in zip(firsts, firsts[1:])) / (len(firsts) - 1)
    assert decreasing < 0.7  # transformers' sampler: ~98% of consecutive batches go from long to short
    sampler.set_epoch(1)
    assert [int(lengths[b].max()) for b in sampler.batches()] != firsts  # a new order every epoch


def test_group_by_length_uses_the_shuffled_sampler_with_both_sides(tmp_path, toy_tokenizer):
    import datasets
    from family_tester import tiny_kwargs
    from transformers import Seq2SeqTrainingArguments

    from xlpe import XLPEMarianConfig, XLPEMarianMTModel

    data = datasets.Dataset.from_dict({"input_ids": [[5] * 3, [5] * 9, [5] * 4], "labels": [[6] * 7, [6] * 2, [6] * 4]})
    assert example_lengths(data).tolist() == [7, 9, 4] and example_lengths(data.select([2, 0])).tolist() == [4, 7]
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        train_sampling_strategy="group_by_length",
        report_to="none",
        per_device_train_batch_size=2,
        gradient_accumulation_steps=3,
        use_cpu=True,
    )
    trainer = ExtraInputsSeq2SeqTrainer(
        model=XLPEMarianMTModel(XLPEMarianConfig(**tiny_kwargs(toy_tokenizer))), args=args, train_dataset=data
    )
    sampler = trainer._get_train_sampler()
    assert isinstance(sampler, ShuffledLengthGroupedSampler) and sampler.batch_size == 6
    assert sampler.lengths.tolist() == [7, 9, 4]


# ---------------------------------------------------------------------------------------------------------
# Gradient accumulation: one token mean per optimizer step (num_items_in_batch)
# ---------------------------------------------------------------------------------------------------------


def test_families_take_num_items_in_batch_and_stock_models_do_not(tmp_path, toy_tokenizer):
    from family_tester import tiny_kwargs
    from transformers import MarianConfig, MarianMTModel, Seq2SeqTrainingArguments

    from xlpe import XLPEMarianConfig, XLPEMarianMTModel

    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    family = ExtraInputsSeq2SeqTrainer(
        model=XLPEMarianMTModel(XLPEMarianConfig(**tiny_kwargs(toy_tokenizer))), args=args
    )
    stock = ExtraInputsSeq2SeqTrainer(model=MarianMTModel(MarianConfig(**tiny_kwargs(toy_tokenizer))), args=args)
    assert family.model_accepts_loss_kwargs  # weighted by the step's supervised tokens (seq2seq_scaffold)
    # stock Marian returns a plain batch mean: the stock guess (True: forward takes **kwargs) would skip the
    # division by the accumulation steps
    assert not stock.model_accepts_loss_kwargs


def test_gradient_accumulation_trains_like_one_big_batch(tmp_path):
    """2 steps of 3 micro-batches of 2 pairs give the same weights as 2 steps of 6 pairs (same pairs: the seeded
    random sampler; dropout off; reorder loss off so that every term is a token mean of the whole step)."""
    from safetensors.torch import load_file

    common = [
        "--model_type",
        "xlpe",
        "--max_steps",
        "2",
        "--do_train",
        "--do_eval",
        "False",
        "--do_predict",
        "False",
        "--save_strategy",
        "no",
        "--dropout",
        "0",
        "--train_sampling_strategy",
        "random",
        "--config_overrides",
        "reorder_loss_weight=0",
        "--optim",
        "sgd",
        "--learning_rate",
        "0.5",
    ]
    main(tiny(tmp_path, *common, "--per_device_train_batch_size", "6", name="big"))
    main(
        tiny(tmp_path, *common, "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "3", name="acc")
    )
    big, accumulated = (load_file(tmp_path / name / "model.safetensors") for name in ("big", "acc"))
    assert big.keys() == accumulated.keys()
    gap = max((big[k].double() - accumulated[k].double()).abs().max().item() for k in big)
    assert gap < 1e-6, gap
    logged = [[e["loss"] for e in log_history(tmp_path / name) if "loss" in e] for name in ("big", "acc")]
    assert logged[0] == pytest.approx(logged[1], rel=1e-5)


# ---------------------------------------------------------------------------------------------------------
# Evaluation in the training dtype
# ---------------------------------------------------------------------------------------------------------


class RecordEncoderDtype(TrainerCallback):
    """Records, for every encoder call inside the evaluation's `generate()`, whether CPU autocast is on and its
    dtype (hooks set when the trainer is built)."""

    def __init__(self):
        self.in_generate, self.calls = False, []

    def on_init_end(self, args, state, control, model=None, **kwargs):
        def record(module, inputs):
            if self.in_generate:
                self.calls.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))

        model.get_encoder().register_forward_pre_hook(record)
        generate = model.generate

        def generate_recorded(*args, **kwargs):
            self.in_generate = True
            try:
                return generate(*args, **kwargs)
            finally:
                self.in_generate = False

        model.generate = generate_recorded


@pytest.mark.parametrize("bf16", [True, False])
def test_evaluation_generates_in_the_training_dtype_encoder_included(bf16, tmp_path):
    """`--bf16`: every encoder call of the dev-set `generate()` runs under bf16 autocast (accelerate's wrapper of
    `forward` covers only the decoder steps); without it, fp32."""
    recorder = RecordEncoderDtype()
    main(
        tiny(
            tmp_path,
            "--max_steps",
            "1",
            "--do_train",
            "--do_eval",
            "--do_predict",
            "False",
            "--save_strategy",
            "no",
            "--bf16",
            str(bf16),
            "--use_cpu",
            "--max_eval_samples",
            "4",
        ),
        callbacks=[recorder],
    )
    assert recorder.calls, "generate() was not called by the evaluation"
    assert (
        all(call == (True, torch.bfloat16) for call in recorder.calls)
        if bf16
        else not any(on for on, _ in recorder.calls)
    )
