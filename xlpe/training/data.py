"""The data side of `xlpe-train`: raw sentence pairs from wherever they are, checked, then features.

    load_raw_splits   built-in corpus | Hub id / local datasets dir | jsonlines | plain text pairs
                      -> {"train"/"validation"/"test": xlpe.features.corpus.ParallelSplit} (+ gold/Pharaoh alignments)
    check_splits      a clear ValueError before training: wrong language codes (listing the dataset's keys),
                      missing columns, an empty training set, a requested split that is missing
    resolve_taggers   POS taggers for families that take tags
    prepare_features  xlpe.features.prepare over all splits at once (one eflomal run), cached, main process first
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ..features.alignment import parse_pharaoh_line, read_pharaoh_file, read_text_lines
from ..features.prepare import ParallelSplit, load_parallel_dataset, read_parallel_files

logger = logging.getLogger("xlpe.train")
SPLIT_ALIASES = {"train": "train", "validation": "validation", "valid": "validation", "dev": "validation",
                 "val": "validation", "test": "test"}  # fmt: skip
SPLIT_LIMITS = {"train": "max_train_samples", "validation": "max_eval_samples", "test": "max_predict_samples"}


# ---------------------------------------------------------------------------------------------------------
# Raw sentence pairs
# ---------------------------------------------------------------------------------------------------------


def _flat_links(pharaoh: str) -> list[int]:
    return [int(x) for link in pharaoh.split() for x in link.split("-")]


def _builtin_splits(data_args) -> dict[str, ParallelSplit]:
    from ..features.synthetic import SOURCE_LANG, TARGET_LANG, synthetic_splits

    _check_languages(data_args, [SOURCE_LANG, TARGET_LANG], "the built-in corpus (builtin:synthetic)")
    return {
        name: ParallelSplit([p.source for p in pairs], [p.target for p in pairs],
                            f"builtin:synthetic[{name}]:{SOURCE_LANG}", f"builtin:synthetic[{name}]:{TARGET_LANG}",
                            alignments=[_flat_links(p.alignment) for p in pairs],
                            alignment_origin="gold alignments of the synthetic grammar")  # fmt: skip
        for name, pairs in synthetic_splits().items()
    }


def _check_languages(data_args, keys, origin: str) -> None:
    for flag in ("source_lang", "target_lang"):
        value = getattr(data_args, flag)
        if value is None:
            raise ValueError(f"--{flag} is required for {origin}; its translation keys are {sorted(keys)}")
        if value not in keys:
            raise ValueError(f"--{flag} {value!r} is not a language of {origin}: its translation keys are {sorted(keys)}")


def _read_jsonlines(path: str, data_args, alignment_file: str | None) -> ParallelSplit:
    """A jsonlines file of {"translation": {lang: text, ...}} rows (optional "alignment": Pharaoh links)."""
    lines = [line for line in read_text_lines(path) if line.strip()]
    if not lines:
        return ParallelSplit([], [], f"{path}:{data_args.source_lang}", f"{path}:{data_args.target_lang}")
    rows = []
    for number, line in enumerate(lines, start=1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number}: not a JSON line ({error.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("translation"), dict):
            found = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise ValueError(f'{path}:{number}: missing column "translation" (a {{lang: text}} object); found {found}')
        rows.append(row)
    _check_languages(data_args, rows[0]["translation"], path)
    for number, row in enumerate(rows, start=1):
        for flag in ("source_lang", "target_lang"):
            if not isinstance(row["translation"].get(getattr(data_args, flag)), str):
                raise ValueError(f"{path}:{number}: translation has no {getattr(data_args, flag)!r} text ({flag})")
    sources = [row["translation"][data_args.source_lang] for row in rows]
    targets = [row["translation"][data_args.target_lang] for row in rows]
    split = ParallelSplit(sources, targets, f"{path}:{data_args.source_lang}", f"{path}:{data_args.target_lang}")
    if alignment_file:
        split.alignments = read_pharaoh_file(alignment_file, [len(s.split()) for s in sources],
                                             [len(t.split()) for t in targets], path)  # fmt: skip
        split.alignment_origin = alignment_file
    elif all("alignment" in row for row in rows):
        split.alignments = [parse_pharaoh_line(row["alignment"], len(s.split()), len(t.split()), path, n)
                            for n, (row, s, t) in enumerate(zip(rows, sources, targets), start=1)]  # fmt: skip
        split.alignment_origin = f"{path} (alignment column)"
    return split


def _dataset_splits(data_args, model_args) -> dict[str, ParallelSplit]:
    name = data_args.dataset_name
    if data_args.source_lang is None or data_args.target_lang is None:
        raise ValueError(f"--dataset_name {name} needs --source_lang and --target_lang")
    loaded = load_parallel_dataset(name, data_args.source_lang, data_args.target_lang, config_name=data_args.dataset_config_name)
    splits = {}
    for split_name, split in loaded.items():
        if split_name in SPLIT_ALIASES:
            splits[SPLIT_ALIASES[split_name]] = split
    for split in splits.values():
        for side, texts, flag in (("source", split.sources, "source_lang"), ("target", split.targets, "target_lang")):
            if texts and not any(texts):
                keys = _translation_keys(name, data_args.dataset_config_name)
                raise ValueError(f"--{flag} {getattr(data_args, flag)!r} gave no {side} text in {name}: its languages "
                                 f"(translation keys or columns) are {keys}")  # fmt: skip
    return splits


def _translation_keys(name: str, config_name: str | None) -> list[str]:
    """The language keys of a dataset (only for error messages)."""
    import datasets

    path = Path(name)
    loaded = datasets.load_from_disk(name) if path.is_dir() and any((path / f).exists() for f in ("dataset_dict.json", "state.json")) \
        else datasets.load_dataset(name, config_name)  # fmt: skip
    table = next(iter(loaded.values())) if isinstance(loaded, datasets.DatasetDict) else loaded
    if "translation" in table.column_names and len(table):
        return sorted({key for row in table.select(range(min(len(table), 100)))["translation"] for key in (row or {})})
    return table.column_names


def load_raw_splits(data_args, model_args) -> dict[str, ParallelSplit]:
    """Sentence pairs of every available split (train/validation/test), limited by --max_*_samples."""
    if data_args.prepared_dataset:
        return {}  # features are already there (prepare_features loads them)
    if data_args.uses_builtin_corpus():
        splits = _builtin_splits(data_args)
    elif data_args.dataset_name:
        splits = _dataset_splits(data_args, model_args)
    else:
        splits = {}
        for name in ("train", "validation", "test"):
            jsonl, source, target = (getattr(data_args, f"{name}_{kind}") for kind in ("file", "source_file", "target_file"))
            alignment = getattr(data_args, f"{name}_alignment_file")
            if jsonl:
                splits[name] = _read_jsonlines(jsonl, data_args, alignment)
            elif source or target:
                if not (source and target):
                    raise ValueError(f"--{name}_source_file and --{name}_target_file go together")
                splits[name] = read_parallel_files(source, target, alignment)
    for name, split in splits.items():
        alignment_file = getattr(data_args, f"{name}_alignment_file")
        if alignment_file and split.alignments is None:  # e.g. Pharaoh links for a Hub dataset's split
            split.alignments = read_pharaoh_file(alignment_file, [len(s.split()) for s in split.sources],
                                                 [len(t.split()) for t in split.targets], split.source_origin)  # fmt: skip
            split.alignment_origin = alignment_file
        limit = getattr(data_args, SPLIT_LIMITS[name])
        if limit is not None:
            split.sources, split.targets = split.sources[:limit], split.targets[:limit]
            split.alignments = split.alignments[:limit] if split.alignments is not None else None
    return splits


def check_splits(splits: dict[str, ParallelSplit], data_args, training_args, tokenizer_given: bool) -> None:
    """Errors that must come before any training: an empty training set, a requested split that is missing."""
    if data_args.prepared_dataset:
        if not tokenizer_given:
            raise ValueError("--prepared_dataset needs --tokenizer_name (the tokenizer it was prepared with) or "
                             "--model_name_or_path")  # fmt: skip
        return
    if training_args.do_train:
        train = splits.get("train")
        if train is None:
            raise ValueError("--do_train needs training data: --train_file, --train_source_file/--train_target_file, "
                             "--dataset_name with a 'train' split, or no data arguments for the built-in corpus")  # fmt: skip
        if not any(s.strip() and t.strip() for s, t in zip(train.sources, train.targets)):
            raise ValueError(f"the training set is empty: {train.source_origin} / {train.target_origin} has no "
                             f"non-empty sentence pair ({len(train.sources)} lines)")  # fmt: skip
    if not tokenizer_given and "train" not in splits:
        raise ValueError("no tokenizer: give --tokenizer_name or --model_name_or_path, or training data to train one on")
    for flag, split in (("do_eval", "validation"), ("do_predict", "test")):
        if getattr(training_args, flag) and split not in splits:
            if flag in getattr(training_args, "explicit_do", ()):
                raise ValueError(f"--{flag} needs a {split} split (--{split}_file or --{split}_source_file/--{split}_target_file)")
            logger.warning("no %s split: skipping %s", split, flag)
            setattr(training_args, flag, False)


# ---------------------------------------------------------------------------------------------------------
# Taggers and features
# ---------------------------------------------------------------------------------------------------------


def resolve_taggers(data_args, config) -> dict:
    """{"source": Tagger, "source_spec": name, "target": Tagger | None} for families with POS tags, else {}.

    `config` is a config class (from scratch) or instance (checkpoint); the source tagger defaults to its
    `pos_tagger` (what its pipeline uses on raw text); the built-in corpus brings a target tagger."""
    from ..models.registry import declares_field

    config_class = config if isinstance(config, type) else type(config)
    if not declares_field(config_class, "pos_tags"):
        return {}
    from ..features.tagging import get_tagger

    nltk = {"nltk_data": data_args.nltk_data} if data_args.nltk_data else {}
    source_spec = data_args.source_tagger or getattr(config, "pos_tagger", None)
    taggers = {"source_spec": source_spec, "source": get_tagger(source_spec, **(nltk if source_spec == "nltk-en" else {})),
               "nltk_data": data_args.nltk_data}  # fmt: skip
    if data_args.target_tagger:
        taggers["target"] = get_tagger(data_args.target_tagger, **(nltk if data_args.target_tagger == "nltk-en" else {}))
    elif data_args.uses_builtin_corpus():
        from ..features.synthetic import SyntheticTagger

        taggers["target"] = SyntheticTagger()
    return taggers


def default_cache_dir(model_args) -> Path:
    base = model_args.cache_dir or os.environ.get("XLPE_CACHE") or Path.home() / ".cache" / "xlpe"
    return Path(base) / "prepared"


def prepare_features(splits, tokenizer, features, taggers, data_args, model_args, training_args, model):
    """({split: datasets.Dataset}, {split: report}): every split prepared in one run (joint alignment), on the
    main process first; the other processes read the same result from the preparation cache."""
    import datasets

    if data_args.prepared_dataset:
        return _load_prepared(data_args.prepared_dataset, features, model, data_args)
    if "decoder_pos_tag_ids" in features and taggers.get("target") is None:
        logger.warning("no --target_tagger: training without decoder_pos_tag_ids")
        features = [f for f in features if f != "decoder_pos_tag_ids"]
    options = dict(features=features, source_tagger=taggers.get("source"), target_tagger=taggers.get("target"),
                   nltk_data=data_args.nltk_data, max_length=max(data_args.max_source_length, data_args.max_target_length),
                   num_proc=data_args.preprocessing_num_workers or 1, cache_dir=str(default_cache_dir(model_args)),
                   keep_text=True, seed=training_args.seed)  # fmt: skip
    with training_args.main_process_first(local=False, desc="preparing features"):
        prepared, reports = run_preparation(splits, tokenizer, options)
    for name, report in reports.items():
        skipped = report.get("pairs_skipped_total", 0)
        if skipped:
            logger.warning("%s: %d of %d pairs skipped %s", name, skipped, report["pairs_read"], report["pairs_skipped"])
    if training_args.do_train and len(prepared["train"]) == 0:
        raise ValueError(f"no training pair survived the preparation: {reports['train']['pairs_skipped']} "
                         f"(--max_source_length {data_args.max_source_length}, --max_target_length {data_args.max_target_length})")  # fmt: skip
    return datasets.DatasetDict(prepared), reports


def run_preparation(splits, tokenizer, options: dict):
    """xlpe.features.prepare over several splits at once (one alignment run, one cache entry)."""
    from ..features import prepare

    if hasattr(prepare, "prepare_splits"):  # the public name, when xlpe.features.prepare has it
        return prepare.prepare_splits(splits, tokenizer, **options)
    return prepare._prepare_splits(splits, tokenizer, prepare.PrepareOptions(**options))


def _load_prepared(path: str, features, model, data_args):
    import datasets

    loaded = datasets.load_from_disk(path)
    loaded = loaded if isinstance(loaded, datasets.DatasetDict) else datasets.DatasetDict({"train": loaded})
    prepared = {SPLIT_ALIASES[name]: table for name, table in loaded.items() if name in SPLIT_ALIASES}
    for name, table in prepared.items():
        limit = getattr(data_args, SPLIT_LIMITS[name])
        if limit is not None and limit < len(table):
            prepared[name] = table.select(range(limit))
    report_file = Path(path) / "report.json"
    reports = json.loads(report_file.read_text()) if report_file.is_file() else {}
    for name, table in prepared.items():
        missing = [f for f in ("input_ids", "labels", *features) if f not in table.column_names]
        if missing:
            raise ValueError(f"--prepared_dataset {path} [{name}] lacks {missing} that this model needs; "
                             f"prepare it with xlpe-prepare --features {' '.join(features)}")  # fmt: skip
        sample = table.select(range(min(len(table), 1000)))
        largest = max((max(ids) for column in ("input_ids", "labels") for ids in sample[column] if ids), default=-1)
        if largest >= model.config.vocab_size:
            raise ValueError(f"--prepared_dataset {path} [{name}] has token id {largest} but the model's vocab_size is "
                             f"{model.config.vocab_size}: it was prepared with another tokenizer (--tokenizer_name)")  # fmt: skip
    return datasets.DatasetDict(prepared), reports
