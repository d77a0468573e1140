"""The facts a model card states about the run that made a model folder, gathered in one place (`gather_card`).

`xlpe-train` calls it with its live arguments, metrics and measurements (`model_card.write_training_card`), first
when the final evaluation starts (the scores pending) and again after each stage (validation, test); `xlpe-push`
calls it on a folder that has no card record (`xlpe_card.json`), with what the folder holds. Each fact has one
source, live or recorded, and both paths render through `model_card.build_model_card`:

* **data name**: `--dataset_label`, the prepared data's name, the Hub dataset, the files (`run_card.dataset_label`);
  recorded: the same, from the run record's options and `preparation_report.json`;
* **pairs per split**: `preparation_report.json` (read, kept, skipped per reason);
* **arguments**: the arguments in force (`run_card.training_settings`) and every option of the run record
  (`xlpe_artefact.json`; recorded: its options alone);
* **time**: the optimizer as built, the device, the seconds over every resumed segment; recorded: the steps and
  epochs (`trainer_state.json`) and this segment's seconds (`train_results.json`);
* **scores**: the run's metrics and `test_scores.json`; recorded: `all_results.json` and `test_scores.json`;
* **usage example**: a source sentence of the run's test or validation data (`test_translations.txt`, the source
  files, a prepared dataset's `source_text`).

What is read when the card is rendered, live or at push, comes from the model folder itself (`build_model_card`):
the sizes (`config.json`, the weights), the attached reorderer's held-out Kendall tau beside the source order's
(`reorderer_quality`, carried into `config.reorderer_config` at attach time by `reorderer_held_out_quality`), and
the learning check's verdict (`learning_check`).

A damaged JSON file among these is a ValueError naming the file and line; a missing one leaves its facts out.

The evaluation entries and the data sizes the card takes are built here too (`evaluation_entry`, `validation_entry`,
`data_sizes`; `model_card` re-exports them).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace

from ..features.reordering import SOURCE_ORDER_MARGIN, beats_source_order

LEARNING_CHECK = "learning_check.json"  # {"ok": bool, "message": str, "checks": {...}, "step": int}
REORDERER_REPORT = "reorderer_training.json"  # a trained reorderer's report (as xlpe-reorder names it)
HELD_OUT_KEY = "held_out_quality"  # the reorderer's held-out figures inside config.reorderer_config
TAU_MARGIN = SOURCE_ORDER_MARGIN  # the reorderer beats the source order by this much (reordering.beats_source_order)
ATTACHED_REPORT = Path("reorderer") / REORDERER_REPORT  # where xlpe-reorder attach copies it into a model folder
EXAMPLE_WORDS = 25  # the usage example: the first source sentence of at most this many words


# ---------------------------------------------------------------------------------------------------------
# Evaluation entries and data sizes (what `model_card.build_model_card` takes)
# ---------------------------------------------------------------------------------------------------------


def evaluation_entry(
    scores: Mapping, dataset_name: str, dataset_type: str, split: str = "test", config: str | None = None
) -> dict:
    """One evaluation for the card: `corpus_bleu_chrf(...)` output plus the dataset it was measured on."""
    return {
        **scores,
        "dataset_name": dataset_name,
        "dataset_type": dataset_type,
        "dataset_split": split,
        "dataset_config": config,
    }


def validation_entry(
    metrics: Mapping,
    dataset_name: str,
    target_language: str | None = None,
    tokenize: str | None = None,
    prefix: str = "eval",
) -> dict | None:
    """The card entry of the validation scores a run logged (`eval_bleu`, `eval_chrf`, 0-100), with the
    signatures of the metrics that produced them (`metrics.bleu_chrf_signatures`); None without scores."""
    from ..evaluation.metrics import bleu_chrf_signatures

    scores = {name: metrics.get(f"{prefix}_{name}") for name in ("bleu", "chrf")}
    if not any(isinstance(value, (int, float)) for value in scores.values()):
        return None
    signatures = bleu_chrf_signatures(target_language, tokenize)
    result = {
        name: {"score": float(value), "signature": signatures[name]}
        for name, value in scores.items()
        if isinstance(value, (int, float))
    }
    return evaluation_entry(result, dataset_name, dataset_name, "validation")


def data_sizes(report: Mapping) -> dict:
    """{split: {"pairs_read", "pairs_kept", "pairs_skipped"}} from a preparation report (`xlpe-prepare`,
    `preparation_report.json`); splits without counts are left out."""
    sizes = {}
    for split, value in (report or {}).items():
        if isinstance(value, Mapping) and isinstance(value.get("pairs_kept"), int):
            skipped = value.get("pairs_skipped")
            sizes[split] = {
                "pairs_read": value.get("pairs_read"),
                "pairs_kept": value["pairs_kept"],
                "pairs_skipped": sum(skipped.values()) if isinstance(skipped, Mapping) else skipped,
            }
    return sizes


# ---------------------------------------------------------------------------------------------------------
# Files of the folder
# ---------------------------------------------------------------------------------------------------------


def read_json(path: str | Path, what: str = "card input"):
    """The JSON in `path`, or None when there is no such file; a damaged one -> ValueError naming file and line."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{what}: {path}:{error.lineno}: not valid JSON ({error.msg})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{what}: {path}: not UTF-8 text") from None


