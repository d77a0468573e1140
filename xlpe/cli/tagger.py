"""`xlpe-tagger`: train and score a POS tagger for a source language with no built-in one.

    train     --conllu F [F ...] --output T.json [--column upos|xpos] [--iterations 5] [--seed 0] [--lowercase]
              [--dev D [D ...]]   trains NLTK's averaged perceptron on CoNLL-U treebank files (e.g. Universal
              Dependencies) over whitespace words, writes the tagger file, prints a JSON summary (with the
              accuracy on --dev when given)
    evaluate  --tagger T.json --conllu F [F ...] [--column upos|xpos]   word accuracy against a treebank (JSON)
    tag       --tagger T.json --input F [--output O]   one line of tags per input line (whitespace words;
              an empty line gives an empty line; lines end at \\n only, as every xlpe reader splits them)
    list      the registered taggers (JSON: name, languages, tag set size, what they need), the names that
              --source_tagger / --source-tagger and a config's pos_tagger take

Use the file as `--source_tagger perceptron:T.json` (xlpe-train, xlpe-prepare) or `pos_tagger="perceptron:T.json"`
in a config; a saved model keeps a copy (pos_tagger.json), so its pipeline tags raw text with no extra step.
User errors (missing or malformed files, a bad number, an `--output` that is one of the inputs or cannot be
written) print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from ..models.taggers import tagger_help  # (light: the tagger registry, standard library only)
from . import canonical_flags, check_input_file, console_script, user_error

TAG_COLUMNS = ("upos", "xpos")  # = xlpe.features.tagger_training.TAG_COLUMNS (kept light: no import at --help)


def run_train(args) -> dict:
    from ..features.tagger_training import read_treebanks, save_tagger, tagging_accuracy, train_perceptron_tagger

    sentences = read_treebanks(args.conllu, args.column, args.lowercase)
    tagger = train_perceptron_tagger(sentences, args.iterations, args.seed)
    details = {
        "trained_on": [Path(p).name for p in args.conllu],
        "column": args.column,
        "sentences": len(sentences),
        "words": sum(map(len, sentences)),
        "iterations": args.iterations,
        "seed": args.seed,
    }
    if args.dev:
        dev = read_treebanks(args.dev, args.column, args.lowercase)
        details["dev"] = {"files": [Path(p).name for p in args.dev], **tagging_accuracy(tagger, dev)}
    save_tagger(tagger, args.output, lowercase=args.lowercase, details=details)
    return {"output": str(args.output), "tags": len(tagger.classes), **details}


def run_evaluate(args) -> dict:
    from ..features.tagger_training import read_treebanks, tagging_accuracy
    from ..models.pos_tagging_hub import perceptron_from_file, read_tagger_file

    data = read_tagger_file(args.tagger)
    gold = read_treebanks(args.conllu, args.column, bool(data.get("lowercase")))
    return {"tagger": args.tagger, "column": args.column, **tagging_accuracy(perceptron_from_file(data), gold)}


def run_tag(args) -> None:
    from ..features.tagging import PerceptronFileTagger
    from ..features.text_files import decode_text_lines, read_text_lines, write_text_atomic

    tagger = PerceptronFileTagger(args.tagger)
    if args.input == "-":  # lines end at \n only (never at \r, U+2028, a form feed): one line of tags per line
        stream = getattr(sys.stdin, "buffer", None)
        lines = decode_text_lines(stream.read() if stream is not None else sys.stdin.read().encode("utf-8"), "<stdin>")
    else:
        lines = read_text_lines(args.input)
    text = "".join(" ".join(tags) + "\n" for tags in tagger.tag([line.split() for line in lines]))
    if args.output:
        write_text_atomic(args.output, text)
    else:
        sys.stdout.write(text)


def run_list(args) -> list[dict]:
    from ..models.taggers import registered_taggers

    return [
        {
            "name": entry.usage,
            "languages": list(entry.languages),
            "tags": len(entry.tags) if entry.tags is not None else None,
            "description": entry.description,
            "requires": entry.requires,
        }
        for entry in registered_taggers()
    ]


def build_parser() -> argparse.ArgumentParser:
    summary, details = __doc__.split("\n\n", 1)
    parser = argparse.ArgumentParser(
        prog="xlpe-tagger", description=summary, epilog=details, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a tagger file on CoNLL-U treebank files")
    train.add_argument("--conllu", nargs="+", required=True, help="training treebank files (.conllu or .conllu.gz)")
    train.add_argument("--output", required=True, help="the tagger file to write (JSON)")
    train.add_argument("--column", choices=TAG_COLUMNS, default="upos", help="tag column to learn (default: upos)")
    train.add_argument("--iterations", type=int, default=5, help="training passes (default: 5)")
    train.add_argument("--seed", type=int, default=0, help="shuffling seed (default: 0)")
    train.add_argument(
        "--lowercase", action="store_true", help="train and tag lowercased words (for lowercased corpora)"
    )
    train.add_argument("--dev", nargs="+", help="held-out treebank files: report the accuracy on them")
    evaluate = sub.add_parser("evaluate", help="word accuracy of a tagger file against treebank files")
    evaluate.add_argument("--tagger", required=True)
    evaluate.add_argument("--conllu", nargs="+", required=True)
    evaluate.add_argument("--column", choices=TAG_COLUMNS, default="upos")
    tag = sub.add_parser("tag", help="tag a text file, one line of tags per line")
    tag.add_argument("--tagger", required=True)
    tag.add_argument("--input", required=True, help="text file of whitespace-separated words, or - for stdin")
    tag.add_argument("--output", help="write here instead of stdout")
    sub.add_parser("list", help=f"the registered taggers: {tagger_help()}")
    return canonical_flags(parser)


def check_arguments(args) -> str | None:
    try:
        for path in getattr(args, "conllu", None) or []:
            check_input_file(path, "--conllu")
        for path in getattr(args, "dev", None) or []:
            check_input_file(path, "--dev")
        check_input_file(getattr(args, "tagger", None), "--tagger")
        check_input_file(getattr(args, "input", None), "--input")
        if getattr(args, "output", None):  # never over an input (xlpe.features.outputs); replaced otherwise
            from ..features.outputs import check_destination

            inputs = {flag: getattr(args, flag[2:], None) for flag in ("--conllu", "--dev", "--tagger", "--input")}
            check_destination(args.output, "--output", inputs, overwrite=True, create_parents=args.command == "train")
    except ValueError as error:
        return str(error)
    if args.command == "train" and args.iterations < 1:
        return f"--iterations must be at least 1, got {args.iterations}"
    return None


@console_script("xlpe-tagger")
def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    problem = check_arguments(args)
    if problem:
        parser.exit(user_error("xlpe-tagger", problem))
    try:
        result = {"train": run_train, "evaluate": run_evaluate, "tag": run_tag, "list": run_list}[args.command](args)
    except (ValueError, OSError) as error:
        parser.exit(user_error(f"xlpe-tagger {args.command}", " ".join(str(error).split())))
    if result is not None:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
