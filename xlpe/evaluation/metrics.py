"""Translation quality: the metrics the XL PE and mvPE+POS papers report, each computed by the standard tool.

* BLEU and chrF with their sacrebleu signatures (`corpus_bleu_chrf`); sacrebleu's tokenisation warnings
  turned into one line that says what to do (`sacrebleu_advice`); the same outputs scored against shuffled
  references (`shuffled_reference_scores`: what output unrelated to its source would score);
* significance against a baseline system: sacrebleu's paired bootstrap resampling (Koehn 2004) and paired
  approximate randomization (Riezler & Maxwell 2005), `paired_significance` (XL PE Tables 1-2 mark p < 0.01);
* the mvPE+POS paper's metrics (Sec. IV, Tables III-V): cumulative BLEU-1..4, ROUGE-1/2/L F/P/R
  (`rouge-score`), output length ratio, test perplexity (`perplexity`), and a compare-mt report with word F1 by
  frequency bucket and sentence BLEU by length bucket (`compare_mt_report`, the `compare-mt` package).

Word alignment (AER, XL PE Table 3) and reordering quality (Kendall's tau, FRS) are in `alignment_quality.py`;
plots in `plots.py`; the command line in `xlpe/cli/evaluate.py` (`xlpe-evaluate`). Everything here works offline
(`evaluate.load("sacrebleu")` would need the Hub, so sacrebleu is used directly).
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that need it (perplexity), so that scoring text files
# (`xlpe-evaluate bleu`) starts in well under a second

# ---------------------------------------------------------------------------------------------------------
# Files and inputs
# ---------------------------------------------------------------------------------------------------------


def read_lines(path: str | Path) -> list[str]:
    """One sentence per line (UTF-8, .gz ok); only the line break is removed. The rules of every text reader
    (`xlpe.features.text_files`): lines end at `\\n` (CRLF too, never a bare `\\r`), a byte-order mark is dropped,
    undecodable bytes are a `TextFileError` (a ValueError) naming file, line and byte offset."""
    from ..features.text_files import read_text_lines

    return read_text_lines(path)


def _reference_streams(references: Sequence[str] | Sequence[Sequence[str]], num_hypotheses: int) -> list[list[str]]:
    """sacrebleu's layout: a list of reference streams, each with one reference per hypothesis."""
    streams = [list(references)] if references and isinstance(references[0], str) else [list(s) for s in references]
    for stream in streams:
        if len(stream) != num_hypotheses:
            raise ValueError(f"{num_hypotheses} hypotheses but a reference stream has {len(stream)} lines")
    return streams


# ---------------------------------------------------------------------------------------------------------
# BLEU and chrF with signatures
# ---------------------------------------------------------------------------------------------------------


# sacrebleu tokenizers that need packages sacrebleu does not depend on, and the xlpe extra that installs them
TOKENIZER_EXTRAS = {"ja-mecab": "ja", "ko-mecab": "ko"}


# ISO 639-2/3 codes of the languages sacrebleu has a dedicated tokenizer for -> the 639-1 code it expects
LANGUAGE_ALIASES = {"jpn": "ja", "zho": "zh", "chi": "zh", "cmn": "zh", "kor": "ko"}


def base_language(code: str | None) -> str:
    """The primary language subtag of a language code, in sacrebleu's form: "ja-JP" -> "ja", "zh_Hans" -> "zh",
    "JPN" -> "ja", "kor" -> "ko"; None -> ""."""
    primary = (code or "").strip().lower().replace("_", "-").split("-")[0]
    return LANGUAGE_ALIASES.get(primary, primary)


