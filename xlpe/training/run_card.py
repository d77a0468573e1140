"""What the model card of an `xlpe-train` run says about that run, and only what the run did.

The card is written when the final evaluation starts and again after each stage (`model_card.write_training_card`,
the facts gathered by `card_facts.gather_card`), recorded in `xlpe_card.json` beside it and rendered from that
record (`model_card.build_model_card`); `xlpe-push` renders it again from the same record with the Hub id, so the
usage example names the repository and not the local folder (`rerender_for_push`). This module says what the
figures mean:

* **the data**: its name (`--dataset_label`, else the name `xlpe-prepare --name` recorded in the prepared data, else
  the Hub dataset or the training files), languages, pairs read/kept/skipped per split and the sentences actually
  scored per split (`--max_eval_samples`/`--max_predict_samples` score fewer than were prepared);
* **the preprocessing** in prose, from the preparation report: tokenizer, word aligner, oracle reorderings,
  length filter;
* **the training arguments in force**: token batches (`--max_tokens`) or sentence batches, never both;
  `--max_steps` or the epochs, whichever bounded the run, and the steps and epochs actually run; the optimizer as
  the trainer built it (class, fused or not, betas, eps); precision; the wall time of training summed over every
  resumed segment (`callbacks.RunClock`);
* **the evaluation**: one row per split and metric with the sentences scored, and the test translations saved
  beside the card (`test_translations.txt`: source, reference, translation per line, tab-separated);
* **the usage example**: a source sentence of the run's test or validation data, not a fixed English one
  (`card_facts.example_from_data`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

CARD_INPUTS = "xlpe_card.json"  # what the card was rendered from (and the digest of the rendering)
TRANSLATIONS_FILE = "test_translations.txt"  # source \t reference \t translation, one test sentence a line


# ---------------------------------------------------------------------------------------------------------
# The facts of the run
# ---------------------------------------------------------------------------------------------------------


def _prepared_reports(data_args) -> dict:
    prepared = getattr(data_args, "prepared_dataset", None)
    report_file = Path(prepared) / "report.json" if prepared else None
    if report_file is None or not report_file.is_file():
        return {}
    reports = json.loads(report_file.read_text(encoding="utf-8"))
    return {"train": reports} if "pairs_read" in reports else reports


def _files_label(*paths) -> str:
    names = [f"{Path(p).parent.name}/{Path(p).name}" if Path(p).parent.name else Path(p).name for p in paths if p]
    return " + ".join(names)


def dataset_label(data_args, reports: Mapping | None = None) -> str:
    """The name of the training data on the card: `--dataset_label`, the name `xlpe-prepare` recorded, the Hub
    dataset (with its config), or the training files (`folder/train.fr + folder/train.en`); never the local
    folder of a prepared dataset."""
    explicit = getattr(data_args, "dataset_label", None)
    if explicit:
        return explicit
    reports = _prepared_reports(data_args) if reports is None else reports
    for report in reports.values():
        if isinstance(report, Mapping) and report.get("dataset_name"):
            return str(report["dataset_name"])
    if getattr(data_args, "dataset_name", None):
        config = getattr(data_args, "dataset_config_name", None)
        return str(data_args.dataset_name) + (f" ({config})" if config else "")
    train = reports.get("train") if isinstance(reports, Mapping) else None
    if isinstance(train, Mapping) and train.get("source"):
        return _files_label(train.get("source"), train.get("target"))
    if getattr(data_args, "train_source_file", None):
        return _files_label(data_args.train_source_file, getattr(data_args, "train_target_file", None))
    if getattr(data_args, "train_file", None):
        return _files_label(data_args.train_file)
    return str(getattr(data_args, "prepared_dataset", None) or "unstated data")


def describe_optimizer(optimizer) -> str:
    """The optimizer as the trainer built it: class, fused/foreach, betas, eps, and the weight decay of its
    parameter groups (e.g. `AdamW (fused=True, betas=(0.9, 0.98), eps=1e-09, weight_decay=0.0)`): the values the
    steps used, read from the parameter groups, not the class defaults."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps it
    groups = list(getattr(inner, "param_groups", None) or [getattr(inner, "defaults", {}) or {}])
    shown = {
        key: groups[0][key]
        for key in ("fused", "foreach", "betas", "eps", "momentum")
        if groups[0].get(key) is not None
    }
    decays = sorted({group["weight_decay"] for group in groups if group.get("weight_decay") is not None})
    if decays:
        shown["weight_decay"] = decays[0] if len(decays) == 1 else " / ".join(map(str, decays))
    return f"{type(inner).__name__} ({', '.join(f'{key}={value}' for key, value in shown.items())})"


def _precision(training_args) -> str:
    if getattr(training_args, "bf16", False):
        return "bf16 autocast (fp32 master weights)"
    if getattr(training_args, "fp16", False):
        return "fp16 autocast"
    return "fp32"


# the settings the card lists as they were in force (the batches, the steps or epochs, the optimizer and the
# precision are described in words instead)
CARD_TRAINING_FLAGS = (
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "weight_decay",
    "max_grad_norm",
    "label_smoothing_factor",
    "seed",
    "average_last_checkpoints",
    "early_stopping_patience",
)
CARD_DATA_FLAGS = ("source_prefix", "max_source_length", "max_target_length", "num_beams", "bleu_tokenize")


