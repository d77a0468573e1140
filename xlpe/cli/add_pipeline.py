"""`python -m xlpe.cli.add_pipeline SOURCE DESTINATION`: a copy of a saved translation model (e.g. an OPUS-MT or
BART checkpoint made elsewhere) that `pipeline("translation", model=DESTINATION, trust_remote_code=True)` loads,
also without xlpe installed; SOURCE is left as it is. `xlpe.features.pipeline_copy` does the work.

Models xlpe saves already carry the pipeline; this is for the others. A folder that cannot carry it (no
config.json, not a sequence-to-sequence model, no tokenizer, another translation pipeline) and a DESTINATION the
output rule refuses are one line `PROG: error: ...` and exit status 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import canonical_flags, console_script, user_error

PROG = "python -m xlpe.cli.add_pipeline"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="local folder written by model.save_pretrained + tokenizer.save_pretrained")
    parser.add_argument("destination", help="folder for the copy (must not exist, unless --overwrite_output)")
    parser.add_argument(
        "--overwrite_output", action="store_true", help="replace DESTINATION when it holds a model (never SOURCE)"
    )
    return canonical_flags(parser)


@console_script(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        from ..features.pipeline_copy import copy_with_translation_pipeline

        target = copy_with_translation_pipeline(args.source, args.destination, overwrite=args.overwrite_output)
    except (ValueError, OSError) as error:
        return user_error(PROG, " ".join(str(error).split()))
    print(f'{target}: pipeline("translation", model={str(target)!r}, trust_remote_code=True) loads it')
    return 0


if __name__ == "__main__":
    sys.exit(main())
