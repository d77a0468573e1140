"""`xlpe-translate`: raw text in (a file or stdin, one sentence per line), translations out, in the same order.

    xlpe-translate --model runs/demo --input test.en --output test.hyp --num_beams 5 --batch_size 32
    echo "the dog sees a cat" | xlpe-translate --model runs/demo

The model is loaded with `from_pretrained` and run through `XLPETranslationPipeline`, so everything a model
needs beyond the text comes from the text: XL PE predicts its reorderings, mvPE+POS tags the source with its
configured tagger, DPE predicts its positions. Sentences are batched by length (fewer pad tokens; the output
order is the input order), empty lines stay empty, a progress bar goes to stderr. `--trust_remote_code` runs
the model's own code (the folder's or Hub repository's `*.py`, e.g. of another version) instead of this package's.

Before a sentence is translated the tokenizer beside the model is checked against the one the model was trained
with (`config.json` `tokenizer_fingerprint`; `--ignore_tokenizer_mismatch` overrides), and a tokenizer larger
than the model's vocabulary or padding on the left is refused (xlpe.evaluation.model_loading). A `--model` that
is no local directory and that the Hub cannot serve is one line saying so.

Input is read by `xlpe.features.text_files` (lines end at `\\n` or CRLF, never at a bare `\\r`; a byte-order mark
is dropped; bytes that are not UTF-8 are a one-line error naming file, line and byte offset). A sentence longer
than the tokenizer's `model_max_length` is translated in full when the model's position table
(`max_position_embeddings`) takes it; one longer than that is cut to it, and one warning counts and lists such
lines. Each translation has its own length budget, 1.5 x its source tokens + 10 (at most max_position_embeddings
- 1; `--max_new_tokens` caps every line alike instead), so it never depends on the lines it is batched with; a
warning counts and lists the translations that reached it instead of ending (xlpe.models.length_rule).
`--output` is written beside its name and renamed into place when complete; an existing file is replaced
only with `--overwrite_output`, never when it is `--input` or lies in `--model` (`xlpe.features.outputs`), and
while one run writes it a second one is refused at once, naming the first (`.<name>.xlpe.lock` beside it).

`--alignments FILE` also writes the word alignments of each translation from the model's guided-alignment head
(Pharaoh `i-j`, source word - output word, one line per input line; xlpe.evaluation.guided_word_alignments),
written whole like `--output` (beside it, renamed into place; never over an existing file without
`--overwrite_output`); a model trained without guided alignment is refused before any line is translated.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from . import (
    CommandLineError,
    canonical_flags,
    check_device,
    check_input_file,
    check_model_path,
    console_script,
    user_error,
)

PROG = "xlpe-translate"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="model directory or Hub id (saved by xlpe-train)")
    parser.add_argument("--input", default="-", help="UTF-8 text, one sentence per line; '-' = stdin (default)")
    parser.add_argument("--output", default="-", help="where translations go, one per line; '-' = stdout (default)")
    parser.add_argument(
        "--num_beams", type=int, default=None, help="beam size (default: the model's generation config)"
    )
    parser.add_argument("--batch_size", type=int, default=32, help="sentences per forward pass (default 32)")
    parser.add_argument(
        "--max_new_tokens",
        type=int,
        default=None,
        help="a cap for every line (default: each line's own budget, 1.5 x its source tokens + 10, "
        "at most max_position_embeddings - 1)",
    )
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda when available)")
    parser.add_argument(
        "--trust_remote_code",
        action="store_true",
        help="run the model folder's (or Hub repository's) own code instead of the installed package's",
    )
    parser.add_argument(
        "--ignore_tokenizer_mismatch",
        action="store_true",
        help="use the tokenizer beside the model "
        "even when it is not the one the model was trained with (config.json tokenizer_fingerprint)",
    )
    parser.add_argument(
        "--alignments",
        default=None,
        help="also write word alignments of each translation, Pharaoh i-j (source word - output word), one line "
        "per input line, from the model's guided-alignment head (a model trained with --guided_alignment_weight)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--overwrite_output", action="store_true", help="replace an existing --output file")
    return canonical_flags(parser)


def load_pipeline(
    model_name: str, device: str | None = None, trust_remote_code: bool = False, ignore_tokenizer_mismatch: bool = False
):
    """`XLPETranslationPipeline` around the model and tokenizer of `model_name`, loaded and checked to belong
    together by `xlpe.evaluation.model_loading` (the tokenizer recorded in the config, its size, its padding
    side; `--trust_remote_code` runs the folder's own code)."""
    import torch

    from ..evaluation.model_loading import load_model_and_tokenizer
    from ..models.pipeline_translation import XLPETranslationPipeline

    device = check_device(device)  # a device this machine lacks: one line naming --device and what is here
    model, tokenizer = load_model_and_tokenizer(model_name, trust_remote_code, ignore_tokenizer_mismatch)
    return XLPETranslationPipeline(model=model, tokenizer=tokenizer, device=torch.device(device))


def length_sorted_batches(lines: list[str], batch_size: int) -> Iterator[list[int]]:
    """Indices of the non-empty lines, longest first, in batches of `batch_size`."""
    order = sorted((i for i, line in enumerate(lines) if line.strip()), key=lambda i: -len(lines[i].split()))
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]


def source_limit(translator) -> int:
    """The longest source in tokens the translator's model can encode (its `max_position_embeddings`)."""
    limit = getattr(translator, "source_limit", None)
    if limit is not None:
        return limit()
    return int(
        getattr(translator.model.config, "max_position_embeddings", None) or translator.tokenizer.model_max_length
    )


