"""`xlpe-train`: train or fine-tune a translation model of any xlpe family, the way transformers'
`examples/pytorch/translation/run_translation.py` does (same argument names), plus:

* `--model_type vanilla|xlpe|dpe|mvpe_pos|...` (any registered family) and the family's fields;
* data from a Hub dataset, a local `datasets` directory, jsonlines `{"translation": {...}}` files, plain
  parallel text files (`--train_source_file/--train_target_file`), an `xlpe-prepare` output directory, or the
  built-in synthetic SVO -> SOV corpus (no data arguments at all); features come from `xlpe.prepare`
  (alignments with eflomal unless Pharaoh files / gold alignments are given);
* a joint sub-word tokenizer trained on the training text when none is given;
* separate logging of the auxiliary losses, BLEU/chrF (sacrebleu) with predicted (not oracle) reorderings,
  checkpoint averaging, and a model card.

    xlpe-train --output_dir runs/demo                   # built-in corpus, small XL PE model, a few CPU minutes
    accelerate launch scripts/train.py --model_type dpe --dataset_name wmt16 --dataset_config_name de-en \\
        --source_lang en --target_lang de --output_dir runs/dpe --do_train --do_eval --do_predict
    xlpe-train args.json                                # every argument in one JSON file

Without any `--do_train/--do_eval/--do_predict`, all three run. See docs/training.md.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

import datasets
import torch
import transformers
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, HfArgumentParser, set_seed

from . import MODEL_FAMILIES, XLPEDataCollator, get_family
from .checkpoint_averaging import last_checkpoints, list_checkpoints, save_averaged_model
from .evaluation import check_bleu_tokenizer
from .train_args import BUILTIN_DATASET, DataTrainingArguments, ModelArguments, UsageError, XLPETrainingArguments, builtin_recipe
from .train_data import check_splits, load_raw_splits, prepare_features, resolve_taggers
from .trainer import XLPESeq2SeqTrainer, decode_ids, make_compute_metrics

logger = logging.getLogger("xlpe.train")
FAMILY_FIELDS = ("xl_strategy", "xl_heads", "reorder_loss_weight", "order_loss_weight", "pe_step")
SIZE_FIELDS = {"d_model": ("d_model",), "encoder_layers": ("encoder_layers",), "decoder_layers": ("decoder_layers",),
               "attention_heads": ("encoder_attention_heads", "decoder_attention_heads"),
               "ffn_dim": ("encoder_ffn_dim", "decoder_ffn_dim"), "dropout": ("dropout",)}  # fmt: skip
TRANSFORMER_BASE = dict(d_model=512, encoder_layers=6, decoder_layers=6, attention_heads=8, ffn_dim=2048, dropout=0.1)


# ---------------------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------------------


def parse_arguments(argv: list[str] | None = None):
    """(model_args, data_args, training_args) from the command line or one JSON file, with the built-in
    corpus' recipe filling what was not given explicitly. Every inconsistency is a `UsageError`."""
    try:
        return _parse_arguments(argv)
    except UsageError:
        raise
    except ValueError as error:
        raise UsageError(str(error)) from error


