"""`xlpe-export`: a trained model -> ONNX graphs, tokenizer and manifest for serving without PyTorch's generate
(`xlpe.export`; docs/deployment.md).

    xlpe-export --model runs/demo --output runs/demo-onnx --quantize int8     # export (fp32 + int8 copies)
    xlpe-export --model runs/demo --output runs/demo-onnx --quantize int8 --int8_scheme tensor   # other int8 settings
    xlpe-export --verify runs/demo-onnx --model runs/demo                      # check an export against its model
    xlpe-export --translate runs/demo-onnx --input test.en --num_beams 4        # raw text in, translations out
    xlpe-export --model opus-mt-de-en --output de-en-ct2 --format ctranslate2 --quantize int8   # stock Marian only

`--format ctranslate2` converts a stock MarianMT model (an OPUS-MT checkpoint, `--model_type vanilla`) with
CTranslate2's own converter (`xlpe.export.ctranslate2_export`); `--verify` and `--translate` recognise such an
export by its `ctranslate2_manifest.json`. Every xlpe family needs the ONNX export (one line says so).

Export refuses, in one line with exit status 2, a model it cannot handle (another model type, a standalone
reorderer, a search option the exported search does not reproduce), a `--model` that does not exist, an existing
`--output` without `--overwrite_output`, and (even with it) an `--output` that is, holds or lies inside `--model`
or holds anything but an earlier export (`xlpe.features.outputs`). `--verify` checks the export as a whole: the
manifest's seal, every file it lists (graphs, tokenizer files, config, generation config, reorderer, tagger) and
that it lists every file there, the tokenizer; with `--model`, it also writes what that model would export now and
names the first file that differs (and what differs in it), then the graph layout, configuration and weights. A
difference is one line, exit status 2, as every refusal of this command.

Each mode takes its own flags (`MODE_FLAGS`, docs/command_line.md); a flag of another mode is a usage error naming
the flag and the mode, not silently ignored. Without onnx/onnxruntime: one line naming `pip install "xlpe[onnx]"`
(`--translate` of an ONNX export needs onnxruntime, tokenizers and numpy alone: no torch, no transformers, except
the one front end `xlpe.export.runtime.NEEDS_TORCH` names; docs/deployment.md, "Serving without PyTorch").
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

from ..export.ctranslate2_export import is_ctranslate2_export
from . import (
    CommandLineError,
    canonical_flags,
    check_input_file,
    check_model_path,
    console_script,
    user_error,
)

PROG = "xlpe-export"
INT8_SCHEME_NAMES = (
    "tensor",
    "tensor-nogather",
    "channel",
    "channel-reduce",
    "channel-nogather",
    "channel-all",
)  # exporter.INT8_SCHEMES
MODES = {"output": "export (--output)", "verify": "--verify", "translate": "--translate"}  # the mode flags
# mode -> the flags it takes (every other option of the parser belongs to one mode at least: tested), and the
# defaults of those given None in the parser so that an explicit flag can be told from its default
MODE_FLAGS = {
    "output": ("--model", "--format", "--quantize", "--int8_scheme", "--opset", "--overwrite_output"),
    "verify": ("--model",),
    "translate": ("--input", "--precision", "--num_beams", "--batch_size", "--threads", "--streams"),
}
DEFAULTS = {
    "format": "onnx",
    "opset": 17,
    "overwrite_output": False,
    "input": "-",
    "precision": "fp32",
    "batch_size": 32,
}
ONNX_PACKAGES = ("onnx", "onnxruntime")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--output", help="export: the directory to write")
    mode.add_argument("--verify", metavar="EXPORT_DIR", help="check an export directory (against --model when given)")
    mode.add_argument("--translate", metavar="EXPORT_DIR", help="translate --input with an export directory")
    parser.add_argument("--model", help="the trained model directory (export: required; --verify: optional)")
    parser.add_argument(
        "--format",
        choices=["onnx", "ctranslate2"],
        default=None,
        help="export: ONNX graphs for every family (default), or CTranslate2 for a stock MarianMT model",
    )
    parser.add_argument(
        "--quantize",
        choices=["int8"],
        default=None,
        help="also write dynamic int8 copies of the graphs (ctranslate2: int8 weights instead of fp32)",
    )
    parser.add_argument(
        "--int8_scheme",
        default=None,
        metavar="SCHEME",
        help="with --quantize int8: the quantization settings, one of "
        + ", ".join(INT8_SCHEME_NAMES)
        + " (default channel-all: per-channel weight scales, the output projection int8 too; docs/deployment.md)",
    )
    parser.add_argument("--opset", type=int, default=None, help="export: ONNX opset (default 17)")
    parser.add_argument(
        "--overwrite_output", action="store_true", default=None, help="export: replace an existing --output directory"
    )
    parser.add_argument("--input", default=None, help="--translate: UTF-8 text, one sentence per line ('-' = stdin)")
    parser.add_argument("--precision", choices=["fp32", "int8"], default=None, help="--translate: which graphs")
    parser.add_argument("--num_beams", type=int, default=None, help="--translate: beam size (default: the model's)")
    parser.add_argument("--batch_size", type=int, default=None, help="--translate: sentences per batch (default 32)")
    parser.add_argument(
        "--threads", type=int, default=None, help="--translate: onnxruntime threads (default: all cores)"
    )
    parser.add_argument(
        "--streams",
        type=int,
        default=None,
        help="--translate: batches decoded at once, sharing --threads out (default: one per thread, at most one "
        "per batch; 1: one batch at a time with every thread)",
    )
    return canonical_flags(parser)


def translate(args) -> int:
    """`--translate`: the lines of `--input` through `OnnxTranslator` (or `CTranslate2Translator`) in length-sorted
    batches, `--streams` of them at once (xlpe/export/streams.py); one warning each for lines longer than the
    model's limit and translations that reached their length budget, as `xlpe-translate` words them
    (`translate.limit_warnings`)."""
    from ..export.ctranslate2_export import CTranslate2Translator, is_ctranslate2_export
    from ..export.streams import auto_streams, translate_batches
    from ..training.host_memory import keep_freed_host_memory
    from .translate import length_sorted_batches, limit_warnings, read_input

    # a decoding step allocates the same [rows, heads, length, dim] cache arrays every step: kept freed memory
    # spares their page faults (int8 OPUS-MT size: ~15 % faster, docs/benchmarks/onnx.md)
    keep_freed_host_memory()
    ctranslate2 = is_ctranslate2_export(args.translate)
    if ctranslate2 and args.precision != "fp32":
        raise CommandLineError("--precision applies to ONNX exports: a CTranslate2 export holds one precision")
    lines = read_input(args.input)
    words = [" ".join(line.split()) for line in lines]
    batches = list(length_sorted_batches(words, args.batch_size))
    streams = args.streams or auto_streams(args.threads, len(batches))
    if ctranslate2:
        translator = CTranslate2Translator(args.translate, threads=args.threads, streams=streams)
    else:
        from ..export.runtime import OnnxTranslator

        translator = OnnxTranslator(args.translate, precision=args.precision, threads=args.threads, streams=streams)
    output = [""] * len(lines)
    kwargs = {"num_beams": args.num_beams} if args.num_beams else {}
    too_long, at_limit = [], []
    reports = translate_batches(translator, [[words[i] for i in batch] for batch in batches], **kwargs)
    for batch, (texts, cut, ended) in zip(batches, reports):
        for index, text in zip(batch, texts):
            output[index] = text
        too_long += [batch[i] + 1 for i in cut]
        at_limit += [batch[i] + 1 for i in ended]
    total = sum(1 for w in words if w)
    for warning in limit_warnings(PROG, translator.source_limit(), sorted(too_long), sorted(at_limit), total):
        print(warning, file=sys.stderr)
    sys.stdout.write("".join(text + "\n" for text in output))
    return 0


def verify_ctranslate2_export(args) -> int:
    """`--verify` of a CTranslate2 export: with `--model`, its translations of probe sentences against the PyTorch
    model's, token for token (fp32; int8: the identical share is reported)."""
    from ..export.ctranslate2_export import CTranslate2Translator, verify_ctranslate2

    if args.model is None:
        translator = CTranslate2Translator(args.verify)
        print(f"{args.verify}: a CTranslate2 {translator.manifest['ctranslate2']} export that loads and translates")
        return 0
    same = verify_ctranslate2(args.verify, args.model)
    shares = ", ".join(f"{beams}-beam {100 * share:.0f} %" for beams, share in same.items())
    print(f"{args.verify}: probe sentences translated as {args.model} translates them ({shares} identical)")
    return 0


