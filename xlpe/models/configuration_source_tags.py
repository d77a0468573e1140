"""Config fields of the source POS-tag encoding every Marian-based family takes (XL PE + POS, DPE + POS, stacked
on the family; the module is source_tags.py): one declaration, mixed into each family's config.

Tags on the Marian families are *added* to the scaled token embeddings as a learned d_model-wide table,
X = E[w] * scale + T[tag] * scale, before any position signal. The mvPE+POS paper (Eq. 11) *concatenates* a
pos_dim-wide tag encoding instead; that needs word embeddings narrower than d_model on the tagged side, which the
Marian families cannot have (one embedding table shared by encoder, decoder and output layer). An added *sinusoid*
of the tag id is not offered: it is the row of the position table at "position = tag id", so tags and positions
would be confused. Decoder-side tags stay with mvPE+POS (they need its hypothesis tagger at generation time).

This file travels as Hub custom code next to the configuration files: it imports only its siblings here
(no `xlpe` import).
"""

from __future__ import annotations

from dataclasses import dataclass

from .tag_sets import SPECIAL_TAG_NAMES
from .taggers import builtin_tags, incomplete_tagger_name, tagger_help


@dataclass
class SourceTagsConfigMixin:
    """Between `ValidatedConfigMixin` and the stock config in a family config's bases; the family calls
    `fill_source_tag_defaults()` in `__post_init__` and `validate_source_tags()` from `validate_family_fields`."""

    pos_tagger: str | None = None  # source POS tagger of raw text, a name of the registry (taggers.py); None = no tags
    pos_tags: list[str] | None = None  # source tag vocabulary, ids 3.. in order; None -> the pos_tagger's built-in set
    nltk_data: str | None = None  # extra nltk.data.path entry for the pipeline's tagger ($XLPE_NLTK_DATA also works)

    def fill_source_tag_defaults(self) -> None:
        """Derived defaults, stored (tag ids stay stable across save/load): the tagger's registered tag set."""
        tags = self.pos_tags
        if tags is not None and list(tags[: len(SPECIAL_TAG_NAMES)]) == list(SPECIAL_TAG_NAMES):
            self.pos_tags = list(tags[len(SPECIAL_TAG_NAMES) :])  # TagVocabulary.to_list() form
        if self.pos_tags is None and builtin_tags(self.pos_tagger) is not None:
            self.pos_tags = list(builtin_tags(self.pos_tagger))

    def validate_source_tags(self) -> None:
        tagger, tags = self.pos_tagger, self.pos_tags
        if tagger is None:
            if tags is not None:
                raise ValueError(
                    f"pos_tags is given ({len(tags)} tags) but pos_tagger is None: name the tagger that "
                    "produces them (e.g. pos_tagger='nltk-en'), or drop pos_tags"
                )
            return
        if not isinstance(tagger, str) or not tagger.strip():  # the pipeline's tagger: a name of the registry
            raise ValueError(f"pos_tagger must be a tagger name ({tagger_help(', ')}) or None, got {tagger!r}")
        if incomplete_tagger_name(tagger.strip()):  # a family's name without its argument: "spacy:"
            raise ValueError(incomplete_tagger_name(tagger.strip()))
        if tags is None:
            raise ValueError(f"pos_tags must be given for pos_tagger={tagger!r} (no built-in tag set)")
        if (
            not isinstance(tags, (list, tuple))
            or not tags
            or not all(isinstance(t, str) and t for t in tags)
            or len(set(tags)) != len(tags)
        ):
            raise ValueError(f"pos_tags must be a non-empty list of distinct tag strings, got {tags!r}")
        if set(tags) & set(SPECIAL_TAG_NAMES):
            raise ValueError(f"pos_tags: the reserved {SPECIAL_TAG_NAMES} may only come first, in that order")

    def uses_extra_input(self, name: str) -> bool:
        """Does this model read the per-token input `name` (extra_inputs.py)? Tags only when a tagger is set, the
        guided alignment links only with a guided alignment weight > 0."""
        if name == "alignment_links":
            return getattr(self, "guided_alignment_weight", 0.0) > 0
        return name != "pos_tag_ids" or self.pos_tagger is not None

    def num_source_tag_ids(self) -> int:
        """<pad>, <unk>, <special> and the source tags (0 without tags)."""
        return len(SPECIAL_TAG_NAMES) + len(self.pos_tags) if self.pos_tagger is not None else 0


__all__ = ["SourceTagsConfigMixin"]