def card_flags() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(training flags, data flags) the card lists as they were in force."""
    return CARD_TRAINING_FLAGS, CARD_DATA_FLAGS


def training_settings(training_args, data_args, facts: Mapping) -> dict:
    """The training arguments in force, as the card lists them (module docstring). `facts`: what the run
    measured (`optimizer`, `global_step`, `epoch`, `training_seconds`, `segments`, `device`)."""
    settings: dict = {}
    max_tokens = getattr(training_args, "max_tokens", None)
    if max_tokens:
        settings["batches"] = f"token batches: --max_tokens {max_tokens} per device and step"
    elif getattr(training_args, "per_device_train_batch_size", None):
        settings["batches"] = f"{training_args.per_device_train_batch_size} sentence pairs per device and step"
    for name in ("gradient_accumulation_steps",):
        if (getattr(training_args, name, 1) or 1) > 1:
            settings[name] = getattr(training_args, name)
    max_steps = getattr(training_args, "max_steps", -1)
    if max_steps is not None and max_steps > 0:
        settings["max_steps"] = max_steps
    elif getattr(training_args, "num_train_epochs", None) is not None:
        settings["num_train_epochs"] = training_args.num_train_epochs
    if facts.get("global_step") is not None:
        settings["steps run"] = facts["global_step"]
    if facts.get("epoch") is not None:
        settings["epochs run"] = round(float(facts["epoch"]), 2)
    training_flags, data_flags = card_flags()
    for name in training_flags:
        value = getattr(training_args, name, None)
        if value is not None and (value not in ("", 0) or name in ("learning_rate", "seed")):
            settings[name] = getattr(value, "value", value)
    optim = getattr(training_args, "optim", None)
    optim = getattr(optim, "value", optim)
    if not facts.get("optimizer") and optim in ("adamw_torch", "adamw_torch_fused"):  # (the record writes the first)
        optim = "AdamW (fused or not: not recorded)"
    settings["optimizer"] = facts.get("optimizer") or optim
    settings["precision"] = _precision(training_args)
    if facts.get("device"):
        settings["device"] = facts["device"]
    for name in data_flags:
        if getattr(data_args, name, None) is not None:
            settings[name] = getattr(data_args, name)
    if facts.get("training_seconds") is not None:
        segments = int(facts.get("segments") or 1)
        settings["training time"] = f"{facts['training_seconds']:,.0f} s" + (
            f" in {segments} segments (resumed {segments - 1}x)" if segments > 1 else ""
        )
    return {key: value for key, value in settings.items() if value is not None}


def preprocessing_text(reports: Mapping, data_args) -> str | None:
    """The preprocessing in prose (OPUS-MT cards have a line for it), from the preparation report."""
    train = reports.get("train") if isinstance(reports, Mapping) else None
    if not isinstance(train, Mapping):
        return None
    parts = []
    tokenizer = train.get("tokenizer") or {}
    if tokenizer.get("origin") or tokenizer.get("vocab_size"):
        parts.append(
            f"sub-words: {tokenizer['origin']}"
            if tokenizer.get("origin")
            else f"sub-words: joint tokenizer, {tokenizer['vocab_size']:,} pieces"
        )
    aligner = train.get("alignments")
    if aligner:
        parts.append(f"word alignments: {aligner if isinstance(aligner, str) else json.dumps(aligner)}")
    if "reorder_positions" in (train.get("features") or []):
        tau = train.get("mean_kendall_tau")
        parts.append(
            "oracle cross-lingual positions from the alignments by BTG (XL PE Sec. 3.1)"
            + (f", mean Kendall tau {tau:.2f} between source and target order" if isinstance(tau, float) else "")
        )
    limits = [
        f"{side} {getattr(data_args, f'max_{side}_length')} tokens"
        for side in ("source", "target")
        if getattr(data_args, f"max_{side}_length", None)
    ]
    if limits:
        parts.append(f"pairs longer than {' / '.join(limits)} skipped (counted below), never truncated")
    return "; ".join(parts) + "." if parts else None


def write_test_translations(output_dir, sources, references, hypotheses) -> Path:
    """`test_translations.txt` beside the card: a header, then source, reference and translation of each test
    sentence scored, tab-separated (tabs inside a sentence become spaces)."""
    from ..features.text_files import write_text_atomic

    clean = lambda text: " ".join(str(text).replace("\t", " ").split())
    rows = ["source\treference\ttranslation"] + [
        f"{clean(s)}\t{clean(r)}\t{clean(h)}" for s, r, h in zip(sources, references, hypotheses, strict=True)
    ]
    path = Path(output_dir) / TRANSLATIONS_FILE
    write_text_atomic(path, "\n".join(rows) + "\n")
    return path


__all__ = [
    "CARD_INPUTS",
    "TRANSLATIONS_FILE",
    "dataset_label",
    "describe_optimizer",
    "preprocessing_text",
    "training_settings",
    "write_test_translations",
]
