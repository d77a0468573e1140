"""`xlpe-export`: a trained model -> ONNX graphs, tokenizer and manifest for serving without PyTorch's generate
(`xlpe.export`; docs/deployment.md).

    xlpe-export --model runs/demo --output runs/demo-onnx --quantize int8     # export (fp32 + int8 copies)
    xlpe-export --model runs/demo --output runs/demo-onnx --quantize int8 --int8_scheme tensor   # other int8 settings
    xlpe-export --verify runs/demo-onnx --model runs/demo                      # check an export against its model
    xlpe-export --translate runs/demo-onnx --input test.en --num_beams 4        # raw text in, translations out

Export refuses, in one line with exit status 2, a model it cannot handle (another model type, a standalone
reorderer, a search option the exported search does not reproduce), a `--model` that does not exist, an existing
`--output` without `--overwrite_output`, and (even with it) an `--output` that is, holds or lies inside `--model`
or holds anything but an earlier export (`xlpe.features.outputs`). `--verify` checks the graph files and tokenizer
against the export's manifest and, with `--model`, that the model's configuration and weights are the exported ones.
"""

from __future__ import annotations

import argparse
import sys

from . import (
    CommandLineError,
    canonical_flags,
    check_input_file,
    check_model_path,
    user_error,
)

PROG = "xlpe-export"
INT8_SCHEME_NAMES = (
    "tensor",
    "tensor-nogather",
    "channel",
    "channel-reduce",
    "channel-nogather",
)  # exporter.INT8_SCHEMES


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--output", help="export: the directory to write")
    mode.add_argument("--verify", metavar="EXPORT_DIR", help="check an export directory (against --model when given)")
    mode.add_argument("--translate", metavar="EXPORT_DIR", help="translate --input with an export directory")
    parser.add_argument("--model", help="the trained model directory (export: required; --verify: optional)")
    parser.add_argument(
        "--quantize", choices=["int8"], default=None, help="also write dynamic int8 copies of the graphs"
    )
    parser.add_argument(
        "--int8_scheme",
        default=None,
        metavar="SCHEME",
        help="with --quantize int8: the quantization settings, one of "
        + ", ".join(INT8_SCHEME_NAMES)
        + " (default channel: per-channel weight scales; docs/deployment.md)",
    )
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset (default 17)")
    parser.add_argument("--overwrite_output", action="store_true", help="replace an existing --output directory")
    parser.add_argument("--input", default="-", help="--translate: UTF-8 text, one sentence per line ('-' = stdin)")
    parser.add_argument("--precision", choices=["fp32", "int8"], default="fp32", help="--translate: which graphs")
    parser.add_argument("--num_beams", type=int, default=None, help="--translate: beam size (default: the model's)")
    parser.add_argument("--batch_size", type=int, default=32, help="--translate: sentences per batch (default 32)")
    parser.add_argument(
        "--threads", type=int, default=None, help="--translate: onnxruntime threads (default: all cores)"
    )
    return canonical_flags(parser)


def translate(args) -> int:
    """`--translate`: the lines of `--input` through `OnnxTranslator` in length-sorted batches; one warning each
    for lines longer than the model's limit and translations that reached their length budget, as
    `xlpe-translate` words them (`translate.limit_warnings`)."""
    from ..export.runtime import OnnxTranslator
    from .translate import length_sorted_batches, limit_warnings, read_input

    translator = OnnxTranslator(args.translate, precision=args.precision, threads=args.threads)
    lines = read_input(args.input)
    words = [" ".join(line.split()) for line in lines]
    output = [""] * len(lines)
    kwargs = {"num_beams": args.num_beams} if args.num_beams else {}
    too_long, at_limit = [], []
    for batch in length_sorted_batches(words, args.batch_size):
        texts, cut, ended = translator.translate_with_report([words[i] for i in batch], **kwargs)
        for index, text in zip(batch, texts):
            output[index] = text
        too_long += [batch[i] + 1 for i in cut]
        at_limit += [batch[i] + 1 for i in ended]
    total = sum(1 for w in words if w)
    for warning in limit_warnings(PROG, translator.source_limit(), sorted(too_long), sorted(at_limit), total):
        print(warning, file=sys.stderr)
    sys.stdout.write("".join(text + "\n" for text in output))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for flag, value in (
        ("--num_beams", args.num_beams),
        ("--batch_size", args.batch_size),
        ("--threads", args.threads),
    ):
        if value is not None and value < 1:
            return user_error(PROG, f"{flag} must be >= 1, got {value}")
    try:
        if args.output is not None and args.model is None:
            raise CommandLineError("--output needs --model (the trained model directory to export)")
        if args.int8_scheme is not None:
            if args.quantize is None:
                raise CommandLineError("--int8_scheme needs --quantize int8")
            if args.int8_scheme not in INT8_SCHEME_NAMES:
                raise CommandLineError(
                    f"--int8_scheme must be one of {', '.join(INT8_SCHEME_NAMES)}, got {args.int8_scheme!r}"
                )
        if args.model is not None:
            check_model_path(args.model, "--model")
        for flag in ("verify", "translate"):
            path = getattr(args, flag)
            if path is not None:
                check_model_path(path, f"--{flag}")
        if args.translate is not None:
            check_input_file(args.input, "--input")
            return translate(args)
        if args.verify is not None:
            from ..export.manifest import verify_export

            manifest = verify_export(args.verify, args.model)
            against = f" and matches {args.model}" if args.model else ""
            print(
                f"{args.verify}: {len(manifest['graphs']) + len(manifest.get('int8_graphs') or {})} graphs and the "
                f"tokenizer match the manifest{against}"
            )
            return 0
        from ..export.exporter import export_directory
        from ..features.outputs import check_destination

        # never over --model (or a folder holding it), never over anything but an earlier export
        check_destination(
            args.output,
            "--output",
            {"--model": args.model},
            overwrite=args.overwrite_output,
            kind="dir",
            owns=("export",),
        )
        scheme = {"int8_scheme": args.int8_scheme} if args.int8_scheme else {}
        manifest = export_directory(args.model, args.output, args.quantize, args.opset, args.overwrite_output, **scheme)
    except (CommandLineError, ValueError, OSError) as error:
        return user_error(PROG, error)
    files = [*manifest["graphs"], *(manifest.get("int8_graphs") or {})]
    print(f"{args.output}: {', '.join(files)} (opset {args.opset}) + tokenizer and export_manifest.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