def bleu_tokenizer_name(target_language: str | None = None, tokenize: str | None = None) -> str:
    """The sacrebleu tokenizer BLEU uses: `tokenize` when given, else sacrebleu's own choice for the target
    language (zh -> "zh", ja -> "ja-mecab", ko -> "ko-mecab", anything else -> "13a"); regional and 3-letter
    codes count as their language (`base_language`: "ja-JP", "jpn" -> ja-mecab; "zh-Hant", "zho" -> zh)."""
    from sacrebleu.metrics import BLEU

    if tokenize is not None:
        if tokenize not in BLEU.TOKENIZERS:
            raise ValueError(f"unknown BLEU tokenizer {tokenize!r}; sacrebleu has {sorted(BLEU.TOKENIZERS)}")
        return tokenize
    return BLEU._TOKENIZER_MAP.get(base_language(target_language), BLEU.TOKENIZER_DEFAULT)


@functools.cache
def check_bleu_tokenizer(target_language: str | None = None, tokenize: str | None = None) -> str:
    """`bleu_tokenizer_name`, after making sure it runs here (its packages and data are installed); call it
    before any long work. Raises ValueError naming the tokenizer, why it was chosen, and the fix."""
    from sacrebleu.metrics import BLEU

    name = bleu_tokenizer_name(target_language, tokenize)
    try:
        BLEU(tokenize=name).corpus_score(["a b ."], [["a b ."]])  # imports the tokenizer and loads its data
    except Exception as error:  # ImportError (mecab), OSError (spm models: downloads), ...: all mean "unusable"
        why = "given" if tokenize is not None else f"sacrebleu's choice for target language {target_language!r}"
        extra = TOKENIZER_EXTRAS.get(name)
        fix = f'pip install "xlpe[{extra}]", or choose' if extra else "choose"
        raise ValueError(
            f"BLEU tokenizer {name!r} ({why}) cannot run here "
            f"({type(error).__name__}: {' '.join(str(error).split())}); "
            f"{fix} another tokenizer, e.g. 'char' or 'intl' (--bleu_tokenize)"
        ) from error
    return name


# sacrebleu's warnings about tokenisation, each said once per process as one line of ours that says what to do
_STANDARD_TOKENIZER = {"Chinese": "zh", "Japanese": "ja-mecab", "Korean": "ko-mecab"}
_advised: set[tuple] = set()  # (warning, tokenizer) already said
logger = logging.getLogger("xlpe.evaluation")


class _SacrebleuWarnings(logging.Filter):
    """Keeps sacrebleu's tokenisation warnings (records of the `sacrebleu` logger) off the console, noting which."""

    def __init__(self):
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "tokenized period" in message or "detokenize" in message or "`force` parameter" in message:
            self.seen.add("detokenize")
            return False
        language = next((n for n in _STANDARD_TOKENIZER if message.rstrip(".").endswith(f"for {n}")), None)
        if message.startswith("Consider using the '") and language:
            self.seen.add(language)
            return False
        return True


def tokenisation_advice(seen: Iterable[str], hypotheses: Sequence[str] = (), tokenizer: str | None = None) -> list:
    """Our line for each sacrebleu tokenisation warning in `seen` ("detokenize", or the language whose standard
    tokenizer was not used), for `hypotheses` scored with the BLEU `tokenizer`."""
    lines = []
    for what in sorted(seen):
        if what == "detokenize" and tokenizer != "none":  # with 'none' the tokens are scored as they are, by choice
            ending = sum(h.endswith(" .") for h in hypotheses)
            lines.append(
                f"BLEU: {ending:,} of {len(hypotheses):,} outputs end in a split-off period (' .'): the text looks "
                f"tokenised, and BLEU's {tokenizer or '13a'!r} tokenisation of tokenised text is not comparable with "
                "published scores; detokenise outputs and references (e.g. sacremoses), or score the tokens as "
                "they are with --bleu_tokenize none"
            )
        elif what in _STANDARD_TOKENIZER:
            lines.append(
                f"BLEU: {what} output scored with the {tokenizer!r} tokenizer; sacrebleu's standard for {what} is "
                f"{_STANDARD_TOKENIZER[what]!r} (leave out --bleu_tokenize to use it): scores under different "
                "tokenizers are not comparable (the signature names the tokenizer)"
            )
    return lines