def check_mode_flags(args) -> None:
    """CommandLineError naming the first flag given that does not apply to the chosen mode (`MODE_FLAGS`); then
    fills in the defaults (`DEFAULTS`)."""
    mode = next(name for name in MODES if getattr(args, name) is not None)
    for flag in sorted({f for flags in MODE_FLAGS.values() for f in flags} - set(MODE_FLAGS[mode])):
        if getattr(args, flag[2:]) is not None:
            modes = " or ".join(MODES[other] for other in MODES if flag in MODE_FLAGS[other])
            raise CommandLineError(f"{flag} does not apply to {MODES[mode]}: it is a flag of {modes}")
    for name, value in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def missing_onnx(packages: tuple[str, ...] = ONNX_PACKAGES) -> str | None:
    """The first of `packages` (onnx, onnxruntime) that cannot be imported, or None."""
    for name in packages:
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except (ImportError, ValueError):
            return name
    return None


@console_script(PROG)
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_mode_flags(args)
    except CommandLineError as error:
        return user_error(PROG, error)
    for flag, value in (
        ("--num_beams", args.num_beams),
        ("--batch_size", args.batch_size),
        ("--threads", args.threads),
        ("--streams", args.streams),
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
        ctranslate2 = args.format == "ctranslate2" or any(
            path is not None and is_ctranslate2_export(path) for path in (args.verify, args.translate)
        )
        if args.format == "ctranslate2" and args.int8_scheme is not None:
            raise CommandLineError("--int8_scheme applies to ONNX exports (CTranslate2 quantizes its own way)")
        # translating needs onnxruntime alone (docs/deployment.md, "Serving without PyTorch"); exporting needs onnx too
        missing = None if ctranslate2 else missing_onnx(("onnxruntime",) if args.translate else ONNX_PACKAGES)
        if missing is not None:
            needs = "onnxruntime" if args.translate else "onnx and onnxruntime"
            raise CommandLineError(f'{missing} is not installed: xlpe-export needs {needs}: pip install "xlpe[onnx]"')
        if args.model is not None:
            check_model_path(args.model, "--model")
        for flag in ("verify", "translate"):
            path = getattr(args, flag)
            if path is not None:
                check_model_path(path, f"--{flag}")
        from ..features.tokenizer_files import check_tokenizer_files  # a cut-short tokenizer.json: file and line

        for flag in ("model", "verify", "translate"):
            if getattr(args, flag) is not None:
                check_tokenizer_files(getattr(args, flag), f"--{flag} {getattr(args, flag)}")
        if args.translate is not None:
            check_input_file(args.input, "--input")
            return translate(args)
        if args.verify is not None and is_ctranslate2_export(args.verify):
            return verify_ctranslate2_export(args)
        if args.verify is not None:
            from ..export.exporter import verify_export

            manifest = verify_export(args.verify, args.model)
            against = f", and are what {args.model} exports now" if args.model else ""
            graphs = len(manifest["graphs"]) + len(manifest.get("int8_graphs") or {})
            print(
                f"{args.verify}: the manifest, its {graphs} graphs, {len(manifest['files'])} other files (tokenizer, "
                f"config, generation config, front end) and the tokenizer match{against}"
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
        if args.format == "ctranslate2":
            from ..export.ctranslate2_export import export_ctranslate2

            manifest = export_ctranslate2(args.model, args.output, args.quantize, args.overwrite_output)
            print(
                f"{args.output}: CTranslate2 {manifest['ctranslate2']} model ({manifest['quantization']}) + tokenizer "
                "and ctranslate2_manifest.json"
            )
            return 0
        scheme = {"int8_scheme": args.int8_scheme} if args.int8_scheme else {}
        manifest = export_directory(args.model, args.output, args.quantize, args.opset, args.overwrite_output, **scheme)
    except (CommandLineError, ValueError, OSError) as error:
        return user_error(PROG, error)
    files = [*manifest["graphs"], *(manifest.get("int8_graphs") or {})]
    print(f"{args.output}: {', '.join(files)} (opset {args.opset}) + tokenizer and export_manifest.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