def recorded_run(folder: str | Path):
    """The run record of a training run in `folder` (`xlpe_artefact.json`, kind "training-run"), or None."""
    from ..features.artefacts import read_record

    record = read_record(folder)
    return record if record is not None and record.kind == "training-run" else None


def recorded_arguments(record) -> SimpleNamespace:
    """The run record's options as one namespace of arguments (`--max_tokens` -> `.max_tokens`), what
    `run_card.training_settings` and `run_card.dataset_label` read; names that are not recorded read as None."""
    options = {flag.lstrip("-"): value for flag, value in (record.options if record else {}).items()}
    return _Arguments(**options)


class _Arguments(SimpleNamespace):
    def __getattr__(self, name):  # only called for names not set: an option the record does not hold
        if name.startswith("__"):
            raise AttributeError(name)
        return None


# what the record writes for `--optim` when AdamW ran, fused or not (`reuse.run_record`): it cannot tell them apart
RECORDED_ADAMW = "adamw_torch"
TOKENIZER_TRAINED_HERE = ("--tokenizer_model", "--tokenizer_vocab_size")  # read only when no tokenizer was given
TOKENIZER_ROW = "tokenizer (as saved with the model)"
OPTIMIZER_ROW = "--optim"


def describe_saved_tokenizer(folder: str | Path | None) -> str | None:
    """The tokenizer saved in `folder`, as the run used it: its sub-word model and vocabulary size from
    `tokenizer.json` (e.g. "Unigram, 7,530 pieces"; added special tokens counted apart), else its class and
    sentencepiece files from `tokenizer_config.json`; None when the folder holds no tokenizer."""
    if folder is None:
        return None
    folder = Path(folder)
    saved = read_json(folder / "tokenizer.json", "the saved tokenizer")
    config = read_json(folder / "tokenizer_config.json", "the saved tokenizer's config") or {}
    cls = config.get("tokenizer_class") if isinstance(config, Mapping) else None
    if isinstance(saved, Mapping) and isinstance(saved.get("model"), Mapping):
        model = saved["model"]
        vocab = model.get("vocab")
        pieces = len(vocab) if isinstance(vocab, (list, dict)) else None
        added = [t for t in saved.get("added_tokens") or () if isinstance(t, Mapping)]
        extra = sum(1 for t in added if not (isinstance(vocab, dict) and t.get("content") in vocab))
        text = str(model.get("type") or "tokenizer") + (f", {pieces:,} pieces" if pieces is not None else "")
        text += f" + {extra} added tokens" if extra else ""
        return text + (f" ({cls})" if cls else "")
    files = sorted(p.name for p in folder.glob("*.spm")) + sorted(p.name for p in folder.glob("*.model"))
    if cls or files:
        return " ".join(filter(None, [cls, f"sentencepiece {' + '.join(files)}" if files else None]))
    return None