@contextlib.contextmanager
def sacrebleu_advice(hypotheses: Sequence[str] = (), tokenizer: str | None = None):
    """Within it sacrebleu's tokenisation warnings are held back; after it, each is one line of ours on the
    `xlpe.evaluation` logger (`tokenisation_advice`), said once per process (a training run's evaluations
    would repeat it). Other sacrebleu messages pass unchanged."""
    sacrebleu_logger, held = logging.getLogger("sacrebleu"), _SacrebleuWarnings()
    sacrebleu_logger.addFilter(held)
    try:
        yield
    finally:
        sacrebleu_logger.removeFilter(held)
    for what in sorted(held.seen - {said for said, with_tokenizer in _advised if with_tokenizer == tokenizer}):
        _advised.add((what, tokenizer))
        for line in tokenisation_advice([what], hypotheses, tokenizer):
            logger.warning(line)


def _bleu_metric(
    target_language: str | None = None, tokenize: str | None = None, lowercase: bool = False, max_ngram_order: int = 4
):
    from sacrebleu.metrics import BLEU

    return BLEU(
        lowercase=lowercase,
        tokenize=check_bleu_tokenizer(target_language, tokenize),
        trg_lang=target_language or "",
        max_ngram_order=max_ngram_order,
    )


def _chrf_metric(lowercase: bool = False):
    from sacrebleu.metrics import CHRF

    return CHRF(lowercase=lowercase)


def bleu_chrf_signatures(
    target_language: str | None = None, tokenize: str | None = None, lowercase: bool = False, references: int = 1
) -> dict:
    """{"bleu": signature, "chrf": signature} of the metrics `corpus_bleu_chrf` would use with these settings
    and `references` reference streams (sacrebleu knows the count only after scoring: a one-line corpus is
    scored for it). For scores logged without their signature, e.g. the validation BLEU of a training run."""
    streams = [["a b ."]] * references
    with sacrebleu_advice((), check_bleu_tokenizer(target_language, tokenize)):
        bleu, chrf = _bleu_metric(target_language, tokenize, lowercase), _chrf_metric(lowercase)
        bleu.corpus_score(["a b ."], streams), chrf.corpus_score(["a b ."], streams)
    return {"bleu": bleu.get_signature().format(), "chrf": chrf.get_signature().format()}


def corpus_bleu_chrf(
    hypotheses: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    target_language: str | None = None,
    tokenize: str | None = None,
    lowercase: bool = False,
) -> dict:
    """Corpus BLEU and chrF (sacrebleu defaults: detokenized input, 13a tokenizer, exp smoothing; chrF2).

    `target_language` lets sacrebleu pick its tokenizer ("zh" -> zh, "ja" -> ja-mecab, needs mecab);
    `tokenize` overrides it. Returns {"bleu": {score, signature, precisions, bp, sys_len, ref_len},
    "chrf": {score, signature}, "sentences": N}; scores are on sacrebleu's 0-100 scale.
    """
    streams = _reference_streams(references, len(hypotheses))
    with sacrebleu_advice(hypotheses, check_bleu_tokenizer(target_language, tokenize)):
        bleu, chrf = _bleu_metric(target_language, tokenize, lowercase), _chrf_metric(lowercase)
        bleu_score = bleu.corpus_score(list(hypotheses), streams)
        chrf_score = chrf.corpus_score(list(hypotheses), streams)
    return {
        "bleu": {
            "score": bleu_score.score,
            "signature": bleu.get_signature().format(),
            "precisions": list(bleu_score.precisions),
            "bp": bleu_score.bp,
            "sys_len": bleu_score.sys_len,
            "ref_len": bleu_score.ref_len,
        },
        "chrf": {"score": chrf_score.score, "signature": chrf.get_signature().format()},
        "sentences": len(hypotheses),
    }


def derangement(n: int, seed: int = 0) -> list[int]:
    """A permutation of range(n) that moves every index (n >= 2), the same for the same `seed`: a seeded
    shuffle read as one cycle (each index goes to the next one in the shuffled order)."""
    import numpy as np

    if n < 2:
        raise ValueError(f"a derangement needs at least 2 items, got n={n}")
    order = np.random.default_rng(seed).permutation(n)
    moved = np.empty(n, dtype=np.int64)
    moved[order] = np.roll(order, -1)
    return moved.tolist()


