"""transformers' own common model-test utilities, vendored per tested release (see README.md).

`modeling_common()` returns the `test_modeling_common` module of the installed transformers release: the testers
in tests/models/ run the upstream tests *of the version they run against*. A release without a vendored copy
skips those tests with a reason that says which copies exist (vendor one to test it: README.md)."""

from __future__ import annotations

import importlib

VENDORED_RELEASES = ("5.23.0", "5.24.0")  # one test_modeling_common_<release>.py each


def modeling_common():
    import pytest
    import transformers

    release = transformers.__version__
    if release not in VENDORED_RELEASES:
        pytest.skip(
            f"no transformers {release} copy of upstream's test_modeling_common.py is vendored (have: "
            f"{', '.join(VENDORED_RELEASES)}; tests/transformers_testing/README.md says how to add one)",
            allow_module_level=True,
        )
    return importlib.import_module(f".test_modeling_common_{release.replace('.', '_')}", __name__)