def recorded_options(record, folder: str | Path | None = None, optimizer: str | None = None) -> list[tuple[str, str]]:
    """(flag, value) of every option the run record holds with a value, then its inputs by digest: the arguments
    that made the run, as the card lists them (transformers' own training arguments where they differ from its
    defaults; output, reporting and speed plumbing left out). An option the run did not use is left out: the
    sentence batch size of a run on token batches (`--max_tokens`), the epochs of a run bounded by `--max_steps`,
    the kind and size of a tokenizer trained here when one was given (`--tokenizer_name`, which a
    `--prepared_dataset` sets to the tokenizer it was prepared with, or `--model_name_or_path`). Rows that show
    what ran rather than what was asked: the tokenizer as saved in `folder` (`describe_saved_tokenizer`), and
    `--optim` as the trainer built it (`optimizer`, `run_card.describe_optimizer`; without it, a recorded AdamW
    says the record does not tell the fused form from the plain one)."""
    if record is None:
        return []
    from .reuse import NOT_ON_CARD, inherited_defaults

    defaults = inherited_defaults()
    at_default = {flag for flag, value in record.options.items() if flag in defaults and defaults[flag] == value}
    options = {
        flag: value
        for flag, value in record.options.items()
        if flag.lstrip("-") not in NOT_ON_CARD and flag not in at_default and flag != "--record"
    }
    unused = {"--per_device_train_batch_size"} if options.get("--max_tokens") else set()
    if isinstance(options.get("--max_steps"), int) and options["--max_steps"] > 0:
        unused.add("--num_train_epochs")
    given_tokenizer = any(
        record.options.get(flag) or flag in record.inputs for flag in ("--tokenizer_name", "--model_name_or_path")
    )
    if given_tokenizer:
        unused.update(TOKENIZER_TRAINED_HERE)
    options.pop(OPTIMIZER_ROW, None)  # (shown as it ran, below)
    rows = [
        (flag, json.dumps(value, ensure_ascii=False))
        for flag, value in sorted(options.items())
        if value is not None and value != [] and flag not in unused
    ]
    recorded_optim = record.options.get(OPTIMIZER_ROW)
    if optimizer:
        rows.append((OPTIMIZER_ROW, f"{optimizer} (as the trainer built it)"))
    elif recorded_optim == RECORDED_ADAMW:
        rows.append((OPTIMIZER_ROW, f"{RECORDED_ADAMW} (AdamW, fused or not: the record does not tell)"))
    elif recorded_optim is not None:
        rows.append((OPTIMIZER_ROW, json.dumps(recorded_optim)))
    tokenizer = describe_saved_tokenizer(folder)
    if tokenizer:
        rows.append((TOKENIZER_ROW, tokenizer + ("" if given_tokenizer else " (trained by this run)")))
    rows += [(flag, f"sha256:{digest[:12]}… (input)") for flag, digest in sorted(record.inputs.items())]
    return rows


def learning_check(folder: str | Path) -> dict | None:
    """The learning check's verdict in `folder/learning_check.json` ({"ok", "message", "checks", "step"}; "ok" is
    None for a check that could not run, `"ran": false`), or None when the file is missing; a file of another
    shape is a ValueError naming it."""
    path = Path(folder) / LEARNING_CHECK
    verdict = read_json(path, "the learning check")
    if verdict is None:
        return None
    not_run = isinstance(verdict, Mapping) and verdict.get("ok") is None and verdict.get("ran") is False
    if not isinstance(verdict, Mapping) or not (isinstance(verdict.get("ok"), bool) or not_run):
        raise ValueError(
            f"{path}: a learning check needs a JSON object with ok (true or false, or null with ran false)"
        )
    message = verdict.get("message")
    return {
        "ok": verdict["ok"],
        "message": str(message).strip() if message else "no reason was recorded",
        "step": verdict.get("step") if isinstance(verdict.get("step"), int) else None,
    }


# ---------------------------------------------------------------------------------------------------------
# The reorderer: held-out Kendall tau against the source order's
# ---------------------------------------------------------------------------------------------------------