def _parse_arguments(argv: list[str] | None = None):
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, XLPETrainingArguments))
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 1 and argv[0].endswith(".json"):
        given = json.loads(Path(argv[0]).read_text())
    else:
        given = None
    explicit = set(given) if given is not None else {
        a[2:].split("=")[0].replace("-", "_").removeprefix("no_") for a in argv if a.startswith("--")
    }

    def parse(extra: dict):
        if given is not None:
            return parser.parse_dict({**extra, **given})
        flags = [item for key, value in extra.items() for item in (f"--{key}", str(value))]
        return parser.parse_args_into_dataclasses(args=flags + argv)

    model_args, data_args, training_args = parse({})
    if data_args.uses_builtin_corpus():
        recipe = {key: value for key, value in builtin_recipe(model_args).items() if key not in explicit}
        model_args, data_args, training_args = parse({"dataset_name": BUILTIN_DATASET, **recipe})
    training_args.explicit_do = {k for k in ("do_train", "do_eval", "do_predict") if k in explicit}
    if not training_args.explicit_do:  # (an eval_strategy alone turns do_eval on: not a choice of stages)
        training_args.do_train = training_args.do_eval = training_args.do_predict = True
    # generation settings of evaluations run *during* training (eval_strategy steps/epoch)
    if training_args.generation_max_length is None:
        training_args.generation_max_length = data_args.val_max_target_length or data_args.max_target_length
    if training_args.generation_num_beams is None:
        training_args.generation_num_beams = data_args.num_beams
    if training_args.average_last_checkpoints and training_args.do_train:
        keep, count, steps = training_args.save_total_limit, training_args.average_last_checkpoints, training_args.max_steps
        saved = steps // training_args.save_steps if steps > 0 and training_args.save_strategy == "steps" else None
        if training_args.save_strategy == "no" or (keep is not None and keep < count) or (saved is not None and saved < count):
            raise ValueError(f"--average_last_checkpoints {count} needs at least {count} saved checkpoints: "
                             f"--save_strategy is {getattr(training_args.save_strategy, 'value', training_args.save_strategy)}, --save_total_limit is {keep}, "
                             f"--max_steps {steps} / --save_steps {training_args.save_steps} saves {saved}")  # fmt: skip
    if training_args.predict_with_generate and (training_args.do_eval or training_args.do_predict):
        # the tokenizer BLEU will need, resolved and tried now, not after hours of training (ja-mecab needs mecab)
        data_args.bleu_tokenize = check_bleu_tokenizer(data_args.target_lang, data_args.bleu_tokenize)
    if "tensorboard" in (training_args.report_to or []) and importlib.util.find_spec("tensorboard") is None:
        raise ValueError("--report_to tensorboard needs the tensorboard package: pip install tensorboard (or xlpe[eval])")
    if "dataloader_pin_memory" not in explicit and not torch.cuda.is_available():
        training_args.dataloader_pin_memory = False  # pinning is meaningless on CPU (and warns every epoch)
    if os.environ.get("ACCELERATE_USE_CPU") == "True" and training_args.world_size == 1:
        logger.warning("`accelerate launch --cpu` starts ONE process (unless an MPI hostfile is given); for N CPU "
                       "processes use `accelerate launch --multi_gpu --num_processes N ... --use_cpu` or torchrun")  # fmt: skip
    return model_args, data_args, training_args


def resolve_checkpoint(training_args) -> str | None:
    """The checkpoint to resume from (`--resume_from_checkpoint DIR|last`), or None; refuses to mix a new run
    into an output_dir that holds another run's checkpoints."""
    output_dir = Path(training_args.output_dir)
    existing = list_checkpoints(output_dir) if output_dir.is_dir() else []
    resume = training_args.resume_from_checkpoint
    if resume in ("last", "latest", "true", "True"):
        complete = [p for p in existing if (p / "trainer_state.json").is_file()]  # written last: a kill mid-save
        if not complete:
            raise ValueError(f"--resume_from_checkpoint {resume}: {output_dir} has no complete checkpoint-* directory")
        return str(complete[-1])
    if resume:
        if not (Path(resume) / "trainer_state.json").is_file():
            raise ValueError(f"--resume_from_checkpoint {resume} is not a checkpoint directory (no trainer_state.json)")
        return resume
    if existing and training_args.do_train:
        if not training_args.overwrite_output_dir:
            raise ValueError(
                f"--output_dir {output_dir} already holds checkpoints {[p.name for p in existing]}: pass "
                "--resume_from_checkpoint last to continue that run, or --overwrite_output_dir to start over"
            )
        if training_args.process_index == 0:
            for path in existing:
                shutil.rmtree(path)
    return None


# ---------------------------------------------------------------------------------------------------------
# Tokenizer and model
# ---------------------------------------------------------------------------------------------------------


def family_classes(model_type: str) -> tuple[type, type]:
    """(config class, generation model class) of `model_type`; "vanilla" is stock MarianMT."""
    if model_type == "vanilla" and "vanilla" not in MODEL_FAMILIES:
        return transformers.MarianConfig, transformers.MarianMTModel
    try:
        family = get_family(model_type)
    except ValueError:
        raise ValueError(f"unknown --model_type {model_type!r}; known: {sorted({'vanilla', *MODEL_FAMILIES})}") from None
    return family.config_class, family.generation_model_class


def declares_field(config_class: type, name: str) -> bool:
    return any(name in getattr(klass, "__annotations__", {}) for klass in config_class.__mro__)


