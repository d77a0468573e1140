"""Language codes given on the command line or to the library, checked against a maintained list.

A code (`--source_lang fr`, `xlpe-evaluate --lang en`, `xlpe-push --language de en`) picks tokenisers, BLEU tokenizers,
taggers and the Hub's language tags, so a name where a code belongs (`french`) or a typo (`ffr`) must be refused before
any work, not silently turned into a wrong choice. Validity is the IANA language subtag registry's (BCP 47: ISO
639-1/-2/-3 codes with optional script and region, `en`, `fra`, `zh-Hans`, `pt-BR`; `en_US` too, as dataset keys spell
it), as the `langcodes` package keeps it; the suggestion comes from language names (`french` -> `fr`, with the
`language_data` tables) or, for a mistyped code, from the closest two-letter ISO 639-1 codes.

This module imports only the standard library at module level (`langcodes` is light), so the command-line tools
can check codes before loading torch.
"""

from __future__ import annotations

import difflib


def suggest_language_code(value: str) -> str | None:
    """The code a user most likely meant by `value` (a language name or a mistyped code), or None."""
    import langcodes

    try:  # a language name in English or in the language itself: "french", "Deutsch"
        found = langcodes.find(value)
    except (LookupError, ValueError):
        found = None
    if found is not None:
        return found.to_tag()
    from langcodes.data_dicts import LANGUAGE_ALPHA3  # two-letter ISO 639-1 code -> three-letter code

    close = difflib.get_close_matches(value.lower(), sorted(LANGUAGE_ALPHA3), n=1, cutoff=0.5)
    return close[0] if close else None


def is_language_code(value: str) -> bool:
    """Whether `value` is a valid BCP 47 language tag (IANA registry, via `langcodes`)."""
    import langcodes

    return bool(value) and langcodes.tag_is_valid(value)


def check_language_code(value: str | None, argument: str) -> str | None:
    """`value` unchanged when it is None or a valid language code; otherwise a ValueError naming `argument`,
    what was expected and what was given, with a "did you mean" when there is a likely code."""
    if value is None or is_language_code(value):
        return value
    suggestion = suggest_language_code(value)
    hint = f"; did you mean {suggestion!r}?" if suggestion and suggestion != value else ""
    raise ValueError(
        f"{argument} {value!r} is not a language code: expected a BCP 47 / ISO 639 code such as 'en', "
        f"'fr', 'de' or 'zh-Hans'{hint}"
    )


__all__ = ["check_language_code", "is_language_code", "suggest_language_code"]
