"""The model card of an `xlpe-train` run is written when the final evaluation starts and updated after each stage:
a run interrupted during its final evaluation still has a card stating its data, arguments, sizes and time, with
the scores pending; the usage example is a sentence in the source language from the run's data; `xlpe-push`
renders the same facts (from the card record, or gathered from the folder when there is none); an attached
reorderer's held-out Kendall tau stands beside the source order's; a failed learning check marks the card."""

from __future__ import annotations

import json

import pytest
from conftest import TINY_MODEL_ARGS
from transformers import TrainerCallback

from xlpe.cli import push
from xlpe.training.card_facts import reorderer_held_out_quality
from xlpe.training.run import main
from xlpe.training.run_card import CARD_INPUTS

GERMAN = ["die katze sieht den hund", "ein hund jagt die kleine katze", "der mann liest ein buch im garten"]
ENGLISH = ["the cat sees the dog", "a dog chases the small cat", "the man reads a book in the garden"]


class InterruptFinalEvaluation(TrainerCallback):
    def on_evaluate(self, args, state, control, **kwargs):
        raise KeyboardInterrupt("stopped during the final evaluation")


def write_files(folder):
    for split, repeat in (("train", 12), ("dev", 1), ("test", 1)):
        (folder / f"{split}.de").write_text("\n".join(GERMAN * repeat) + "\n", encoding="utf-8")
        (folder / f"{split}.en").write_text("\n".join(ENGLISH * repeat) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A de -> en run on text files, interrupted (KeyboardInterrupt) in its final validation."""
    work = tmp_path_factory.mktemp("early")
    data = work / "news"
    data.mkdir()
    write_files(data)
    args = [
        "--model_type",
        "xlpe",
        *TINY_MODEL_ARGS,
        "--train_source_file",
        str(data / "train.de"),
        "--train_target_file",
        str(data / "train.en"),
        "--validation_source_file",
        str(data / "dev.de"),
        "--validation_target_file",
        str(data / "dev.en"),
        "--test_source_file",
        str(data / "test.de"),
        "--test_target_file",
        str(data / "test.en"),
        "--source_lang",
        "de",
        "--target_lang",
        "en",
        "--recipe",
        "none",
        "--output_dir",
        str(work / "run"),
        "--cache_dir",
        str(work / "cache"),
        "--do_train",
        "--do_eval",
        "--do_predict",
        "--predict_with_generate",
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        "8",
        "--tokenizer_vocab_size",
        "120",
        "--num_beams",
        "1",
        "--val_max_target_length",
        "6",
        "--report_to",
        "none",
        "--num_translation_examples",
        "0",
    ]
    with pytest.raises(KeyboardInterrupt):
        main(args, callbacks=[InterruptFinalEvaluation()])
    return work / "run"


def test_an_interrupted_final_evaluation_leaves_a_card_with_data_arguments_sizes_time_and_pending(interrupted):
    card = (interrupted / "README.md").read_text(encoding="utf-8")
    assert "| Training data | news/train.de + news/train.en |" in card and "unstated" not in card
    assert "| train | 36 | 36 | 0 |" in card  # pairs per split from the preparation report
    assert "| Scores | pending: validation, test (see Evaluation) |" in card
    assert "**Scores pending (validation, test)**" in card and "interrupted before them" in card
    assert "No evaluation results were recorded" not in card and "| BLEU |" not in card
    assert "| Parameters |" in card and "| d_model | 16 |" in card and "| vocab_size |" in card  # sizes
    assert "| steps run | `2` |" in card and "| training time | `" in card and "| device | `cpu" in card  # time
    assert "| `--max_steps` | `2` |" in card and '| `--source_lang` | `"de"` |' in card  # the recorded options
    assert "`--train_source_file` | `sha256:" in card


def test_the_usage_example_is_a_source_sentence_of_the_run(interrupted):
    card = (interrupted / "README.md").read_text(encoding="utf-8")
    assert f'print(translator("{GERMAN[0]}"))' in card and "placeholder" not in card
    assert "Hello world" not in card


def test_push_renders_the_same_facts_from_the_record_and_from_the_folder(interrupted, tmp_path, capsys):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(interrupted, folder)
    trained = (folder / "README.md").read_text(encoding="utf-8")
    assert push.main([str(folder), "me/xlpe-de-en", "--dry_run"]) == 0
    pushed = (folder / "README.md").read_text(encoding="utf-8")
    assert pushed.replace("me/xlpe-de-en", "run") == trained  # the training card, with the Hub id
    # a folder whose card was never written: the same facts gathered from the folder
    (folder / "README.md").unlink()
    (folder / CARD_INPUTS).unlink()
    assert push.main([str(folder), "me/xlpe-de-en", "--dry_run"]) == 0
    gathered = (folder / "README.md").read_text(encoding="utf-8")
    for fact in (
        "| Training data | news/train.de + news/train.en |",
        "| Languages | de → en |",
        "| train | 36 | 36 | 0 |",
        "| steps run | `2` |",
        "| `--max_steps` | `2` |",
        f'print(translator("{GERMAN[0]}"))',
        'model="me/xlpe-de-en"',
    ):
        assert fact in gathered, fact
    capsys.readouterr()


def test_a_failed_learning_check_marks_the_card(interrupted, tmp_path):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(interrupted, folder)
    check = {"ok": False, "message": "validation BLEU 0.04 after 2 evaluations", "checks": {}, "step": 2}
    (folder / "learning_check.json").write_text(json.dumps(check))
    assert push.main([str(folder), "me/m", "--dry_run"]) == 0
    card = (folder / "README.md").read_text(encoding="utf-8")
    title = card.index("# me/m")
    warning = card.index("**Warning: this model did not learn:** validation BLEU 0.04 after 2 evaluations")
    assert title < warning < card.index("| Model family |")
    (folder / "learning_check.json").write_text(json.dumps({**check, "ok": True}))
    assert push.main([str(folder), "me/m", "--dry_run"]) == 0
    assert "did not learn" not in (folder / "README.md").read_text(encoding="utf-8")
    not_run = {"ok": None, "ran": False, "message": "the learning check did not run: the warm-up ...", "step": 2}
    (folder / "learning_check.json").write_text(json.dumps(not_run))  # a check that could not run: no warning
    assert push.main([str(folder), "me/m", "--dry_run"]) == 0
    assert "did not learn" not in (folder / "README.md").read_text(encoding="utf-8")
    (folder / "learning_check.json").write_text("{not json")
    assert push.main([str(folder), "me/m", "--dry_run"]) == 2  # damaged: one line, not a card without it


def tiny_xlpe_model(tokenizer):
    from xlpe import XLPEMarianConfig, XLPEMarianMTModel

    dims = dict(d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2)
    return XLPEMarianMTModel(
        XLPEMarianConfig(
            **dims,
            encoder_ffn_dim=32,
            decoder_ffn_dim=32,
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.pad_token_id,
        )
    )


def _reorderer_report(folder, tau, monotone):
    folder.mkdir()
    calibration = {
        "chosen": 1.0,
        "best": 0.5,
        "held_out_pairs": 200,
        "by_prior": {"0.5": {"kendall_tau": tau + 0.001}, "1.0": {"kendall_tau": tau}},
        "monotone_kendall_tau": monotone,
    }
    (folder / "reorderer_training.json").write_text(json.dumps({"order_prior_calibration": calibration}))
    return folder


@pytest.mark.parametrize("tau, beats", [(0.896, False), (0.95, True)])
def test_the_card_puts_the_reorderers_held_out_tau_beside_the_source_orders(toy_tokenizer, tmp_path, tau, beats):
    from xlpe.training.model_card import build_model_card

    quality = reorderer_held_out_quality(_reorderer_report(tmp_path / "reorderer", tau, 0.898))
    assert quality == {
        "kendall_tau": tau,
        "monotone_kendall_tau": 0.898,
        "pairs": 200,
        "order_prior": 1.0,
        "measured_on": "held-out pairs",
    }
    model = tiny_xlpe_model(toy_tokenizer)
    model.config.reorderer_config = {"decoder": "btg", "d_model": 16, "held_out_quality": quality}
    text = build_model_card(model, languages=["de", "en"], example_source=GERMAN[0]).text
    assert f"on 200 held-out pairs (never trained on): **{tau:.3f}** for the reorderer's order, **0.898** for " in text
    sentence = "The reorderer does not beat keeping the source order on held-out pairs"
    assert (sentence in text) is not beats and ("XL PE's predicted positions add little here" in text) is not beats
    assert "No Kendall tau is recorded" not in text and "held_out_quality" not in text
    # the training report that xlpe-reorder attach copies beside the model is read when the folder has one
    model.save_pretrained(tmp_path / "model")
    attached = _reorderer_report(tmp_path / "model" / "reorderer", 0.5, 0.7)
    assert attached.name == "reorderer"
    text = build_model_card(tmp_path / "model", languages=["de", "en"], example_source=GERMAN[0]).text
    assert "**0.500** for the reorderer's order, **0.700** for keeping the source order" in text
    assert "The reorderer does not beat keeping the source order on held-out pairs" in text


def test_without_calibration_pairs_only_the_source_orders_tau_is_stated(tmp_path):
    folder = tmp_path / "reorderer"
    folder.mkdir()
    (folder / "reorderer_training.json").write_text(json.dumps({"oracle_mean_kendall_tau_vs_monotone": 0.9}))
    assert reorderer_held_out_quality(folder) == {"monotone_kendall_tau": 0.9, "measured_on": "training pairs"}
    (folder / "reorderer_training.json").write_text("{")
    with pytest.raises(ValueError, match="reorderer_training.json:1"):
        reorderer_held_out_quality(folder)


def test_a_card_without_a_source_sentence_says_its_example_is_a_placeholder(toy_tokenizer):
    from xlpe.training.model_card import build_model_card

    model = tiny_xlpe_model(toy_tokenizer)
    text = build_model_card(model, languages=["de", "en"]).text
    assert 'translator("A sentence in de.")' in text and "is a placeholder" in text and "Put a sentence in\nde" in text