def family_overrides(model_args, config_class: type, model_type: str) -> dict:
    """Config fields given on the command line (family fields and --config_overrides), checked by name."""
    overrides = {name: getattr(model_args, name) for name in FAMILY_FIELDS if getattr(model_args, name) is not None}
    for item in filter(None, (model_args.config_overrides or "").split(",")):
        key, _, value = item.partition("=")
        try:
            overrides[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key.strip()] = value.strip()
    if "pe_step" in overrides and overrides["pe_step"] != "auto":
        overrides["pe_step"] = float(overrides["pe_step"])
    for name in overrides:
        if not (declares_field(config_class, name) or hasattr(config_class(), name)):
            raise ValueError(f"--{name} does not apply to --model_type {model_type} ({config_class.__name__} has no such field)")
    return overrides


def load_or_train_tokenizer(model_args, data_args, training_args, splits, checkpoint):
    source = checkpoint or model_args.tokenizer_name or model_args.model_name_or_path
    if source:
        return AutoTokenizer.from_pretrained(source, cache_dir=model_args.cache_dir, revision=model_args.model_revision,
                                             token=model_args.token, trust_remote_code=model_args.trust_remote_code)  # fmt: skip
    from .tokenization import train_joint_tokenizer

    with training_args.main_process_first(local=False, desc="training the joint tokenizer"):
        if training_args.process_index == 0:  # the others load what it saved
            train = splits["train"]
            logger.info("training a joint %s tokenizer (%d pieces) on %d sentence pairs", model_args.tokenizer_model,
                        model_args.tokenizer_vocab_size, len(train.sources))  # fmt: skip
            tokenizer = train_joint_tokenizer(train.sources + train.targets, vocab_size=model_args.tokenizer_vocab_size,
                                              model=model_args.tokenizer_model, model_max_length=data_args.max_source_length)  # fmt: skip
            tokenizer.save_pretrained(training_args.output_dir)
        else:
            tokenizer = AutoTokenizer.from_pretrained(training_args.output_dir)
    return tokenizer


def target_config(model_args, checkpoint):
    """The config (instance, when one exists already) or config class of the model to train."""
    if checkpoint or (model_args.model_name_or_path and not model_args.model_type):
        return AutoConfig.from_pretrained(checkpoint or model_args.model_name_or_path, cache_dir=model_args.cache_dir,
                                          revision=model_args.model_revision, token=model_args.token,
                                          trust_remote_code=model_args.trust_remote_code)  # fmt: skip
    return family_classes(model_args.model_type or "xlpe")[0]


def build_model(model_args, data_args, tokenizer, checkpoint, taggers):
    hub = dict(cache_dir=model_args.cache_dir, revision=model_args.model_revision, token=model_args.token,
               trust_remote_code=model_args.trust_remote_code)  # fmt: skip
    if checkpoint:  # weights come from the checkpoint (Trainer loads them); config and tokenizer too
        return AutoModelForSeq2SeqLM.from_config(AutoConfig.from_pretrained(checkpoint))
    model_type = model_args.model_type or ("xlpe" if not model_args.model_name_or_path else None)
    if model_type is None:  # a checkpoint as it is (its own family)
        config_class = type(AutoConfig.from_pretrained(model_args.model_name_or_path, **hub))
        overrides = family_overrides(model_args, config_class, config_class.model_type)
        return AutoModelForSeq2SeqLM.from_pretrained(model_args.model_name_or_path, **overrides, **hub)
    config_class, model_class = family_classes(model_type)
    overrides = family_overrides(model_args, config_class, model_type)
    overrides.update(tag_vocabulary_fields(config_class, taggers))
    if model_args.model_name_or_path:  # e.g. a stock MarianMT checkpoint upgraded to this family
        return model_class.from_pretrained(model_args.model_name_or_path, **overrides, **hub)
    if model_args.init_std is not None:
        overrides["init_std"] = model_args.init_std
    if model_args.config_name:
        model = model_class(config_class.from_pretrained(model_args.config_name, **overrides, **hub))
    else:
        size = {k: getattr(model_args, k) if getattr(model_args, k) is not None else v for k, v in TRANSFORMER_BASE.items()}
        lengths = [data_args.max_source_length, data_args.max_target_length, data_args.val_max_target_length or 0]
        config_kwargs = dict(
            vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.pad_token_id, forced_eos_token_id=tokenizer.eos_token_id,
            max_position_embeddings=2 * max(lengths) + 16,  # room for pipeline generation beyond max_target_length
            # Transformer-style embeddings (Vaswani et al.): N(0, d^-1/2) scaled by sqrt(d). With Marian's defaults
            # (no scaling, std 0.02) the sinusoids swamp the token embeddings and lexical learning crawls. HF's
            # init_std also sets every linear layer's std: see --embedding_init_std (docs/training.md).
            scale_embedding=True, init_std=size["d_model"] ** -0.5,
            **{field: size[arg] for arg, fields in SIZE_FIELDS.items() for field in fields},
        )  # fmt: skip
        config_kwargs.update(overrides)
        model = model_class(config_class(**config_kwargs))
    if model_args.embedding_init_std is not None:
        initialise_token_embeddings(model, model_args.embedding_init_std)
    return model


