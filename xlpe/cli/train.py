"""`xlpe-train`: the console script (the run itself is `xlpe.training.run.main`). A user error found before
any work prints one line and exits 2; a finished multi-process run tears its process group down cleanly."""

from __future__ import annotations

import sys

from ..training.arguments import UsageError, parse_arguments  # noqa: F401  (old `xlpe.train` names)
from ..training.run import main


def cli() -> int:
    """The `xlpe-train` command: `main` returns its metrics (for Python callers); a command exits 0 on success."""
    try:
        main()
    except UsageError as error:  # a user error found before any work: one line, no traceback
        print(f"xlpe-train: error: {error}", file=sys.stderr)
        return 2
    finish_distributed()
    return 0


def finish_distributed() -> None:
    """Join the ranks and destroy the process group before the interpreter exits. Left to static destructors,
    gloo's worker threads can abort a rank *after* a successful run ("terminate called without an active
    exception", SIGABRT), and `accelerate launch` then reports the whole job as failed."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(cli())
