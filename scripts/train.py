#!/usr/bin/env python
"""`xlpe-train` as a script, for `accelerate launch scripts/train.py ...` (and for a checkout without pip install).

    accelerate launch --num_processes 4 scripts/train.py --output_dir runs/ddp ...     # 4 GPUs
    accelerate launch --multi_gpu --num_processes 2 scripts/train.py --use_cpu \\
        --output_dir runs/ddp ...                                                    # 2 CPU processes

(`accelerate launch --cpu --num_processes 2` starts a single process: accelerate needs MPI for several CPU ones.)

Every argument is `xlpe-train`'s: see `xlpe-train --help` and docs/training.md.
"""

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("xlpe") is None:  # a source checkout that is not pip-installed: the package next to us
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xlpe.cli.train import cli

if __name__ == "__main__":
    sys.exit(cli())