def check_init_options(model_args, checkpoint) -> None:
    """--init_std / --embedding_init_std initialise a model built here: positive, and not with trained weights."""
    for name in ("init_std", "embedding_init_std"):
        value = getattr(model_args, name)
        if value is None:
            continue
        if not value > 0:
            raise ValueError(f"--{name} must be a positive standard deviation, got {value}")
        source = checkpoint or model_args.model_name_or_path
        if source:
            raise ValueError(f"--{name} initialises a model built here; {source} brings trained weights "
                             "(drop --model_name_or_path, or use --config_name for its architecture)")  # fmt: skip


def initialise_token_embeddings(model, std: float) -> None:
    """Token embeddings ~ N(0, std), padding rows zero, leaving every other weight at HF's `init_std`. Tied
    embeddings (encoder, decoder, output projection) are one tensor and are drawn once."""
    tables = {}
    for module in (model.get_input_embeddings(), getattr(model.get_decoder(), "embed_tokens", None)):
        if isinstance(module, torch.nn.Embedding):
            tables[id(module.weight)] = module
    with torch.no_grad():
        for module in tables.values():
            module.weight.normal_(0.0, std)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()


def tag_vocabulary_fields(config_class, taggers) -> dict:
    """Families with POS tags store the taggers' vocabularies (and the source tagger's name) in their config."""
    fields = {}
    source, target = taggers.get("source"), taggers.get("target")
    if source is not None and declares_field(config_class, "pos_tags"):
        fields["pos_tags"] = source.vocabulary.to_list()
        if declares_field(config_class, "pos_tagger") and isinstance(taggers.get("source_spec"), str):
            fields["pos_tagger"] = taggers["source_spec"]
    if target is not None and declares_field(config_class, "decoder_pos_tags"):
        fields["decoder_pos_tags"] = target.vocabulary.to_list()
    if taggers.get("nltk_data") and declares_field(config_class, "nltk_data"):
        fields["nltk_data"] = taggers["nltk_data"]  # where the pipeline's tagger finds its model on this machine
    return fields


def check_vocabulary(tokenizer, model, tokenizer_source: str) -> None:
    """Token ids must index the model's embeddings; pad and EOS must agree (error before training)."""
    config = model.config
    if len(tokenizer) > config.vocab_size:
        raise ValueError(
            f"the tokenizer ({tokenizer_source}) has {len(tokenizer)} tokens but the model's vocab_size is "
            f"{config.vocab_size}: ids >= {config.vocab_size} would index past the embeddings. Use the model's "
            "own tokenizer (--tokenizer_name) or train the model from scratch with this tokenizer"
        )
    for name in ("pad_token_id", "eos_token_id"):
        if getattr(tokenizer, name) is not None and getattr(config, name) != getattr(tokenizer, name):
            raise ValueError(f"tokenizer {name}={getattr(tokenizer, name)} but model config {name}={getattr(config, name)}")


def model_features(model) -> list[str]:
    """The per-token extra inputs this model's forward takes (what the preparation must compute)."""
    from .prepare import FEATURES

    parameters = inspect.signature(model.forward).parameters
    return [feature for feature in FEATURES if feature in parameters]


# ---------------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------------


def setup_logging(training_args) -> None:
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", datefmt="%H:%M:%S",
                        handlers=[logging.StreamHandler(sys.stdout)])  # fmt: skip
    level = training_args.get_process_log_level()
    logger.setLevel(level)
    logging.getLogger("xlpe").setLevel(level)
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(level)