def shuffled_reference_scores(
    hypotheses: Sequence[str],
    references: Sequence[str],
    target_language: str | None = None,
    tokenize: str | None = None,
    seed: int = 0,
) -> dict:
    """{"bleu", "chrf"} of `hypotheses` scored against `references` in a fixed deranged order (`derangement`):
    each output against the reference of another line. Output unrelated to its source scores the same as
    against the true references, so the true score minus this one is what the output owes to its source."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    order = derangement(len(references), seed)
    scores = corpus_bleu_chrf(hypotheses, [references[k] for k in order], target_language, tokenize)
    return {"bleu": scores["bleu"]["score"], "chrf": scores["chrf"]["score"]}


# ---------------------------------------------------------------------------------------------------------
# Significance against a baseline (sacrebleu.significance.PairedTest)
# ---------------------------------------------------------------------------------------------------------

SIGNIFICANCE_TESTS = {"bs": "paired bootstrap resampling", "ar": "paired approximate randomization"}


def paired_significance(
    system: Sequence[str],
    baseline: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    test: str = "bs",
    n_samples: int = 0,
    alpha: float = 0.05,
    target_language: str | None = None,
    tokenize: str | None = None,
) -> dict:
    """Is `system` significantly different from `baseline` in BLEU and chrF? (sacrebleu's paired tests)

    `test`: "bs" (paired bootstrap, sacrebleu default 1000 resamples) or "ar" (approximate randomization,
    10000 trials); `n_samples` overrides the count. The seed is sacrebleu's (env SACREBLEU_SEED, default 12345).
    One departure from sacrebleu: it counts resamples with a strictly larger difference, so two *identical*
    outputs get p = 1/(n+1) ("significant"); here an observed difference of exactly 0 gets p = 1.0.
    Returns {"test", "n_samples", "alpha", "metrics": {"BLEU": {system, baseline, delta, p_value,
    significant, signature, system_mean, system_ci}, "chrF2": {...}}}.
    """
    from sacrebleu.significance import PairedTest

    if test not in SIGNIFICANCE_TESTS:
        raise ValueError(f"test must be one of {sorted(SIGNIFICANCE_TESTS)}, got {test!r}")
    if len(system) != len(baseline):
        raise ValueError(f"system has {len(system)} lines but the baseline has {len(baseline)}")
    streams = _reference_streams(references, len(system))
    with sacrebleu_advice(system, check_bleu_tokenizer(target_language, tokenize)):
        metrics = {"BLEU": _bleu_metric(target_language, tokenize), "chrF": _chrf_metric()}
        paired = PairedTest(
            [("baseline", list(baseline)), ("system", list(system))],
            metrics,
            streams,
            test_type=test,
            n_samples=n_samples,
            n_jobs=1,
        )
        signatures, table = paired()
    results = {}
    for name, (baseline_result, system_result) in ((k, v) for k, v in table.items() if k != "System"):
        delta = float(system_result.score - baseline_result.score)
        p_value = 1.0 if delta == 0 else float(system_result.p_value)
        results[name] = {
            "system": float(system_result.score),
            "baseline": float(baseline_result.score),
            "delta": delta,
            "p_value": p_value,
            "significant": p_value < alpha,
            "signature": signatures[name].format(),
            "system_mean": None if system_result.mean is None else float(system_result.mean),
            "system_ci": None if system_result.ci is None else float(system_result.ci),  # 95% CI half-width
        }
    return {"test": SIGNIFICANCE_TESTS[test], "n_samples": paired.n_samples, "alpha": alpha, "metrics": results}


# ---------------------------------------------------------------------------------------------------------
# The mvPE+POS paper's metrics: BLEU-1..4, ROUGE-1/2/L, length ratio
# ---------------------------------------------------------------------------------------------------------


def bleu_1_to_4(
    hypotheses: Sequence[str],
    references: Sequence[str],
    target_language: str | None = None,
    tokenize: str | None = None,
) -> dict:
    """Cumulative BLEU-n for n = 1..4 (geometric mean of 1..n-gram precisions times the brevity penalty, the
    nlg-eval convention of the mvPE paper's Table III), on a 0-1 scale, with the sacrebleu signature of each."""
    streams = _reference_streams(references, len(hypotheses))
    results = {}
    with sacrebleu_advice(hypotheses, check_bleu_tokenizer(target_language, tokenize)):
        for n in range(1, 5):
            metric = _bleu_metric(target_language, tokenize, max_ngram_order=n)
            results[f"bleu-{n}"] = {
                "score": metric.corpus_score(list(hypotheses), streams).score / 100.0,
                "signature": metric.get_signature().format(),
            }
    return results


class _WhitespaceTokenizer:
    """For rouge-score: its default tokenizer keeps only [a-z0-9] and would drop every non-ASCII word."""

    def __init__(self, lowercase: bool = True):
        self.lowercase = lowercase

    def tokenize(self, text: str) -> list[str]:
        return (text.lower() if self.lowercase else text).split()


def rouge_scores(hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = True) -> dict:
    """ROUGE-1, ROUGE-2, ROUGE-L (F1, precision, recall; mean over sentences, 0-1) with `rouge-score`,
    on whitespace tokens (so German umlauts and pre-segmented Chinese/Japanese are scored; no stemming)."""
    from rouge_score import rouge_scorer

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    types = ("rouge1", "rouge2", "rougeL")
    scorer = rouge_scorer.RougeScorer(list(types), tokenizer=_WhitespaceTokenizer(lowercase))
    totals = {t: [0.0, 0.0, 0.0] for t in types}
    for hypothesis, reference in zip(hypotheses, references):
        scores = scorer.score(reference, hypothesis)  # (target, prediction)
        for t in types:
            totals[t][0] += scores[t].fmeasure
            totals[t][1] += scores[t].precision
            totals[t][2] += scores[t].recall
    n = max(len(hypotheses), 1)
    return {t: {"f": f / n, "p": p / n, "r": r / n} for t, (f, p, r) in totals.items()}


def length_ratio(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """Total output length / total reference length (mvPE paper Table V) in text units
    (`xlpe.features.text_units`): whitespace words, and characters in Chinese, Japanese, Thai and the other
    scripts written without spaces (whose whitespace "words" are whole clauses)."""
    from ..features.text_units import unit_count

    out = sum(map(unit_count, hypotheses))
    ref = sum(map(unit_count, references))
    return {"ratio": out / ref if ref else float("nan"), "out": out, "ref": ref}


CHARACTER_NGRAM_FACTOR = 2  # an n-gram of characters of an unspaced script spans this many times n characters


def repeats_ngram(text: str, n: int = 3, times: int = 3) -> bool:
    """Whether one n-gram of `text` occurs `times` times or more: the output of a model looping on itself
    ("able to be able to be able to ..."). The grams are of text units (`xlpe.features.text_units`), so a
    mixed-script line is read in each script's units. A line whose units are mostly characters of an unspaced
    script (Chinese, Japanese, Thai, ...), and a line of one long word, is read in grams of
    `CHARACTER_NGRAM_FACTOR * n` characters: a word 3-gram is about six such characters (a 6-character gram
    repeats 3 times in 0-0.6 % of the WMT zh/ja news references, a word 3-gram in 0-2 % of the en/de ones,
    a 3-character gram in 1-6 %)."""
    from ..features.text_units import text_units, unspaced_share

    units = text_units(text)
    if len(units) == 1 or unspaced_share(units) > 0.5:
        units = list(units[0]) if len(units) == 1 else units
        n *= CHARACTER_NGRAM_FACTOR
    if len(units) < n + times - 1:  # the shortest text holding `times` (overlapping) occurrences
        return False
    counts = Counter(zip(*(units[k:] for k in range(n))))
    return max(counts.values()) >= times


def repetition_rate(hypotheses: Sequence[str], n: int = 3, times: int = 3) -> float:
    """Share of `hypotheses` that repeat an n-gram `times` times or more (`repeats_ngram`); 0.0 for none."""
    return sum(repeats_ngram(h, n, times) for h in hypotheses) / len(hypotheses) if hypotheses else 0.0


def mvpe_metrics(hypotheses: Sequence[str], references: Sequence[str], target_language: str | None = None) -> dict:
    """BLEU-1..4, ROUGE-1/2/L and the length ratio in one dict (perplexity needs a model: `perplexity`)."""
    return {
        **bleu_1_to_4(hypotheses, references, target_language),
        "rouge": rouge_scores(hypotheses, references),
        "length_ratio": length_ratio(hypotheses, references),
    }


# ---------------------------------------------------------------------------------------------------------
# Perplexity of a model on a dataset
# ---------------------------------------------------------------------------------------------------------


def text_batches(
    tokenizer,
    sources: Sequence[str],
    targets: Sequence[str],
    batch_size: int = 32,
    model=None,
    extra_inputs: Callable[[dict], dict] | None = None,
) -> Iterable[dict]:
    """Tokenized (source, reference) batches with `labels` (-100 on padding). A model with
    `prepare_pipeline_inputs` (mvPE+POS) adds its source-side inputs; `extra_inputs(batch)` may add more."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    for start in range(0, len(sources), batch_size):
        src, tgt = list(sources[start : start + batch_size]), list(targets[start : start + batch_size])
        encoded = tokenizer(src, return_tensors="pt", padding=True, truncation=True)  # a BatchEncoding, for the hook
        labels = tokenizer(text_target=tgt, return_tensors="pt", padding=True, truncation=True)["input_ids"]
        batch = {**encoded, "labels": labels.masked_fill(labels == tokenizer.pad_token_id, -100)}
        prepare = getattr(model, "prepare_pipeline_inputs", None)
        if prepare is not None:
            batch.update(prepare(src, tokenizer, encoded))
        if extra_inputs is not None:
            batch.update(extra_inputs(batch))
        yield batch


def perplexity(model, batches: Iterable[Mapping[str, torch.Tensor]]) -> dict:
    """exp(mean negative log-likelihood per target token) of `model` on `batches` (dicts with `labels`,
    -100 = ignored; e.g. `text_batches(...)` or a DataLoader with `ExtraInputsDataCollator`). The NLL is computed
    from the logits, so auxiliary losses (XL PE's reorder loss, mvPE's tag loss) never enter it. Batches
    without `reorder_positions` let XL PE predict them, as at test time. Returns {"perplexity", "nll" (mean
    per token), "tokens"}."""
    import torch

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total_nll, total_tokens = 0.0, 0
    try:
        with torch.no_grad():
            for batch in batches:
                batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
                logits = model(**batch).logits.float()
                labels = batch["labels"]
                nll = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction="sum"
                )
                total_nll += float(nll)
                total_tokens += int((labels != -100).sum())
    finally:
        model.train(was_training)
    if total_tokens == 0:
        raise ValueError("no target tokens: every label is -100")
    mean_nll = total_nll / total_tokens
    return {"perplexity": math.exp(mean_nll), "nll": mean_nll, "tokens": total_tokens}


# ---------------------------------------------------------------------------------------------------------
# compare-mt report (word F1 by frequency bucket, sentence BLEU by length bucket)
# ---------------------------------------------------------------------------------------------------------


def _import_compare_mt():
    """compare_mt's reporters call logging.basicConfig(level=INFO) at import; keep the root logger as it was."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        from compare_mt import compare_mt_main, reporters
    finally:
        root.setLevel(level)
        root.handlers[:] = handlers
    return compare_mt_main, reporters


def compare_mt_report(
    references: Sequence[str],
    systems: Mapping[str, Sequence[str]],
    output_dir: str | Path,
    sources: Sequence[str] | None = None,
    frequency_corpus: str | Path | None = None,
    title: str = "xlpe compare-mt report",
    overwrite: bool = True,
) -> dict:
    """Run compare-mt (Neubig et al. 2019) through its Python API on whitespace-tokenized text.

    Writes `output_dir`: `index.html` (+ figures, compare-mt's HTML report) and `report.txt` (its text
    tables), into a temporary directory beside it renamed into place when complete (`atomic_output_dir`): an
    existing `output_dir` is replaced as a whole (`overwrite=False`: an OutputExistsError instead), a failure
    leaves it as it was. Returns the numbers as a dict: corpus BLEU per system, word F1 by frequency bucket (frequency
    in `frequency_corpus`, e.g. the training targets, else in the references; with the number of reference
    words per bucket: an empty bucket shows F1 0), sentence BLEU by reference-length bucket and the number
    of sentences per bucket. compare-mt's own BLEU is on its tokens; report sacrebleu for the paper table.
    """
    from ..features.text_files import atomic_output_dir

    compare_mt_main, reporters = _import_compare_mt()
    names = list(systems)
    ref_tokens = [line.split() for line in references]
    outs = [[line.split() for line in systems[name]] for name in names]
    for name, out in zip(names, outs):
        if len(out) != len(ref_tokens):
            raise ValueError(f"system {name!r} has {len(out)} lines but there are {len(ref_tokens)} references")
    src_tokens = [line.split() for line in sources] if sources is not None else None
    reporters.sys_names, reporters.fig_size = names, (6.0, 4.5)  # compare-mt's module globals
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        score = compare_mt_main.generate_score_report(ref_tokens, outs, src=src_tokens, score_type="bleu")
        words = compare_mt_main.generate_word_accuracy_report(
            ref_tokens,
            outs,
            acc_type="fmeas",
            bucket_type="freq",
            freq_corpus_file=str(frequency_corpus) if frequency_corpus else None,
        )
        length_bleu = compare_mt_main.generate_sentence_bucketed_report(
            ref_tokens, outs, src=src_tokens, bucket_type="length", statistic_type="score", score_measure="sentbleu"
        )
    output_dir = Path(output_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output_dir(output_dir, overwrite=overwrite) as staging:  # written aside, renamed into place
        reporters.generate_html_report(
            [("Aggregate Scores", [score]), ("Word Accuracies", [words]), ("Sentence Buckets", [length_bleu])],
            str(staging),
            title,
        )
        (staging / "report.txt").write_text(text.getvalue(), encoding="utf-8")
    return {
        "systems": names,
        "bleu": {name: float(value) for name, value in zip(names, score.scores)},
        "word_f1_by_frequency": {
            "buckets": list(words.bucketer.bucket_strs),
            "reference_words": [int(bucket[1]) for bucket in words.statistics[0]],
            # compare-mt's per-bucket tuple: (matches, reference count, output count, recall, precision, F1)
            "f1": {name: [float(bucket[5]) for bucket in stats] for name, stats in zip(names, words.statistics)},
        },
        "sentence_bleu_by_length": {
            "buckets": list(length_bleu.bucketer.bucket_strs),
            "sentences": [
                len(bucket[0]) for bucket in length_bleu.bucketer.create_bucketed_corpus(outs[0], ref=ref_tokens)
            ],
            "bleu": {name: [float(v) for v in stats] for name, stats in zip(names, length_bleu.sys_stats)},
        },
        "html": str(output_dir / "index.html"),
        "text": str(output_dir / "report.txt"),
    }


__all__ = [
    "LANGUAGE_ALIASES",
    "TOKENIZER_EXTRAS",
    "base_language",
    "bleu_chrf_signatures",
    "bleu_tokenizer_name",
    "check_bleu_tokenizer",
    "bleu_1_to_4",
    "compare_mt_report",
    "corpus_bleu_chrf",
    "derangement",
    "length_ratio",
    "mvpe_metrics",
    "paired_significance",
    "perplexity",
    "read_lines",
    "rouge_scores",
    "sacrebleu_advice",
    "shuffled_reference_scores",
    "text_batches",
]
