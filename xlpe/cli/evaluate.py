"""`xlpe-evaluate`: the evaluation command line. Every subcommand prints one JSON object (and writes it to
`--output` when given); see docs/evaluation.md for examples.

    bleu           BLEU + chrF with sacrebleu signatures (add --dataset_name/--dataset_type for a model card;
                   --source S --length_buckets: also per source-length bucket)
    significance   paired bootstrap / approximate randomization against a baseline's output
    mvpe-metrics   BLEU-1..4, ROUGE-1/2/L, length ratio (+ perplexity with --model and --source)
    perplexity     exp(mean token NLL) of a model on source/reference files
    compare-mt     compare-mt HTML + text report (word F1 by frequency, sentence BLEU by length)
    alignment      AER / precision / recall of attention alignments (or of a links file) against talp gold
    reordering     Kendall's tau / fuzzy reordering score of predicted vs oracle reorderings, beside the monotone
                   (source order) baseline's
    plot           PNG of a tau sweep, a noise curve or perplexity per epoch from JSON
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from ..evaluation import (
    metrics as ev,  # light: sacrebleu, torch and the rest are imported when used
)
from ..evaluation import plots
from ..evaluation.length_buckets import DEFAULT_EDGES, length_bucket_scores, parse_edges
from ..features.language_codes import check_language_code
from ..features.outputs import check_destination  # (standard library only)
from ..features.text_files import write_text_atomic  # (standard library only)
from . import (
    CommandLineError,
    canonical_flags,
    check_device,
    check_input_file,
    check_model_path,
    console_script,
    read_json_input,
    user_error,
)

PROG = "xlpe-evaluate"
# alignment_quality.PROJECTIONS, spelled out so that parsing the command line does not import torch
# (tests/cli/test_help.py checks that the two agree)
PROJECTIONS = ("any_subword", "word_attention")
FILE_OPTIONS = ("hyp", "ref", "baseline", "source", "pred", "oracle", "links", "input", "frequency_corpus")

# ---------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------


def _load_model(args):
    """The model and tokenizer of `--model`, checked to belong together (xlpe.evaluation.model_loading: the
    tokenizer recorded in the config, `--ignore_tokenizer_mismatch` overrides), on `--device`."""
    from ..evaluation.model_loading import load_model_and_tokenizer

    check_model_path(args.model, "--model")
    check_device(args.device)
    model, tokenizer = load_model_and_tokenizer(args.model, ignore_tokenizer_mismatch=args.ignore_tokenizer_mismatch)
    return model.to(args.device), tokenizer


def _read(path: str, flag: str, allow_empty: bool = False) -> list[str]:
    """The lines of a text input (`xlpe.features.text_files` rules); an empty file is a CommandLineError naming it."""
    lines = ev.read_lines(path)
    if not lines and not allow_empty:
        raise CommandLineError(f"{flag} {path}: the file is empty (expected one sentence per line)")
    return lines


def _parallel(*named: tuple[str, str, list[str]]) -> None:
    """CommandLineError naming the files when parallel inputs ((flag, path, lines), ...) differ in line count."""
    (flag, path, lines), *others = named
    for other_flag, other_path, other_lines in others:
        if len(other_lines) != len(lines):
            raise CommandLineError(
                f"line counts differ: {flag} {path} has {len(lines)} lines, {other_flag} "
                f"{other_path} has {len(other_lines)}"
            )


def _hypotheses_and_references(args, hyp_flag: str = "hyp") -> tuple[list[str], list[str] | list[list[str]]]:
    """(hypotheses, references: one stream, or a list of streams for several --ref files), every file non-empty
    and parallel to the hypotheses."""
    hyp_path = getattr(args, hyp_flag)
    hypotheses = _read(hyp_path, f"--{hyp_flag}")
    streams = [_read(path, "--ref") for path in args.ref]
    _parallel(
        (f"--{hyp_flag}", hyp_path, hypotheses), *(("--ref", path, lines) for path, lines in zip(args.ref, streams))
    )
    return hypotheses, streams[0] if len(streams) == 1 else streams


def _named_files(items: list[str]) -> dict[str, str]:
    """["name=path", "path2"] -> {"name": "path", "path2-stem": "path2"}."""
    named = {}
    for item in items:
        name, _, path = item.rpartition("=")
        named[name or Path(path).stem] = path
    return named


# ---------------------------------------------------------------------------------------------------------
# Subcommands (each returns the JSON-able result)
# ---------------------------------------------------------------------------------------------------------


def run_bleu(args) -> dict:
    hypotheses, references = _hypotheses_and_references(args)
    result = ev.corpus_bleu_chrf(hypotheses, references, args.lang, args.tokenize, args.lowercase)
    if args.length_buckets is not None:  # BLEU/chrF per source-length bucket (evaluation/length_buckets.py)
        if not args.source:
            raise CommandLineError("--length_buckets needs --source (the source file the lengths are counted in)")
        sources = _read(args.source, "--source")
        _parallel(("--hyp", args.hyp, hypotheses), ("--source", args.source, sources))
        edges = parse_edges(args.length_buckets)
        result["length_buckets"] = length_bucket_scores(
            sources, hypotheses, references, edges, args.lang, args.tokenize, args.lowercase
        )
    if args.dataset_name:
        result.update(
            dataset_name=args.dataset_name,
            dataset_type=args.dataset_type or args.dataset_name,
            dataset_split=args.split,
            dataset_config=args.dataset_config,
        )
    return result


def run_significance(args) -> dict:
    system, refs = _hypotheses_and_references(args)
    baseline = _read(args.baseline, "--baseline")
    _parallel(("--hyp", args.hyp, system), ("--baseline", args.baseline, baseline))
    tests = ["bs", "ar"] if args.test == "both" else [args.test]
    return {
        test: ev.paired_significance(system, baseline, refs, test, args.n_samples, args.alpha, args.lang, args.tokenize)
        for test in tests
    }


def run_perplexity(args) -> dict:
    model, tokenizer = _load_model(args)
    sources, references = _read(args.source, "--source"), _read(args.ref[0], "--ref")
    _parallel(("--source", args.source, sources), ("--ref", args.ref[0], references))
    batches = ev.text_batches(tokenizer, sources, references, args.batch_size, model)
    return ev.perplexity(model, batches)


def run_mvpe_metrics(args) -> dict:
    hypotheses, references = _hypotheses_and_references(args)
    result = ev.mvpe_metrics(hypotheses, references if isinstance(references[0], str) else references[0], args.lang)
    if args.model:
        if not args.source:
            raise CommandLineError("--model needs --source for the perplexity")
        result["perplexity"] = run_perplexity(args)
    return result


def run_compare_mt(args) -> dict:
    named = _named_files(args.hyp)
    systems = {name: _read(path, "--hyp") for name, path in named.items()}
    references = _read(args.ref[0], "--ref")
    sources = _read(args.source, "--source") if args.source else None
    _parallel(
        ("--ref", args.ref[0], references),
        *(("--hyp", named[name], lines) for name, lines in systems.items()),
        *((("--source", args.source, sources),) if sources is not None else ()),
    )
    return ev.compare_mt_report(
        references,
        systems,
        args.output_dir,
        sources=sources,
        frequency_corpus=args.frequency_corpus,
        overwrite=args.overwrite_output,
    )


def run_alignment(args) -> dict:
    from ..evaluation import alignment_quality as aq

    if not Path(args.gold_dir).is_dir():
        raise CommandLineError(f"--gold_dir {args.gold_dir}: no such directory")
    test_set = aq.load_alignment_test_set(args.gold_dir)
    test_set = test_set.reversed() if args.reverse else test_set
    full_count, gold_file = len(test_set.gold), next(Path(args.gold_dir).glob("*.gold"))
    limited = f" (or {min(args.limit, full_count)} with --limit {args.limit})" if args.limit else ""
    if args.limit:
        n = args.limit
        test_set = aq.AlignmentTestSet(test_set.name, test_set.sources[:n], test_set.targets[:n], test_set.gold[:n])
    diagonal = [aq.diagonal_alignment(len(s), len(t)) for s, t in zip(test_set.sources, test_set.targets)]
    if args.links:
        predicted = aq.read_links(args.links, one_based=args.one_based)
        # one line per gold sentence pair: the whole gold set, or exactly the first N with --limit N
        if len(predicted) != full_count and not (args.limit and len(predicted) == len(test_set.gold)):
            raise CommandLineError(
                f"line counts differ: --links {args.links} has {len(predicted)} lines, the gold "
                f"alignments {gold_file} have {full_count}{limited} (one line per sentence pair)"
            )
        predicted = predicted[: len(test_set.gold)]
        aq.check_links_inside(
            predicted,
            args.links,
            [len(s) for s in test_set.sources],
            [len(t) for t in test_set.targets],
            args.one_based,
        )
        method = f"links from {args.links}"
    elif args.model:
        model, tokenizer = _load_model(args)
        predicted = aq.attention_alignments(
            model, tokenizer, test_set.sources, test_set.targets, args.batch_size, args.layer, args.projection
        )
        layer = "penultimate" if args.layer is None else args.layer
        method = f"cross-attention of decoder layer {layer}, heads averaged, {args.projection}"
    else:
        raise CommandLineError("alignment: give --model or --links")
    if args.write_links:
        write_text_atomic(args.write_links, "".join(aq.format_links(links) + "\n" for links in predicted))
    return {
        "test_set": test_set.name,
        "sentences": len(test_set.gold),
        "method": method,
        **aq.alignment_error_rate(predicted, test_set.gold),
        "diagonal_baseline": aq.alignment_error_rate(diagonal, test_set.gold),
    }


def _read_positions(path: str, flag: str, permutations: bool = False) -> list[list[int]]:
    """Integer positions, one sentence per line; with `permutations`, each line must be one of 0..n-1."""
    positions = []
    for number, line in enumerate(_read(path, flag), start=1):
        try:
            positions.append([int(v) for v in line.split()])
        except ValueError:
            raise CommandLineError(f"{flag} {path}:{number}: not a line of integer positions: {line[:60]!r}") from None
    if permutations:
        from ..evaluation.alignment_quality import check_permutations

        try:
            check_permutations(positions, path)
        except ValueError as error:
            raise CommandLineError(f"{flag} {error}") from None
    return positions


def run_reordering(args) -> dict:
    from ..evaluation import alignment_quality as aq

    if args.pred and args.oracle:
        predicted, oracle = (
            _read_positions(args.pred, "--pred", permutations=True),
            _read_positions(args.oracle, "--oracle"),
        )
        _parallel(("--pred", args.pred, predicted), ("--oracle", args.oracle, oracle))
        return aq.reordering_quality(predicted, oracle, monotone_baseline=True)
    if not (args.model and args.source and args.links):
        raise CommandLineError("reordering: give --pred and --oracle, or --model, --source and --links")
    sources = [line.strip(" ").split(" ") for line in _read(args.source, "--source")]
    links = aq.read_links(args.links, one_based=args.one_based)
    _parallel(("--source", args.source, sources), ("--links", args.links, links))
    aq.check_links_inside(links, args.links, [len(words) for words in sources], one_based=args.one_based)
    model, tokenizer = _load_model(args)  # (after the files: their errors come first, and fast)
    predicted, oracle = aq.predicted_and_oracle_reorderings(model, tokenizer, sources, links, args.batch_size)
    quality = aq.reordering_quality(predicted, oracle, monotone_baseline=True)
    return {"level": "sub-word tokens (special tokens excluded)", **quality}


def run_plot(args) -> dict:
    if args.kind == "perplexity" and args.trainer_state:
        data = {name: plots.perplexity_history(path) for name, path in _named_files(args.trainer_state).items()}
    else:
        data = read_json_input(args.input, "--input")
    draw = {"tau": plots.plot_tau_sweep, "noise": plots.plot_noise_curve, "perplexity": plots.plot_perplexity_per_epoch}
    return {"png": str(draw[args.kind](data, args.output))}


# ---------------------------------------------------------------------------------------------------------
# Argument parsing
# ---------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    description, commands_table = __doc__.split("\n\n")[:2]
    parser = argparse.ArgumentParser(
        prog=PROG, description=description, epilog=commands_table, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name, function, help_text, output_help="also write the JSON here"):
        sub = commands.add_parser(name, help=help_text)
        sub.set_defaults(function=function)
        sub.add_argument("--output", required=name == "plot", help=output_help)
        sub.add_argument(
            "--overwrite_output",
            action="store_true",
            help="replace an existing --output file (and --write_links file, compare-mt's --output_dir)",
        )
        return sub

    def text_args(sub, hyp=True, lang=True):
        if hyp:
            sub.add_argument("--hyp", required=True, help="system output, one sentence per line (detokenized)")
        sub.add_argument("--ref", required=True, nargs="+", help="reference file(s)")
        if lang:
            sub.add_argument("--lang", help="target language code (lets sacrebleu pick zh/ja tokenizers)")

    def model_args(sub, required=False):
        sub.add_argument("--model", required=required, help="saved model directory (with tokenizer)")
        sub.add_argument("--batch_size", type=int, default=16)
        sub.add_argument("--device", default="cpu")
        sub.add_argument(
            "--ignore_tokenizer_mismatch",
            action="store_true",
            help="use the tokenizer beside the model even when it is not the one it was trained with",
        )

    sub = command("bleu", run_bleu, "BLEU and chrF with signatures")
    text_args(sub)
    sub.add_argument(
        "--bleu_tokenize",
        "--tokenize",
        dest="tokenize",
        help="sacrebleu's BLEU tokenizer (13a, intl, zh, ja-mecab, ko-mecab, char, none, ...); default: "
        "sacrebleu's choice for --lang",
    )
    sub.add_argument("--lowercase", action="store_true")
    sub.add_argument("--source", help="source file, parallel to --hyp (for --length_buckets)")
    sub.add_argument(
        "--length_buckets",
        nargs="?",
        const=",".join(map(str, DEFAULT_EDGES)),
        help="also score each source-length bucket (text units): upper edges, default 10,20,30,40,50 -> 1-10, ..., 51+",
    )
    for name in ("dataset_name", "dataset_type", "dataset_config"):
        sub.add_argument(f"--{name}")
    sub.add_argument("--split", default="test")

    sub = command("significance", run_significance, "paired significance test against a baseline")
    text_args(sub)
    sub.add_argument("--baseline", required=True, help="the baseline system's output")
    sub.add_argument("--bleu_tokenize", "--tokenize", dest="tokenize", help="sacrebleu's BLEU tokenizer (as for bleu)")
    sub.add_argument("--test", choices=["bs", "ar", "both"], default="bs")
    sub.add_argument("--n_samples", type=int, default=0, help="0: sacrebleu's default (bs 1000, ar 10000)")
    sub.add_argument("--alpha", type=float, default=0.05)

    sub = command("mvpe-metrics", run_mvpe_metrics, "BLEU-1..4, ROUGE, length ratio (+ perplexity)")
    text_args(sub)
    model_args(sub)
    sub.add_argument("--source", help="source file (for the perplexity)")

    sub = command("perplexity", run_perplexity, "perplexity of a model on source/reference files")
    text_args(sub, hyp=False, lang=False)
    model_args(sub, required=True)
    sub.add_argument("--source", required=True)

    sub = command("compare-mt", run_compare_mt, "compare-mt report")
    sub.add_argument("--ref", required=True, nargs=1)
    sub.add_argument("--hyp", required=True, nargs="+", help="system outputs as name=path (or path)")
    sub.add_argument("--source")
    sub.add_argument(
        "--frequency_corpus",
        help="text whose word counts define the frequency buckets (e.g. the training targets; default: the references)",
    )
    sub.add_argument(
        "--output_dir",
        required=True,
        help="report directory (index.html, figures, report.txt), written aside and renamed into place when complete",
    )

    sub = command("alignment", run_alignment, "AER of attention alignments against talp gold")
    sub.add_argument("--gold_dir", required=True, help="a word_alignment_gold/<pair> folder")
    model_args(sub)
    sub.add_argument("--links", help="score this alignment file (i-j per line) instead of a model")
    sub.add_argument("--one_based", action="store_true", help="--links are 1-based (talp) instead of 0-based")
    sub.add_argument("--reverse", action="store_true", help="the model translates gold target -> gold source")
    sub.add_argument("--layer", type=int, help="decoder layer (default: the penultimate)")
    sub.add_argument("--projection", choices=PROJECTIONS, default="any_subword")
    sub.add_argument("--limit", type=int, help="only the first N sentence pairs")
    sub.add_argument("--write_links", help="write the predicted links (0-based Pharaoh) here")

    sub = command(
        "reordering", run_reordering, "Kendall's tau / FRS of predicted vs oracle reorderings (and of the source order)"
    )
    sub.add_argument("--pred", help="predicted positions, one sentence per line")
    sub.add_argument("--oracle", help="oracle positions, one sentence per line")
    model_args(sub)
    sub.add_argument("--source", help="pre-tokenized source sentences (ASCII-space separated)")
    sub.add_argument("--links", help="word alignments to the target (i-j), from which the oracle is built")
    sub.add_argument("--one_based", action="store_true")

    sub = command("plot", run_plot, "PNG plots", output_help="PNG path")
    sub.add_argument("kind", choices=["tau", "noise", "perplexity"])
    sub.add_argument("--input", help="JSON {x: y} or {label: {x: y}}")
    sub.add_argument("--trainer_state", nargs="+", help="perplexity: name=trainer_state.json ...")
    return canonical_flags(parser)


def _check_input_files(args) -> None:
    for name in FILE_OPTIONS:
        values = getattr(args, name, None)
        for value in [values] if isinstance(values, str) else values or []:
            check_input_file(
                value.rpartition("=")[2] if name == "hyp" and args.command == "compare-mt" else value, f"--{name}"
            )
    for value in getattr(args, "trainer_state", None) or []:
        check_input_file(value.rpartition("=")[2], "--trainer_state")


def _input_paths(args) -> dict:
    """{flag: paths} of every local input of the subcommand (files, --model, --gold_dir): no output may be one."""
    inputs = {}
    for name in (*FILE_OPTIONS, "trainer_state", "model", "gold_dir"):
        values = getattr(args, name, None)
        values = [values] if isinstance(values, str) else list(values or [])
        if name in ("hyp", "trainer_state") and args.command in ("compare-mt", "plot"):
            values = [value.rpartition("=")[2] for value in values]
        inputs[f"--{name}"] = values
    return inputs


@console_script(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_language_code(getattr(args, "lang", None), "--lang")  # `english` would pick a wrong BLEU tokenizer
        if args.command in ("bleu", "significance", "mvpe-metrics"):  # the BLEU tokenizer must run: say so first
            ev.check_bleu_tokenizer(args.lang, getattr(args, "tokenize", None))
        _check_input_files(args)
        if getattr(args, "model", None):  # a device this machine lacks: said before any file is read
            check_device(args.device)
        inputs = _input_paths(args)
        for flag in ("output", "write_links", "output_dir"):  # (output_dir: compare-mt's report directory)
            if getattr(args, flag, None):  # never over an input, even with --overwrite_output (xlpe.features.outputs)
                kind = "dir" if flag == "output_dir" else "file"
                check_destination(
                    getattr(args, flag),
                    f"--{flag}",
                    inputs,
                    overwrite=args.overwrite_output,
                    kind=kind,
                    owns=("compare-mt-report",),
                )
        result = args.function(args)
        text = json.dumps(result, indent=2, ensure_ascii=False)
        if args.output and args.command != "plot":
            write_text_atomic(args.output, text + "\n")  # a full disk: one line, the partial file removed
    except (CommandLineError, ValueError, OSError) as error:  # user errors (TextFileError too): one line, exit 2
        return user_error(PROG, error)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
