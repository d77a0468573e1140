"""Part-of-speech tag sets and the tag-id convention (mvPE+POS, Sec. IV), defined once.

Imported by `tagging.py` (feature preparation), `configuration_mvpe_pos.py` and `pos_tagging_hub.py` (which
travel as Hub custom code: this file has no imports, so it travels with them).

Tag ids: 0 pads, 1 is any tag outside the vocabulary (counted where it happens), 2 marks special tokens
(</s>, <s>, the decoder start), then the tags of the vocabulary in order.
"""

SPECIAL_TAG_NAMES = ("<pad>", "<unk>", "<special>")
PAD_TAG, UNK_TAG, SPECIAL_TAG = SPECIAL_TAG_NAMES
PAD_TAG_ID, UNK_TAG_ID, SPECIAL_TAG_ID = 0, 1, 2

# The 45 classes of NLTK's English averaged-perceptron tagger (Penn Treebank tags incl. punctuation), in its order.
PTB_TAGS = (
    "#", "$", "''", "(", ")", ",", ".", ":", "CC", "CD", "DT", "EX", "FW", "IN", "JJ", "JJR", "JJS", "LS", "MD",
    "NN", "NNP", "NNPS", "NNS", "PDT", "POS", "PRP", "PRP$", "RB", "RBR", "RBS", "RP", "SYM", "TO", "UH", "VB",
    "VBD", "VBG", "VBN", "VBP", "VBZ", "WDT", "WP", "WP$", "WRB", "``",
)  # fmt: skip

# jieba's part-of-speech tags (ICTCLAS-style): those of its dictionary, of its HMM for unknown words, and
# "eng" (Latin-letter runs), "m" (numbers) and "x" (anything else) that jieba.posseg emits itself.
JIEBA_TAGS = (
    "a", "ad", "ag", "an", "b", "bg", "c", "d", "df", "dg", "e", "en", "eng", "f", "g", "h", "i", "in", "j", "jn",
    "k", "l", "ln", "m", "mg", "mq", "n", "ng", "nr", "nrfg", "nrt", "ns", "nt", "nz", "o", "p", "q", "qe", "qg",
    "r", "rg", "rr", "rz", "s", "t", "tg", "u", "ud", "ug", "uj", "ul", "uv", "uz", "v", "vd", "vg", "vi", "vn",
    "vq", "w", "x", "y", "yg", "z", "zg",
)  # fmt: skip

BUILT_IN_TAGS = {"nltk-en": PTB_TAGS, "jieba-zh": JIEBA_TAGS}  # a config's pos_tags=None -> the set of its pos_tagger
