# Stand-in for transformers' tests/generation/test_utils.py (see ../README.md: not obtainable at v5.23.0 here).
"""Import shim: `test_modeling_common.py` imports `GenerationTesterMixin` from here and uses it only in
`test_inherits_generation_mixin` (does the tester inherit it?). The generation checks this project runs instead
are in `tests/models/test_transformers_common.py` (`GenerationChecks`)."""


class GenerationTesterMixin:
    """Marker base class (the upstream mixin's tests are not vendored, see ../README.md)."""

    model_tester = None
    all_generative_model_classes = ()
