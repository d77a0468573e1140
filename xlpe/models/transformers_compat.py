"""What differs between the transformers releases xlpe accepts, in one place (README, "Compatibility").

The decoder cache's name. transformers 5.24 renamed the argument and output field `past_key_values` to `cache`
in every model, layer and attention module (the old name is a deprecated alias there; generation passes and reads
only `cache`); 5.23 and earlier use `past_key_values` throughout. A family's `forward` therefore takes both
names (`past_key_values`, `cache`: the same object under either name, never two different ones), works with one
internal value, and hands it on under the name of the installed release:

* `CACHE_ARGUMENT`: the keyword the installed stock modules (MarianDecoder, Bart/Marian layers and attention)
  take; read off their signatures, not off a version number.
* `CACHE_FIELD`: the name of the cache field of transformers' model outputs (`Seq2SeqLMOutput` ...).
* `take_cache(past_key_values, cache)`: the one cache a caller gave, under either name.
* `cache_kwargs(cache)`: `{CACHE_ARGUMENT: cache}`, to call a stock module.
* `@renamed_cache_argument`: on a family's `forward`, what stock models do under the installed release: from
  5.24 on, transformers' own `deprecate_kwarg` (`past_key_values=` still works, with its FutureWarning); before
  5.24, nothing.

The accepted releases, for the remote code. `ACCEPTED_TRANSFORMERS` (lowest, highest) is setup.cfg's range (a test
keeps the two equal); importing this file, which every family's modeling file does, warns in one line when the
installed transformers is outside it and the xlpe package has not checked already: a saved model loaded with
`trust_remote_code=True` where xlpe is not installed says so too (`import xlpe` says it for the package).

Flat file, imports only transformers (and packaging, one of its dependencies): it travels as Hub custom code with
the modeling files.
"""

from __future__ import annotations

import inspect
import sys
import warnings

import transformers
from transformers.modeling_outputs import Seq2SeqLMOutput
from transformers.models.marian.modeling_marian import MarianDecoder

CACHE_ARGUMENT = "cache" if "cache" in inspect.signature(MarianDecoder.forward).parameters else "past_key_values"
CACHE_FIELD = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"
CACHE_NAMES = ("past_key_values", "cache")  # every name a caller may use, whatever the installed release

ACCEPTED_TRANSFORMERS = (
    "5.23.0",
    "5.24.0",
)  # = setup.cfg's transformers>=5.23.0,<=5.24.0 (tests/test_compatibility.py)


def untested_transformers_release(installed: str | None = None) -> str | None:
    """One line when `installed` (default: the installed transformers) is outside `ACCEPTED_TRANSFORMERS`, else None."""
    from importlib import metadata

    from packaging.specifiers import SpecifierSet

    if installed is None:
        try:
            installed = metadata.version("transformers")
        except metadata.PackageNotFoundError:  # (a source tree on sys.path)
            installed = transformers.__version__
    low, high = ACCEPTED_TRANSFORMERS
    if SpecifierSet(f">={low},<={high}").contains(installed, prereleases=True):
        return None
    return (
        f"these xlpe model files are tested with transformers>={low},<={high} but {installed} is installed: results "
        f'may differ silently; pip install "transformers>={low},<={high}"'
    )


def _warn_untested_release() -> None:
    """The one-line warning, unless the xlpe package already checked (`import xlpe` warns for itself)."""
    if getattr(sys.modules.get("xlpe"), "_checked_release", False):
        return
    message = untested_transformers_release()
    if message:
        warnings.warn(message, UserWarning, stacklevel=3)


_warn_untested_release()


if CACHE_ARGUMENT == "cache":
    from transformers.utils.deprecation import deprecate_kwarg

    renamed_cache_argument = deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")  # as stock 5.24 models
else:

    def renamed_cache_argument(function):
        return function


def take_cache(past_key_values=None, cache=None):
    """The decoder cache given as `past_key_values` (transformers <= 5.23) or `cache` (>= 5.24), or None."""
    if past_key_values is not None and cache is not None and past_key_values is not cache:
        raise ValueError("pass the decoder cache once, as `cache` or as `past_key_values`, not two different caches")
    return cache if cache is not None else past_key_values


def cache_kwargs(cache) -> dict:
    """The keyword argument that passes `cache` to a stock transformers module of the installed release."""
    return {CACHE_ARGUMENT: cache}


def output_cache(outputs):
    """The cache field of a transformers model output, under the installed release's name."""
    return getattr(outputs, CACHE_FIELD, None)


__all__ = [
    "ACCEPTED_TRANSFORMERS",
    "CACHE_ARGUMENT",
    "CACHE_FIELD",
    "CACHE_NAMES",
    "cache_kwargs",
    "output_cache",
    "renamed_cache_argument",
    "take_cache",
    "untested_transformers_release",
]
