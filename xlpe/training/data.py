"""The data side of `xlpe-train`: raw sentence pairs from wherever they are, checked, then features.

load_raw_splits   built-in corpus | Hub id / local datasets dir | jsonlines | plain text pairs
                  -> {"train"/"validation"/"test": xlpe.features.corpus.ParallelSplit} (+ gold/Pharaoh alignments)
check_splits      a clear ValueError before training: wrong language codes (listing the dataset's keys),
                  missing columns, an empty training set, a requested split that is missing
resolve_taggers   POS taggers for families that take tags
prepare_features  xlpe.features.prepare over all splits at once (one eflomal run), cached, main process first
use_prepared_dataset, _load_prepared
                  an xlpe-prepare directory instead: its splits, report, languages and saved tokenizer; raw
                  data flags beside it are refused (they would be ignored)
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ..features.alignment import parse_pharaoh_line, read_pharaoh_file
from ..features.prepare import PREPARED_TOKENIZER_DIR, ParallelSplit, load_parallel_dataset, read_parallel_files
from ..features.text_files import read_text_lines
from .errors import UsageError

logger = logging.getLogger("xlpe.train")
SPLIT_ALIASES = {
    "train": "train",
    "validation": "validation",
    "valid": "validation",
    "dev": "validation",
    "val": "validation",
    "test": "test",
}
SPLIT_LIMITS = {"train": "max_train_samples", "validation": "max_eval_samples", "test": "max_predict_samples"}
RAW_DATA_FLAGS = (
    "dataset_name",
    "dataset_config_name",
    "train_file",
    "validation_file",
    "test_file",
    *(
        f"{split}_{kind}_file"
        for split in ("train", "validation", "test")
        for kind in ("source", "target", "alignment")
    ),
    "source_prefix",
    "overwrite_cache",
)  # what shapes raw text: ignored by a prepared dataset


# ---------------------------------------------------------------------------------------------------------
# Raw sentence pairs
# ---------------------------------------------------------------------------------------------------------


def _flat_links(pharaoh: str) -> list[int]:
    return [int(x) for link in pharaoh.split() for x in link.split("-")]


def _builtin_splits(data_args) -> dict[str, ParallelSplit]:
    from ..features.synthetic import SOURCE_LANG, TARGET_LANG, synthetic_splits

    _check_languages(data_args, [SOURCE_LANG, TARGET_LANG], "the built-in corpus (builtin:synthetic)")
    return {
        name: ParallelSplit(
            [p.source for p in pairs],
            [p.target for p in pairs],
            f"builtin:synthetic[{name}]:{SOURCE_LANG}",
            f"builtin:synthetic[{name}]:{TARGET_LANG}",
            alignments=[_flat_links(p.alignment) for p in pairs],
            alignment_origin="gold alignments of the synthetic grammar",
        )
        for name, pairs in synthetic_splits().items()
    }


def _check_languages(data_args, keys, origin: str) -> None:
    for flag in ("source_lang", "target_lang"):
        value = getattr(data_args, flag)
        if value is None:
            raise UsageError(f"--{flag} is required for {origin}; its translation keys are {sorted(keys)}")
        if value not in keys:
            raise UsageError(
                f"--{flag} {value!r} is not a language of {origin}: its translation keys are {sorted(keys)}"
            )


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
            raise UsageError(f"{path}:{number}: not a JSON line ({error.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("translation"), dict):
            found = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise UsageError(f'{path}:{number}: missing column "translation" (a {{lang: text}} object); found {found}')
        rows.append(row)
    _check_languages(data_args, rows[0]["translation"], path)
    for number, row in enumerate(rows, start=1):
        for flag in ("source_lang", "target_lang"):
            if not isinstance(row["translation"].get(getattr(data_args, flag)), str):
                raise UsageError(f"{path}:{number}: translation has no {getattr(data_args, flag)!r} text ({flag})")
    sources = [row["translation"][data_args.source_lang] for row in rows]
    targets = [row["translation"][data_args.target_lang] for row in rows]
    split = ParallelSplit(sources, targets, f"{path}:{data_args.source_lang}", f"{path}:{data_args.target_lang}")
    if alignment_file:
        split.alignments = read_pharaoh_file(
            alignment_file, [len(s.split()) for s in sources], [len(t.split()) for t in targets], path
        )
        split.alignment_origin = alignment_file
    elif all("alignment" in row for row in rows):
        split.alignments = [
            parse_pharaoh_line(row["alignment"], len(s.split()), len(t.split()), path, n)
            for n, (row, s, t) in enumerate(zip(rows, sources, targets), start=1)
        ]
        split.alignment_origin = f"{path} (alignment column)"
    return split


def _dataset_splits(data_args, model_args) -> dict[str, ParallelSplit]:
    name = data_args.dataset_name
    if data_args.source_lang is None or data_args.target_lang is None:
        raise UsageError(f"--dataset_name {name} needs --source_lang and --target_lang")
    loaded = load_parallel_dataset(
        name, data_args.source_lang, data_args.target_lang, config_name=data_args.dataset_config_name
    )
    splits = {}
    for split_name, split in loaded.items():
        if split_name in SPLIT_ALIASES:
            splits[SPLIT_ALIASES[split_name]] = split
    for split in splits.values():
        for side, texts, flag in (("source", split.sources, "source_lang"), ("target", split.targets, "target_lang")):
            if texts and not any(texts):
                keys = _translation_keys(name, data_args.dataset_config_name)
                raise UsageError(
                    f"--{flag} {getattr(data_args, flag)!r} gave no {side} text in {name}: its languages "
                    f"(translation keys or columns) are {keys}"
                )
    return splits


def _translation_keys(name: str, config_name: str | None) -> list[str]:
    """The language keys of a dataset (only for error messages)."""
    import datasets

    path = Path(name)
    loaded = (
        datasets.load_from_disk(name)
        if path.is_dir() and any((path / f).exists() for f in ("dataset_dict.json", "state.json"))
        else datasets.load_dataset(name, config_name)
    )
    table = next(iter(loaded.values())) if isinstance(loaded, datasets.DatasetDict) else loaded
    if "translation" in table.column_names and len(table):
        return sorted({key for row in table.select(range(min(len(table), 100)))["translation"] for key in (row or {})})
    return table.column_names


def load_raw_splits(data_args, model_args) -> dict[str, ParallelSplit]:
    """Sentence pairs of every available split (train/validation/test), limited by --max_*_samples. A malformed
    input (line counts that differ, a bad alignment line, ...) is a UsageError naming the file and line."""
    try:
        return _load_raw_splits(data_args, model_args)
    except UsageError:
        raise
    except ValueError as error:  # the readers name file and line: one line for the command, no traceback
        raise UsageError(str(error)) from None


def _load_raw_splits(data_args, model_args) -> dict[str, ParallelSplit]:
    if data_args.prepared_dataset:
        return {}  # features are already there (prepare_features loads them)
    if data_args.uses_builtin_corpus():
        splits = _builtin_splits(data_args)
    elif data_args.dataset_name:
        splits = _dataset_splits(data_args, model_args)
    else:
        splits = {}
        for name in ("train", "validation", "test"):
            jsonl, source, target = (
                getattr(data_args, f"{name}_{kind}") for kind in ("file", "source_file", "target_file")
            )
            alignment = getattr(data_args, f"{name}_alignment_file")
            if jsonl:
                splits[name] = _read_jsonlines(jsonl, data_args, alignment)
            elif source or target:
                if not (source and target):
                    raise UsageError(f"--{name}_source_file and --{name}_target_file go together")
                splits[name] = read_parallel_files(source, target, alignment)
    for name, split in splits.items():
        alignment_file = getattr(data_args, f"{name}_alignment_file")
        if alignment_file and split.alignments is None:  # e.g. Pharaoh links for a Hub dataset's split
            split.alignments = read_pharaoh_file(
                alignment_file,
                [len(s.split()) for s in split.sources],
                [len(t.split()) for t in split.targets],
                split.source_origin,
            )
            split.alignment_origin = alignment_file
        limit = getattr(data_args, SPLIT_LIMITS[name])
        if limit is not None:
            split.sources, split.targets = split.sources[:limit], split.targets[:limit]
            split.alignments = split.alignments[:limit] if split.alignments is not None else None
        if data_args.source_prefix:
            add_source_prefix(split, data_args.source_prefix)
    return splits


def add_source_prefix(split: ParallelSplit, prefix: str) -> None:
    """`--source_prefix`: the prefix's words go before every source sentence (an empty source stays empty, so
    that it is still skipped and counted); given word alignments shift by the prefix's word count (the prefix
    words stay unaligned)."""
    words = prefix.split()
    if not words:
        return
    shift = len(words)
    split.sources = [f"{' '.join(words)} {source}" if source.strip() else source for source in split.sources]
    if split.alignments is not None:
        # flat links i0 j0 i1 j1 ...: every source index (even slot) moves right by the prefix's length
        split.alignments = [[v + shift if k % 2 == 0 else v for k, v in enumerate(links)] for links in split.alignments]


def check_splits(splits: dict[str, ParallelSplit], run, tokenizer_given: bool) -> None:
    """Errors that must come before any training (`run`: the `RunConfig`): an empty training set, a requested split
    that is missing (a stage not asked for explicitly is skipped, with a warning, when its split is missing)."""
    data_args, training_args = run.data, run.training
    if data_args.prepared_dataset:
        if not tokenizer_given:
            raise UsageError(
                f"--prepared_dataset needs --tokenizer_name (the tokenizer it was prepared with) or "
                f"--model_name_or_path: {data_args.prepared_dataset} has no {PREPARED_TOKENIZER_DIR}/ "
                "(xlpe-prepare saves the one it used there)"
            )
        splits = dict.fromkeys(prepared_split_names(data_args.prepared_dataset))
        if training_args.do_train and "train" not in splits:
            raise UsageError(
                f"--do_train needs a train split; --prepared_dataset {data_args.prepared_dataset} has {sorted(splits)}"
            )
    elif training_args.do_train:
        train = splits.get("train")
        if train is None:
            raise UsageError(
                "--do_train needs training data: --train_file, --train_source_file/--train_target_file, "
                "--dataset_name with a 'train' split, or no data arguments for the built-in corpus"
            )
        if not any(s.strip() and t.strip() for s, t in zip(train.sources, train.targets)):
            raise UsageError(
                f"the training set is empty: {train.source_origin} / {train.target_origin} has no "
                f"non-empty sentence pair ({len(train.sources)} lines)"
            )
    if not tokenizer_given and "train" not in splits:
        raise UsageError(
            "no tokenizer: give --tokenizer_name or --model_name_or_path, or training data to train one on"
        )
    where = (
        f"(--prepared_dataset {data_args.prepared_dataset} has {sorted(splits)}: "
        "xlpe-prepare --validation-source/--test-source ...)"
    )

    def where_split(split: str) -> str:
        if data_args.prepared_dataset:
            return where
        return f"(--{split}_file or --{split}_source_file/--{split}_target_file)"

    for flag, split in (("do_eval", "validation"), ("do_predict", "test")):
        if getattr(training_args, flag) and split not in splits:
            if flag in run.explicit_stages:
                raise UsageError(f"--{flag} needs a {split} split {where_split(split)}")
            strategy = str(getattr(training_args.eval_strategy, "value", training_args.eval_strategy))
            if flag == "do_eval" and strategy != "no":  # (the Trainer would refuse it with a traceback)
                raise UsageError(
                    f"--eval_strategy {strategy} evaluates during training but there is no validation split "
                    f"{where_split(split)}; or pass --eval_strategy no"
                )
            logger.warning("no %s split: skipping %s", split, flag)
            setattr(training_args, flag, False)


# ---------------------------------------------------------------------------------------------------------
# Taggers and features
# ---------------------------------------------------------------------------------------------------------


def resolve_taggers(data_args, config, overrides: dict | None = None) -> dict:
    """{"source": Tagger, "source_spec": name, "target": Tagger | None} for a model that takes POS tags, else {}.

    `config` is a config class (from scratch) or instance (checkpoint) of a family with a `pos_tagger` field;
    `overrides`: the --config_overrides fields. The source tagger is --source_tagger, else a `pos_tagger` in the
    overrides, else the config's (mvPE+POS: "nltk-en" by default; the Marian families: None, no tags). A model with
    `pos_tag_sides="none"` (mvPE alone) needs none. The built-in corpus brings a target tagger."""
    from ..models.registry import declares_field

    config_class = config if isinstance(config, type) else type(config)
    if not declares_field(config_class, "pos_tags"):
        if data_args.source_tagger or data_args.target_tagger:
            logger.warning("--source_tagger/--target_tagger ignored: %s takes no POS tags", config_class.__name__)
        return {}
    overrides = overrides or {}
    if overrides.get("pos_tag_sides", getattr(config, "pos_tag_sides", None)) == "none":
        return {}
    source_spec = data_args.source_tagger or overrides.get("pos_tagger") or getattr(config, "pos_tagger", None)
    if not source_spec:
        return {}
    from ..features.tagging import get_tagger

    model_dir = None if isinstance(config, type) else getattr(config, "_name_or_path", None) or None

    def options(spec: str) -> dict:  # each tagger takes what it uses: NLTK's data, a checkpoint holding its file
        return {"nltk_data": data_args.nltk_data, "model_dir": model_dir}

    taggers = {
        "source_spec": source_spec,
        "source": get_tagger(source_spec, **options(source_spec)),
        "nltk_data": data_args.nltk_data,
    }
    if data_args.target_tagger and declares_field(config_class, "decoder_pos_tags"):
        taggers["target"] = get_tagger(data_args.target_tagger, **options(data_args.target_tagger))
    elif data_args.target_tagger:
        logger.warning(
            "--target_tagger ignored: %s takes source tags only (decoder tags: mvPE+POS)", config_class.__name__
        )
    elif data_args.uses_builtin_corpus() and declares_field(config_class, "decoder_pos_tags"):
        from ..features.synthetic import SyntheticTagger

        taggers["target"] = SyntheticTagger()
    return taggers


def default_cache_dir(model_args) -> Path:
    base = model_args.cache_dir or os.environ.get("XLPE_CACHE") or Path.home() / ".cache" / "xlpe"
    return Path(base) / "prepared"


def prepare_features(splits, tokenizer, features, taggers, run, model):
    """({split: datasets.Dataset}, {split: report}): every split prepared in one run (joint alignment), on the
    main process first; the other processes read the same result from the preparation cache."""
    model_args, data_args, training_args = run.groups()
    import datasets

    if data_args.prepared_dataset:
        return _load_prepared(data_args.prepared_dataset, features, model, data_args, tokenizer)
    if "decoder_pos_tag_ids" in features and taggers.get("target") is None:
        logger.warning("no --target_tagger: training without decoder_pos_tag_ids")
        features = [f for f in features if f != "decoder_pos_tag_ids"]
    options = dict(
        features=features,
        source_tagger=taggers.get("source"),
        target_tagger=taggers.get("target"),
        nltk_data=data_args.nltk_data,
        max_length=data_args.max_source_length,
        max_target_length=data_args.max_target_length,
        num_proc=data_args.preprocessing_num_workers or 1,
        cache_dir=str(default_cache_dir(model_args)),
        keep_text=True,
        seed=training_args.seed,
        overwrite_cache=data_args.overwrite_cache,
    )
    with training_args.main_process_first(local=False, desc="preparing features"):
        prepared, reports = run_preparation(splits, tokenizer, options)
    for name, report in reports.items():
        skipped = report.get("pairs_skipped_total", 0)
        if skipped:
            logger.warning(
                "%s: %d of %d pairs skipped %s", name, skipped, report["pairs_read"], report["pairs_skipped"]
            )
    if training_args.do_train and len(prepared["train"]) == 0:
        raise UsageError(
            f"no training pair survived the preparation: {reports['train']['pairs_skipped']} "
            f"(--max_source_length {data_args.max_source_length}, --max_target_length {data_args.max_target_length})"
        )
    return datasets.DatasetDict(prepared), reports


def run_preparation(splits, tokenizer, options: dict):
    """xlpe.features.prepare over several splits at once (one alignment run, one cache entry)."""
    from ..features.prepare import prepare_splits

    return prepare_splits(splits, tokenizer, **options)


# ---------------------------------------------------------------------------------------------------------
# An xlpe-prepare directory (--prepared_dataset)
# ---------------------------------------------------------------------------------------------------------


def use_prepared_dataset(data_args, model_args) -> None:
    """Check `--prepared_dataset D` against the other arguments and fill in what D knows (called while the
    arguments are parsed: a ValueError here is a UsageError, exit 2). Raw data flags beside D are refused: D
    holds the splits, so they would be ignored. The tokenizer saved in D/tokenizer/ is used when neither
    --tokenizer_name nor --model_name_or_path is given; --source_lang/--target_lang default to the languages
    xlpe-prepare recorded (they choose the BLEU tokenizer and go into the model card), and must agree with them."""
    path = Path(data_args.prepared_dataset)
    given = [f"--{name}" for name in RAW_DATA_FLAGS if getattr(data_args, name, None)]
    if given:
        raise UsageError(
            f"--prepared_dataset {path} holds the train/validation/test splits already, so "
            f"{', '.join(given)} would be ignored: give the files to xlpe-prepare (--validation-source, "
            "--test-source, ...) or drop --prepared_dataset"
        )
    if not path.is_dir():
        raise UsageError(f"--prepared_dataset {path}: no such directory (expected an xlpe-prepare --output)")
    saved_tokenizer = path / PREPARED_TOKENIZER_DIR
    if not (model_args.tokenizer_name or model_args.model_name_or_path):
        if not saved_tokenizer.is_dir():
            raise UsageError(
                f"--prepared_dataset needs --tokenizer_name (the tokenizer it was prepared with) or "
                f"--model_name_or_path: {path} has no {PREPARED_TOKENIZER_DIR}/ (xlpe-prepare saves the "
                "one it used there)"
            )
        model_args.tokenizer_name = str(saved_tokenizer)
    prepared_split_names(path)  # a datasets directory at all?
    for report in _read_reports(path).values():
        for flag, side in (("source_lang", "source"), ("target_lang", "target")):
            recorded = (report.get("languages") or {}).get(side)
            if recorded and getattr(data_args, flag) is None:
                setattr(data_args, flag, recorded)
            elif recorded and getattr(data_args, flag) != recorded:
                raise UsageError(
                    f"--{flag} {getattr(data_args, flag)} but --prepared_dataset {path} was prepared with "
                    f"{side} language {recorded!r}"
                )


def prepared_split_names(path) -> list[str]:
    """Split names (train/validation/test; aliases such as dev mapped) of a prepared directory."""
    path = Path(path)
    if (path / "dataset_dict.json").is_file():
        names = json.loads((path / "dataset_dict.json").read_text())["splits"]
    elif (path / "state.json").is_file():
        names = ["train"]  # a single Dataset (an xlpe-prepare output of version 0.3 and earlier)
    else:
        raise UsageError(
            f"--prepared_dataset {path} is not a prepared dataset directory (no dataset_dict.json; "
            "expected an xlpe-prepare --output)"
        )
    return [SPLIT_ALIASES[name] for name in names if name in SPLIT_ALIASES]


def _read_reports(path: Path) -> dict:
    """report.json as {split: report} (a single report of an older single-split output is the train split's).
    Every xlpe-prepare output has one (the languages and the tokenizer its splits were made with): a directory
    without it, or with a damaged one, is a UsageError naming the file."""
    report_file = Path(path) / "report.json"
    again = "write it again with xlpe-prepare"
    if not report_file.is_file():
        raise UsageError(
            f"--prepared_dataset {path}: no report.json (xlpe-prepare writes it beside the splits: their languages and "
            f"tokenizer, which this run checks); it is not a whole xlpe-prepare output: {again}"
        )
    try:
        reports = json.loads(report_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise UsageError(
            f"--prepared_dataset {report_file}:{error.lineno}: not valid JSON ({error.msg}): {again}"
        ) from None
    except UnicodeDecodeError:
        raise UsageError(f"--prepared_dataset {report_file}: not UTF-8 text: {again}") from None
    if not isinstance(reports, dict):
        raise UsageError(f"--prepared_dataset {report_file}: not a JSON object of reports: {again}")
    return {"train": reports} if "pairs_read" in reports else reports


def check_tag_vocabulary(path: str, split: str, report: dict, config, features) -> None:
    """The tag ids of a prepared split must mean what the model's `pos_tags` say (same tagger, same order)."""
    from ..models.tag_sets import SPECIAL_TAG_NAMES

    recorded = (report.get("tag_vocabularies") or {}).get("source")
    if "pos_tag_ids" not in features or recorded is None or getattr(config, "pos_tags", None) is None:
        return
    recorded = [tag for tag in recorded if tag not in SPECIAL_TAG_NAMES]
    if recorded != list(config.pos_tags):
        raise UsageError(
            f"--prepared_dataset {path} [{split}] was tagged with another tag set ({len(recorded)} tags, "
            f"first {recorded[:5]}) than the model's pos_tags ({len(config.pos_tags)}, first "
            f"{list(config.pos_tags)[:5]}): give the --source_tagger it was prepared with"
        )


def _load_prepared(path: str, features, model, data_args, tokenizer=None):
    import datasets

    loaded = datasets.load_from_disk(path)
    loaded = loaded if isinstance(loaded, datasets.DatasetDict) else datasets.DatasetDict({"train": loaded})
    prepared = {SPLIT_ALIASES[name]: table for name, table in loaded.items() if name in SPLIT_ALIASES}
    for name, table in prepared.items():
        limit = getattr(data_args, SPLIT_LIMITS[name])
        if limit is not None and limit < len(table):
            prepared[name] = table.select(range(limit))
    reports = _read_reports(Path(path))
    recorded = {(report.get("tokenizer") or {}).get("vocab_fingerprint") for report in reports.values()} - {None}
    if tokenizer is not None and recorded:
        from ..features.tokenization import vocab_fingerprint

        if vocab_fingerprint(tokenizer) not in recorded:
            raise UsageError(
                f"--prepared_dataset {path} was prepared with another tokenizer than this run's "
                f"({getattr(tokenizer, 'name_or_path', '?')}: other pieces or ids); use the one saved "
                f"beside it, {Path(path) / PREPARED_TOKENIZER_DIR} (the default without --tokenizer_name)"
            )
    for name, table in prepared.items():
        missing = [f for f in ("input_ids", "labels", *features) if f not in table.column_names]
        if missing:
            raise UsageError(
                f"--prepared_dataset {path} [{name}] lacks {missing} that this model needs; "
                f"prepare it with xlpe-prepare --features {' '.join(features)}"
            )
        check_tag_vocabulary(path, name, reports.get(name, {}), model.config, features)
        sample = table.select(range(min(len(table), 1000)))
        largest = max((max(ids) for column in ("input_ids", "labels") for ids in sample[column] if ids), default=-1)
        if largest >= model.config.vocab_size:
            raise UsageError(
                f"--prepared_dataset {path} [{name}] has token id {largest} but the model's vocab_size is "
                f"{model.config.vocab_size}: it was prepared with another tokenizer (--tokenizer_name)"
            )
    return datasets.DatasetDict(prepared), reports
