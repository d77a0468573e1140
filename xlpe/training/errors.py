"""The one exception type of a user error in `xlpe-train` (a bad argument, argument combination or input file),
raised anywhere in the training layer: the command prints its message as one line and exits 2, no traceback."""

from __future__ import annotations


class UsageError(ValueError):
    """A bad argument, argument combination or input found before or during setup: `xlpe-train` prints one line,
    exits 2. A ValueError, so library callers can catch either."""


__all__ = ["UsageError"]