def reorderer_held_out_quality(reorderer_dir: str | Path) -> dict | None:
    """What a trained reorderer's report (`reorderer_training.json`) says about its quality, for
    `config.reorderer_config["held_out_quality"]`: on the held-out calibration pairs, the mean word-level Kendall
    tau of its predicted order (with the chosen order prior) and of the source order (monotone), both against the
    oracle; without calibration pairs, the source order's tau on its training pairs only. None: nothing recorded."""
    path = Path(reorderer_dir) / REORDERER_REPORT
    report = read_json(path, "--reorderer")
    if not isinstance(report, Mapping):
        return None
    calibration = report.get("order_prior_calibration")
    if isinstance(calibration, Mapping) and isinstance(calibration.get("by_prior"), Mapping):
        chosen = calibration.get("chosen")
        by_prior = calibration["by_prior"]
        entry = by_prior.get(str(chosen)) or next(
            (value for key, value in by_prior.items() if _as_float(key) == _as_float(chosen)), None
        )
        tau = entry.get("kendall_tau") if isinstance(entry, Mapping) else None
        if isinstance(tau, (int, float)) and isinstance(calibration.get("monotone_kendall_tau"), (int, float)):
            return {
                "kendall_tau": round(float(tau), 4),
                "monotone_kendall_tau": round(float(calibration["monotone_kendall_tau"]), 4),
                "pairs": calibration.get("held_out_pairs"),
                "order_prior": chosen,
                "measured_on": "held-out pairs",
            }
    monotone = report.get("oracle_mean_kendall_tau_vs_monotone")
    if isinstance(monotone, (int, float)):
        return {"monotone_kendall_tau": round(float(monotone), 4), "measured_on": "training pairs"}
    return None


