"""Part-of-speech tag sets and the tag-id convention (mvPE+POS, Sec. IV), defined once.

Imported by the tagger registry (`taggers.py`, which says which tagger has which set), `tagging.py` (feature
preparation), the configurations and `pos_tagging_hub.py` (which travel as Hub custom code: this file imports
nothing at module level, so it travels with them).

Tag ids: 0 pads, 1 is any tag outside the vocabulary (counted where it happens), 2 marks special tokens
(</s>, <s>, the decoder start), then the tags of the vocabulary in order.
"""

SPECIAL_TAG_NAMES = ("<pad>", "<unk>", "<special>")
PAD_TAG, UNK_TAG, SPECIAL_TAG = SPECIAL_TAG_NAMES
PAD_TAG_ID, UNK_TAG_ID, SPECIAL_TAG_ID = 0, 1, 2

# The 45 classes of NLTK's English averaged-perceptron tagger (Penn Treebank tags incl. punctuation), in its order.
PTB_TAGS = (
    "#",
    "$",
    "''",
    "(",
    ")",
    ",",
    ".",
    ":",
    "CC",
    "CD",
    "DT",
    "EX",
    "FW",
    "IN",
    "JJ",
    "JJR",
    "JJS",
    "LS",
    "MD",
    "NN",
    "NNP",
    "NNPS",
    "NNS",
    "PDT",
    "POS",
    "PRP",
    "PRP$",
    "RB",
    "RBR",
    "RBS",
    "RP",
    "SYM",
    "TO",
    "UH",
    "VB",
    "VBD",
    "VBG",
    "VBN",
    "VBP",
    "VBZ",
    "WDT",
    "WP",
    "WP$",
    "WRB",
    "``",
)

# jieba's part-of-speech tags (ICTCLAS-style): those of its dictionary, of its HMM for unknown words, and
# "eng" (Latin-letter runs), "m" (numbers) and "x" (anything else) that jieba.posseg emits itself.
JIEBA_TAGS = (
    "a",
    "ad",
    "ag",
    "an",
    "b",
    "bg",
    "c",
    "d",
    "df",
    "dg",
    "e",
    "en",
    "eng",
    "f",
    "g",
    "h",
    "i",
    "in",
    "j",
    "jn",
    "k",
    "l",
    "ln",
    "m",
    "mg",
    "mq",
    "n",
    "ng",
    "nr",
    "nrfg",
    "nrt",
    "ns",
    "nt",
    "nz",
    "o",
    "p",
    "q",
    "qe",
    "qg",
    "r",
    "rg",
    "rr",
    "rz",
    "s",
    "t",
    "tg",
    "u",
    "ud",
    "ug",
    "uj",
    "ul",
    "uv",
    "uz",
    "v",
    "vd",
    "vg",
    "vi",
    "vn",
    "vq",
    "w",
    "x",
    "y",
    "yg",
    "z",
    "zg",
)


def __getattr__(name: str):
    """`BUILT_IN_TAGS` (tagger name -> tag set) is gone: the tagger registry holds each tagger's tag set
    (taggers.builtin_tags, taggers.registered_taggers). A read gives the registry's sets, with a warning."""
    if name == "BUILT_IN_TAGS":
        import warnings

        from .taggers import registered_taggers

        warnings.warn(
            "tag_sets.BUILT_IN_TAGS is deprecated: use taggers.builtin_tags(name) (the tagger registry)",
            DeprecationWarning,
            stacklevel=2,
        )
        return {entry.name: entry.tags for entry in registered_taggers() if entry.tags is not None}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
