"""The end of an `xlpe-train` run: which validation sentences the periodic evaluations score, the test split
translated and scored (predicted positions, then the oracle ones for an XL PE model), and the model card written
from the run (`model_card.write_training_card`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from transformers import AutoConfig

from ..features.text_files import write_text_atomic
from ..models import register_with_transformers
from .run_card import write_test_translations
from .trainer import decode_ids

register_with_transformers()  # the xlpe families with the Auto classes (AutoConfig/AutoModel* below read them)

logger = logging.getLogger("xlpe.train")


def periodic_eval_dataset(prepared: dict, training_args):
    """The validation sentences the periodic evaluations score: the first `--eval_subset` of the split (all
    without it); the final evaluation scores the whole split."""
    validation, subset = prepared.get("validation"), getattr(training_args, "eval_subset", None)
    if validation is None or not subset or subset >= len(validation):
        return validation
    return validation.select(range(subset))


def describe_device_for_card(training_args) -> str:
    """`cpu (2 threads)` or the GPU's name, times the processes."""
    import torch

    device = training_args.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    return name + (f" x {training_args.world_size} processes" if training_args.world_size > 1 else "")


def predict_and_report(trainer, test_dataset, tokenizer, data_args, generation) -> dict:
    """Translate the test split with beam search and score it: with predicted reorderings (what raw text gets)
    into generated_predictions.txt, and, for a model that takes XL positions when the split has the oracle
    ones, once more with the oracle positions (generated_predictions_oracle.txt, `predict_oracle_*` metrics:
    the upper bound a better reorderer could reach). Scores use the raw reference text when the split kept it."""
    if data_args.max_predict_samples is not None:
        test_dataset = test_dataset.select(range(min(len(test_dataset), data_args.max_predict_samples)))
    passes = [("predict", False)]
    if "reorder_positions" in test_dataset.column_names and getattr(trainer.model.config, "uses_xl", False):
        passes.append(("predict_oracle", True))
    metrics, all_scores, output_dir = {"predict_samples": len(test_dataset)}, {}, Path(trainer.args.output_dir)
    has_text = "target_text" in test_dataset.column_names  # score against the text, not the decoded label ids
    sources, references = (test_dataset["source_text"], test_dataset["target_text"]) if has_text else (None, None)
    for prefix, oracle in passes:
        trainer.eval_with_oracle_positions, saved = oracle, trainer.eval_with_oracle_positions
        try:
            results = trainer.predict(test_dataset, metric_key_prefix=prefix, **generation)
        finally:
            trainer.eval_with_oracle_positions = saved
        metrics.update(results.metrics)
        if not trainer.is_world_process_zero():
            continue
        hypotheses = decode_ids(tokenizer, results.predictions)
        name = "generated_predictions" + ("_oracle" if oracle else "")
        write_text_atomic(output_dir / f"{name}.txt", "\n".join(hypotheses) + "\n")
        if has_text:
            from ..evaluation.metrics import corpus_bleu_chrf

            scores = corpus_bleu_chrf(
                hypotheses, references, target_language=data_args.target_lang, tokenize=data_args.bleu_tokenize
            )
            metrics.update(
                {
                    f"{prefix}_bleu": round(scores["bleu"]["score"], 2),
                    f"{prefix}_chrf": round(scores["chrf"]["score"], 2),
                }
            )
            all_scores[prefix] = scores
            if not oracle:
                write_test_translations(output_dir, sources, references, hypotheses)  # beside the card
                for k in range(min(data_args.num_translation_examples, len(hypotheses))):
                    print(f"\nsource:     {sources[k]}\nreference:  {references[k]}\ntranslation: {hypotheses[k]}")
            label = "test" + (" (oracle positions)" if oracle else "")
            print(f"\n{label} BLEU {scores['bleu']['score']:.2f}  ({scores['bleu']['signature']})")
            print(f"{label} chrF {scores['chrf']['score']:.2f}  ({scores['chrf']['signature']})\n")
    if "predict" in all_scores:  # test_scores.json: the predicted-position scores, the oracle's beside them
        scores = dict(all_scores["predict"])
        if "predict_oracle" in all_scores:
            scores["oracle_positions"] = all_scores["predict_oracle"]
        write_text_atomic(output_dir / "test_scores.json", json.dumps(scores, indent=2))
    trainer.log_metrics("predict", metrics), trainer.save_metrics("predict", metrics)
    return metrics


def write_card(run, metrics: dict, facts: dict | None = None, pending=()) -> None:
    """The README.md model card of the run `run` (a `RunConfig`; `model_card.write_training_card`: data, arguments,
    sizes, time, reorderer, and the validation and test scores with signatures, or `pending`: the stages whose scores
    are not in yet), for every model, stock architectures too; skipped when the output directory holds no model (an
    evaluation-only run of a model elsewhere)."""
    from .model_card import write_training_card

    output_dir = run.training.output_dir
    try:
        AutoConfig.from_pretrained(output_dir)
    except (ValueError, OSError) as error:
        logger.info("no model card written: %s holds no model config (%s)", output_dir, error)
        return
    write_training_card(output_dir, run, metrics, facts, pending=pending)