def _as_float(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def reorderer_quality(reorderer_config: Mapping, folder: str | Path | None = None) -> dict | None:
    """The card's figures of an attached reorderer: from its training report attached beside the model
    (`folder/reorderer/reorderer_training.json`, written by `xlpe-reorder attach`), else from `held_out_quality`
    in its config (written by `model_setup.attach_reorderer`, for `xlpe-train --reorderer` too): its tau, the
    source order's, the pairs, and `beats` (False when its tau is not at least TAU_MARGIN above the source
    order's, the rule `xlpe-reorder` reports by)."""
    attached = Path(folder) / ATTACHED_REPORT if folder is not None else None
    if attached is not None and attached.is_file():
        quality = reorderer_held_out_quality(attached.parent)
    else:
        quality = reorderer_config.get(HELD_OUT_KEY) if isinstance(reorderer_config, Mapping) else None
    if not isinstance(quality, Mapping) or not isinstance(quality.get("monotone_kendall_tau"), (int, float)):
        return None
    tau = quality.get("kendall_tau")
    return {
        "kendall_tau": f"{tau:.3f}" if isinstance(tau, (int, float)) else None,
        "monotone_kendall_tau": f"{quality['monotone_kendall_tau']:.3f}",
        "pairs": f"{quality['pairs']:,}" if isinstance(quality.get("pairs"), int) else None,
        "measured_on": quality.get("measured_on") or "held-out pairs",
        "beats": None if tau is None else beats_source_order(tau, quality["monotone_kendall_tau"]),
        "margin": TAU_MARGIN,
    }


# ---------------------------------------------------------------------------------------------------------
# The usage example: a sentence in the source language, from the run's own data
# ---------------------------------------------------------------------------------------------------------


def first_source_sentence(lines: Sequence[str] | None) -> str | None:
    """The first non-empty line of at most EXAMPLE_WORDS words (else the first non-empty one), stripped; words
    are text units (`xlpe.features.text_units`: a character counts as one in Chinese, Japanese, Thai, ...)."""
    from ..features.text_units import unit_count

    found = [" ".join(str(line).split()) for line in lines or () if str(line).strip()]
    short = [line for line in found if unit_count(line) <= EXAMPLE_WORDS]
    return (short or found or [None])[0]


def _file_head(path, count: int = 200) -> list[str]:
    from itertools import islice

    path = Path(path)
    if not path.is_file():
        return []
    opener = __import__("gzip").open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
        return [line.lstrip("\ufeff") for line in islice(handle, count)]


def example_from_data(folder: str | Path, data_args=None, reports: Mapping | None = None) -> str | None:
    """A source sentence of the run's data: the test translations beside the card (`test_translations.txt`), else
    the test or validation source text (`--test_source_file` / `--validation_source_file`, the source files the
    preparation report names, or the `source_text` of a prepared dataset's split)."""
    from .run_card import TRANSLATIONS_FILE

    translations = _file_head(Path(folder) / TRANSLATIONS_FILE)[1:]
    found = first_source_sentence([row.split("\t", 1)[0] for row in translations])
    if found:
        return found
    for split in ("test", "validation"):
        candidates = [getattr(data_args, f"{split}_source_file", None)]
        report = (reports or {}).get(split)
        candidates.append(report.get("source") if isinstance(report, Mapping) else None)
        for candidate in candidates:
            if candidate and (found := first_source_sentence(_file_head(candidate))):
                return found
    prepared = getattr(data_args, "prepared_dataset", None)
    if prepared and Path(prepared).is_dir():
        import datasets

        try:
            loaded = datasets.load_from_disk(prepared)
        except (OSError, ValueError, FileNotFoundError):
            return None
        for split in ("test", "validation"):
            if isinstance(loaded, datasets.DatasetDict) and split in loaded:
                part = loaded[split]
                if "source_text" in part.column_names and len(part):
                    found = first_source_sentence(part.select(range(min(200, len(part))))["source_text"])
                    if found:
                        return found
    return None


# ---------------------------------------------------------------------------------------------------------
# All of it
# ---------------------------------------------------------------------------------------------------------


BUILTIN_PREDICTOR = "the built-in reorder predictor"


def positions_source(config) -> str | None:
    """What supplies the cross-lingual positions of an XL PE model at test time: the attached reorderer (named by
    the digest of `config.reorderer_config`, so a different one attached later reads differently) or
    BUILTIN_PREDICTOR; None for a model without predicted positions. The card records it with the scores
    (`scored_positions`) and says when the shipped model's differs from the scored one's."""
    from ..models.registry import family_of_model_type

    family = family_of_model_type(config.model_type)
    if family is None or family.name != "xlpe":
        return None
    reorderer = getattr(config, "reorderer_config", None)
    if not reorderer:
        return BUILTIN_PREDICTOR
    reorderer = reorderer if isinstance(reorderer, Mapping) else reorderer.to_dict()
    digest = hashlib.sha256(json.dumps(reorderer, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"the attached reorderer (config sha256:{digest})"


def _scored_positions(folder: Path) -> str | None:
    """What supplied the positions of the model in `folder` now, when the run scores it (`positions_source`)."""
    from transformers import AutoConfig

    from ..models import register_with_transformers

    register_with_transformers()

    try:
        return positions_source(AutoConfig.from_pretrained(folder))
    except (OSError, ValueError):
        return None


def _facts_from_folder(folder: Path) -> dict:
    state = read_json(folder / "trainer_state.json", "the trainer state") or {}
    results = read_json(folder / "train_results.json", "the train results") or {}
    facts = {"global_step": state.get("global_step"), "epoch": state.get("epoch")}
    if isinstance(results.get("train_runtime"), (int, float)):
        facts["training_seconds"] = results["train_runtime"]
    return {key: value for key, value in facts.items() if value is not None}


def gather_card(
    folder: str | Path,
    run=None,
    metrics: Mapping | None = None,
    facts: Mapping | None = None,
    pending: Sequence[str] = (),
) -> dict:
    """The keyword arguments of `model_card.build_model_card` for the model in `folder`, from the live run's
    arguments (`run`, its `RunConfig`), metrics and `facts` (`run_card.training_settings`) where given, else from
    what the folder records (module docstring). `pending`: the evaluation stages not run yet ("validation",
    "test"): the card says their scores are pending, and shows none of an earlier run's."""
    from .run_card import (
        TRANSLATIONS_FILE,
        _prepared_reports,
        dataset_label,
        preprocessing_text,
        training_settings,
    )

    folder = Path(folder)
    record = recorded_run(folder)
    recorded = recorded_arguments(record)
    model_args, data_args, training_args = run.groups() if run is not None else (recorded, recorded, recorded)
    if metrics is None:
        metrics = read_json(folder / "all_results.json", "the run's results") or {}
    if facts is None:
        facts = _facts_from_folder(folder)
    report = read_json(folder / "preparation_report.json", "the preparation report") or {}
    prepared = _prepared_reports(data_args)
    dataset = dataset_label(data_args, prepared or report)
    if dataset == "unstated data" and record is not None and "--dataset_name" in record.inputs:
        dataset = "a Hub dataset (its name is not recorded in the folder)"
    entries = []
    test_scores = None if "test" in pending else read_json(folder / "test_scores.json", "the test scores")
    if isinstance(test_scores, Mapping):
        scores = {k: v for k, v in test_scores.items() if k != "oracle_positions"}
        entries.append(
            {**evaluation_entry(scores, dataset, dataset, "test"), "sentences": metrics.get("predict_samples")}
        )
    if "validation" not in pending:
        tokenize = getattr(data_args, "bleu_tokenize", None)
        validation = validation_entry(metrics, dataset, getattr(data_args, "target_lang", None), tokenize)
        if validation is not None:
            entries.insert(0, {**validation, "sentences": metrics.get("eval_samples")})
    data = data_sizes(report)
    for split, key in (("validation", "eval_samples"), ("test", "predict_samples")):
        if split in data and split not in pending and isinstance(metrics.get(key), int):
            data[split]["sentences_scored"] = metrics[key]
    recipe_file = read_json(folder / "recipe.json", "the recipe record")
    recipe = (
        getattr(training_args, "recipe", None)
        or getattr(model_args, "recipe", None)
        or getattr(data_args, "recipe", None)
        or (recipe_file.get("recipe") if isinstance(recipe_file, Mapping) else None)
    )
    uses_builtin = getattr(data_args, "uses_builtin_corpus", None)
    builtin = (
        uses_builtin() if callable(uses_builtin) else str(getattr(data_args, "dataset_name", "")).startswith("builtin:")
    )
    if recipe is None and builtin:
        recipe = "builtin (defaults for the built-in synthetic corpus)"
    base_model = getattr(model_args, "model_name_or_path", None)
    base_model = None if base_model is None or Path(base_model).exists() else base_model  # Hub ids only
    languages = [lang for lang in (getattr(data_args, "source_lang", None), getattr(data_args, "target_lang", None))]
    return dict(
        languages=[lang for lang in languages if lang] or None,
        datasets=None if dataset == "unstated data" else [dataset],
        eval_results=entries,
        data=data,
        recipe=recipe,
        training=training_settings(training_args, data_args, facts),
        options=recorded_options(record, folder, (facts or {}).get("optimizer")),
        license=getattr(data_args, "license", None),
        scored_positions=_scored_positions(folder),
        base_model=base_model,
        preprocessing=preprocessing_text(prepared or report, data_args),
        example_source=example_from_data(folder, data_args, prepared or report),
        translations_file=TRANSLATIONS_FILE
        if "test" not in pending and (folder / TRANSLATIONS_FILE).is_file()
        else None,
        pending=list(pending),
    )


__all__ = [
    "BUILTIN_PREDICTOR",
    "HELD_OUT_KEY",
    "data_sizes",
    "evaluation_entry",
    "validation_entry",
    "LEARNING_CHECK",
    "TAU_MARGIN",
    "example_from_data",
    "first_source_sentence",
    "gather_card",
    "learning_check",
    "positions_source",
    "read_json",
    "recorded_arguments",
    "recorded_options",
    "recorded_run",
    "reorderer_held_out_quality",
    "reorderer_quality",
]
