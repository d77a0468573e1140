"""`xlpe-demo`: a one-minute, offline, end-to-end look at XL PE on a built-in toy task (reversal "language");
`xlpe.training.demo` does the work."""

from __future__ import annotations

import argparse
import sys

from ..training.demo import run_demo


def main(argv: list[str] | None = None) -> int:
    from ..training import demo

    parser = argparse.ArgumentParser(prog="xlpe-demo", description=demo.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="training steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num_beams", type=int, default=4)
    args = parser.parse_args(argv)
    run_demo(args.steps, args.seed, args.num_beams)
    return 0


if __name__ == "__main__":
    sys.exit(main())