def over_limit_lines(translator, words: list[str]) -> tuple[int, list[int]]:
    """(the model's source limit, 1-based numbers of the non-empty lines whose tokens exceed it)."""
    limit = source_limit(translator)
    nonempty = [i for i, w in enumerate(words) if w]
    if not nonempty:
        return limit, []
    lengths = map(len, translator.tokenizer([words[i] for i in nonempty], truncation=False, verbose=False)["input_ids"])
    return limit, [i + 1 for i, length in zip(nonempty, lengths) if length > limit]


def limit_warnings(prog: str, limit: int, too_long: list[int], at_limit: list[int], total: int) -> list[str]:
    """The warnings of one translated file (`xlpe-translate`, `xlpe-export --translate`): `length_rule.limit_warnings`
    as `<prog>: warning: ...` lines."""
    from ..models.length_limits import limit_warnings as warnings

    return [f"{prog}: warning: {text}" for text in warnings(limit, too_long, at_limit, total)]


def translate_lines(
    translator, lines: list[str], batch_size: int = 32, progress: bool = True, **generate_kwargs
) -> list[str]:
    """Translations of `lines` in input order ("" for blank lines). A line the model can encode is translated in
    full; each translation has its own length budget (xlpe.models.length_rule; `max_new_tokens` caps every line
    alike), so it does not depend on the lines batched with it. Lines longer than the model's limit are cut to it,
    and translations that reached their budget are counted: one warning each on stderr lists their lines."""
    from tqdm.auto import tqdm

    if batch_size < 1:
        raise ValueError(f"--batch_size must be >= 1, got {batch_size}")
    translations = [""] * len(lines)
    words = [" ".join(line.split()) for line in lines]  # the word unit of training: whitespace-normalised
    limit, too_long = over_limit_lines(translator, words)
    at_limit = []
    total = sum(1 for w in words if w)
    with tqdm(total=total, desc="translating", unit="sent", file=sys.stderr, disable=not progress) as bar:
        for batch in length_sorted_batches(words, batch_size):
            results = translator(
                [words[i] for i in batch], batch_size=len(batch), truncation=True, return_limits=True, **generate_kwargs
            )
            for index, result in zip(batch, results):
                translations[index] = result["translation_text"].strip()
                if result.get("output_at_limit"):
                    at_limit.append(index + 1)
            bar.update(len(batch))
    for warning in limit_warnings(PROG, limit, too_long, sorted(at_limit), total):
        print(warning, file=sys.stderr)
    return translations


def read_input(path: str) -> list[str]:
    """The lines of `--input` (a file, or '-' for stdin), read by `xlpe.features.text_files` (TextFileError:
    file, line and byte offset of bytes that are not UTF-8)."""
    from ..features.text_files import decode_text_lines, read_text_lines

    if path != "-":
        return read_text_lines(path)
    stream = getattr(sys.stdin, "buffer", None)
    return decode_text_lines(stream.read() if stream is not None else sys.stdin.read().encode("utf-8"), "<stdin>")


@console_script(PROG)
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for flag, value in (
        ("--batch_size", args.batch_size),
        ("--num_beams", args.num_beams),
        ("--max_new_tokens", args.max_new_tokens),
    ):
        if value is not None and value < 1:
            return user_error(PROG, f"{flag} must be >= 1, got {value}")
    import contextlib

    with contextlib.ExitStack() as held:
        try:
            from ..features.outputs import check_destination, output_file_lock
            from ..features.text_files import write_text_atomic

            check_input_file(args.input, "--input")
            check_model_path(args.model, "--model")
            if args.output != "-":  # never over --input or --model; the file's lock is held until it is written
                inputs = {"--input": args.input, "--model": args.model if Path(args.model).exists() else None}
                check_destination(args.output, "--output", inputs, overwrite=args.overwrite_output)
                held.enter_context(output_file_lock(args.output, PROG))
            if args.alignments is not None:
                inputs = {"--input": args.input, "--model": args.model if Path(args.model).exists() else None}
                check_destination(args.alignments, "--alignments", inputs, overwrite=args.overwrite_output)
                if args.alignments == args.output:
                    raise CommandLineError(f"--alignments and --output are the same file {args.output!r}")
            lines = read_input(args.input)
            args.device = check_device(args.device)  # before the model loads (after stdin is read: torch is slow)
            translator = load_pipeline(args.model, args.device, args.trust_remote_code, args.ignore_tokenizer_mismatch)
            if args.alignments is not None:
                from ..evaluation.guided_word_alignments import check_guided_model

                check_guided_model(translator.model)
        except (CommandLineError, ValueError, OSError) as error:  # OSError: what from_pretrained raises
            return user_error(PROG, error)
        generate_kwargs = {
            k: v for k, v in (("num_beams", args.num_beams), ("max_new_tokens", args.max_new_tokens)) if v is not None
        }
        translations = translate_lines(translator, lines, args.batch_size, progress=not args.quiet, **generate_kwargs)
        text = "".join(t + "\n" for t in translations)
        if args.alignments is not None:
            from ..evaluation.guided_word_alignments import guided_word_alignments

            links = guided_word_alignments(translator.model, translator.tokenizer, lines, translations, args.batch_size)
            try:
                write_text_atomic(args.alignments, "".join(line + "\n" for line in links))
            except OSError as error:
                return user_error(PROG, f"--alignments {error}")
        if args.output == "-":
            sys.stdout.write(text)
            sys.stdout.flush()
            return 0
        try:
            write_text_atomic(args.output, text)  # a full disk: one line, the partial file removed
        except OSError as error:
            return user_error(PROG, f"--output {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
