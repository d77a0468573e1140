"""`xlpe-demo`: a one-minute, offline, end-to-end look at XL PE on a built-in toy task (reversal "language");
`xlpe.training.demo` does the work."""

from __future__ import annotations

import argparse
import sys

from . import canonical_flags, console_script

DESCRIPTION = """A one-minute, offline, end-to-end look at XL PE on a built-in toy task: a tiny XL PE model learns to
translate into a "language" that reverses word order, and translates a few sentences it never saw."""


@console_script("xlpe-demo")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="xlpe-demo", description=DESCRIPTION)
    parser.add_argument("--steps", type=int, default=300, help="training steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num_beams", type=int, default=4)
    args = canonical_flags(parser).parse_args(argv)
    if args.steps < 1 or args.num_beams < 1:
        parser.error(f"--steps and --num_beams must be >= 1, got {args.steps} and {args.num_beams}")
    from ..training.demo import (
        run_demo,  # torch and transformers: after the arguments are parsed
    )

    run_demo(args.steps, args.seed, args.num_beams)
    return 0


if __name__ == "__main__":
    sys.exit(main())