def main(argv: list[str] | None = None, callbacks: list | None = None) -> dict:
    """Run `xlpe-train`; returns all metrics. `callbacks`: extra `TrainerCallback`s (tests, notebooks)."""
    started = time.time()
    model_args, data_args, training_args = parse_arguments(argv)
    setup_logging(training_args)
    logger.info("model: %s | data: %s", model_args, data_args)
    set_seed(training_args.seed)
    checkpoint = resolve_checkpoint(training_args)
    check_init_options(model_args, checkpoint)
    Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)

    splits = load_raw_splits(data_args, model_args)
    check_splits(splits, data_args, training_args, bool(model_args.tokenizer_name or model_args.model_name_or_path or checkpoint))
    tokenizer = load_or_train_tokenizer(model_args, data_args, training_args, splits, checkpoint)
    taggers = resolve_taggers(data_args, target_config(model_args, checkpoint))
    model = build_model(model_args, data_args, tokenizer, checkpoint, taggers)
    check_vocabulary(tokenizer, model, checkpoint or model_args.tokenizer_name or model_args.model_name_or_path or "trained here")
    if data_args.num_beams is not None:
        model.generation_config.num_beams = data_args.num_beams
    features = model_features(model)
    stages = {"train": training_args.do_train, "validation": training_args.do_eval, "test": training_args.do_predict}
    splits = {name: split for name, split in splits.items() if stages[name]}  # prepare only what is used
    prepared, reports = prepare_features(splits, tokenizer, features, taggers, data_args, model_args, training_args, model)
    if training_args.process_index == 0:
        (Path(training_args.output_dir) / "preparation_report.json").write_text(json.dumps(reports, indent=2, default=str))

    trainer_ref: list = []
    trainer = XLPESeq2SeqTrainer(
        model=model, args=training_args, processing_class=tokenizer,
        train_dataset=prepared.get("train") if training_args.do_train else None,
        eval_dataset=prepared.get("validation") if training_args.do_eval else None,
        data_collator=XLPEDataCollator(tokenizer, model=model, label_pad_token_id=-100,
                                       pad_to_multiple_of=8 if training_args.fp16 or training_args.bf16 else None),
        compute_metrics=make_compute_metrics(tokenizer, trainer_ref, data_args.target_lang, data_args.bleu_tokenize) if training_args.predict_with_generate else None,
        eval_with_oracle_positions=training_args.eval_with_oracle_positions, callbacks=callbacks,
    )  # fmt: skip
    trainer_ref.append(trainer)
    for callback in trainer.callback_handler.callbacks:  # tensorboard: output_dir/runs also for evaluation-only runs
        if type(callback).__name__ == "TensorBoardCallback" and getattr(callback, "logging_dir", None) is None:
            from transformers.integrations.integration_utils import default_logdir

            callback.logging_dir = str(Path(training_args.output_dir) / default_logdir())
    all_metrics: dict = {}
    if training_args.do_train:
        result = trainer.train(resume_from_checkpoint=checkpoint)
        trainer.save_model()
        metrics = {**result.metrics, "train_samples": len(prepared["train"])}
        trainer.log_metrics("train", metrics), trainer.save_metrics("train", metrics), trainer.save_state()
        all_metrics.update(metrics)
        if training_args.average_last_checkpoints:
            average_into(trainer, training_args)
    generation = dict(max_length=data_args.val_max_target_length or data_args.max_target_length, num_beams=data_args.num_beams)
    if training_args.do_eval and "validation" in prepared:
        metrics = {**trainer.evaluate(metric_key_prefix="eval", **generation), "eval_samples": len(prepared["validation"])}
        trainer.log_metrics("eval", metrics), trainer.save_metrics("eval", metrics)
        all_metrics.update(metrics)
    if training_args.do_predict and "test" in prepared:
        all_metrics.update(predict_and_report(trainer, prepared["test"], tokenizer, data_args, generation))
    if trainer.is_world_process_zero():
        write_card(training_args.output_dir, model_args, data_args, training_args, all_metrics)
        print(f"xlpe-train: done in {time.time() - started:.0f} s; model and tokenizer in {training_args.output_dir}")
    return all_metrics


def average_into(trainer, training_args) -> None:
    """Replace the trained weights by the average of the last N checkpoints (saved to output_dir too)."""
    checkpoints = last_checkpoints(training_args.output_dir, training_args.average_last_checkpoints)
    if trainer.is_world_process_zero():
        save_averaged_model(checkpoints, training_args.output_dir)
    trainer.accelerator.wait_for_everyone()
    from .checkpoint_averaging import average_checkpoints

    _, unexpected = trainer.model.load_state_dict(average_checkpoints(checkpoints), strict=False)  # tied: missing
    if unexpected:
        raise ValueError(f"averaged checkpoints have tensors the model lacks: {unexpected[:5]}")
    logger.info("averaged %s into the final model", [c.name for c in checkpoints])


def predict_and_report(trainer, test_dataset, tokenizer, data_args, generation) -> dict:
    """Translate the test split with beam search and score it: with predicted reorderings (what raw text gets)
    into generated_predictions.txt, and, for a model that takes XL positions when the split has the oracle
    ones, once more with the oracle positions (generated_predictions_oracle.txt, `predict_oracle_*` metrics:
    the upper bound a better reorderer could reach). Scores use the raw reference text when the split kept it."""
    if data_args.max_predict_samples is not None:
        test_dataset = test_dataset.select(range(min(len(test_dataset), data_args.max_predict_samples)))
    passes = [("predict", False)]
    if "reorder_positions" in test_dataset.column_names and getattr(trainer.model.config, "xl_strategy", "none") != "none":
        passes.append(("predict_oracle", True))
    metrics, all_scores, output_dir = {"predict_samples": len(test_dataset)}, {}, Path(trainer.args.output_dir)
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
        (output_dir / f"{name}.txt").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
        if "target_text" in test_dataset.column_names:  # score against the text, not the decoded label ids
            from .evaluation import corpus_bleu_chrf

            scores = corpus_bleu_chrf(hypotheses, test_dataset["target_text"], target_language=data_args.target_lang,
                                      tokenize=data_args.bleu_tokenize)  # fmt: skip
            metrics.update({f"{prefix}_bleu": round(scores["bleu"]["score"], 2), f"{prefix}_chrf": round(scores["chrf"]["score"], 2)})
            all_scores[prefix] = scores
            if not oracle:
                sources, references = test_dataset["source_text"], test_dataset["target_text"]
                for k in range(min(data_args.num_translation_examples, len(hypotheses))):
                    print(f"\nsource:     {sources[k]}\nreference:  {references[k]}\ntranslation: {hypotheses[k]}")
            label = "test" + (" (oracle positions)" if oracle else "")
            print(f"\n{label} BLEU {scores['bleu']['score']:.2f}  ({scores['bleu']['signature']})")
            print(f"{label} chrF {scores['chrf']['score']:.2f}  ({scores['chrf']['signature']})\n")
    if "predict" in all_scores:  # test_scores.json: the predicted-position scores, the oracle's beside them
        scores = dict(all_scores["predict"])
        if "predict_oracle" in all_scores:
            scores["oracle_positions"] = all_scores["predict_oracle"]
        (output_dir / "test_scores.json").write_text(json.dumps(scores, indent=2))
    trainer.log_metrics("predict", metrics), trainer.save_metrics("predict", metrics)
    return metrics


def write_card(output_dir, model_args, data_args, training_args, metrics) -> None:
    """README.md model card (xlpe.model_card) with the test scores; skipped for stock (vanilla) models."""
    try:
        from .model_card import evaluation_entry, family_of, write_model_card

        family_of(AutoConfig.from_pretrained(output_dir))
    except (ImportError, ValueError, OSError) as error:
        logger.info("no model card written: %s", error)
        return
    scores_file = Path(output_dir) / "test_scores.json"
    dataset = data_args.dataset_name or data_args.train_file or data_args.train_source_file or data_args.prepared_dataset
    entries = [evaluation_entry(json.loads(scores_file.read_text()), str(dataset), str(dataset), "test")] if scores_file.is_file() else []
    training = {k: getattr(training_args, k) for k in ("learning_rate", "max_steps", "num_train_epochs", "per_device_train_batch_size",
                                                       "warmup_steps", "label_smoothing_factor", "seed", "average_last_checkpoints")}  # fmt: skip
    base_model = model_args.model_name_or_path
    base_model = None if base_model is None or Path(base_model).exists() else base_model  # Hub ids only
    languages = [lang for lang in (data_args.source_lang, data_args.target_lang) if lang]
    write_model_card(output_dir, languages=languages or None, datasets=[str(dataset)], eval_results=entries,
                     training=training, base_model=base_model)  # fmt: skip


def cli() -> int:
    """The `xlpe-train` command: `main` returns its metrics (for Python callers); a command exits 0 on success."""
    try:
        main()
    except UsageError as error:  # a user error found before any work: one line, no traceback
        print(f"xlpe-train: error: {error}", file=sys.stderr)
        return 2
    finish_distributed()
    return 0


def finish_distributed() -> None:
    """Join the ranks and destroy the process group before the interpreter exits. Left to static destructors,
    gloo's worker threads can abort a rank *after* a successful run ("terminate called without an active
    exception", SIGABRT), and `accelerate launch` then reports the whole job as failed."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(cli())
