"""Translating with an export directory: onnxruntime runs the graphs, a small Python front end supplies the
family's extra inputs, and search.py decodes.

    from xlpe.export import OnnxTranslator
    translator = OnnxTranslator("runs/demo-onnx")                 # checks every file against the manifest
    translator.translate(["the cat sees the dog"], num_beams=4)    # raw text in, text out
    translator.generate(input_ids, attention_mask, num_beams=4)    # token ids, as model.generate gives them

What it reads comes from files whose digests the manifest records and that are checked on load (manifest.py:
the manifest's own seal, every graph, tokenizer, config and front-end file): the position limit from `config.json`,
the search settings (beams, lengths, special ids) from `generation_config.json`, the padding side from the tokenizer
(left padding is refused by `xlpe.evaluation.model_loading.check_padding_side`, the check `xlpe-translate` runs);
the manifest itself gives only the graph layout and the front end's file names, both sealed.

The front end (what runs outside the graphs), reused from the model package rather than copied:

* the tokenizer saved beside the graphs (right padding, as the models expect), read with the `tokenizers` library
  (tokenizer_file.py; transformers' `AutoTokenizer` for a tokenizer with code of its own, e.g. OPUS-MT's);
* source POS tags (XL PE + POS, DPE + POS, mvPE+POS on the encoder side): `RawTextTagger` of
  `xlpe/models/pos_tagging_hub.py` with the model's tagger (a trained "perceptron:" tagger travels in the
  export; NLTK's English tagger needs its data installed, as for the PyTorch model);
* an attached standalone reorderer (XL PE): its scorer and exact BTG (CKY) decoding run in PyTorch
  (`XLPEReordererModel.predict_positions`, the code the PyTorch model calls): the chart is a Python loop over
  span lengths that has no efficient ONNX form. XL PE's built-in predictor runs inside the encoder graph.

Everything else (the encoder, the decoder with its cache, mvPE+POS's hypothesis tagger) is in the graphs, and
only the attached reorderer needs torch (`NEEDS_TORCH`, refused in one line where it is not installed): nothing
here imports torch or transformers otherwise (docs/deployment.md, "Serving without PyTorch"). The
cache lives in numpy between steps. The "indirect" self-attention cache (`GraphLayout.self_attention_cache`) is
never copied: `IndirectCache` keeps one buffer per self-attention cache that the step graph writes in place (bound
as both its input and its output), and follows the rows `search` names in the beams' history alone
(step_caches.py). With the "appended" one, beam search reorders the self-attention cache by those rows, in the same
copy that appends the step graph's new keys and values to it (`reordered_cache`). The search's log_softmax over
each step's scores runs in a one-node onnxruntime graph (`log_softmax_session`, small_graphs.py).
Raw-text batches follow `XLPETranslationPipeline`: whitespace-normalised lines, sources cut at the model's
position limit (the tokenizer's `model_max_length` is set to it), and the length rule of
xlpe/models/length_rule.py: when neither `max_new_tokens` nor `max_length` is given, each sentence gets at most
min(floor(1.5 x its own source tokens) + 10, max_position_embeddings - 1) new tokens (the search forces EOS at a
row's budget, as `LengthBudgetLogitsProcessor` does in PyTorch), so a translation does not depend on its batch.
`translate` warns about sources cut at the limit and translations that reached their budget or cap;
`translate_with_report` returns them instead (`xlpe-export --translate` counts them per file).
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from pathlib import Path

import numpy as np

from .graph_names import DECODER_FILE, DECODER_WITH_PAST_FILE, ENCODER_FILE, GraphLayout, int8_name
from .manifest import export_facts, read_manifest, verify_files
from .search import SearchSettings, search
from .small_graphs import indirect_attention_available, log_softmax_session
from .streams import check_streams, threads_per_stream
from .tokenizer_file import load_tokenizer

PRECISIONS = ("fp32", "int8")
INITIAL_CACHE_CAPACITY = 64  # the indirect cache: positions a self-attention buffer holds before it first doubles
logger = logging.getLogger(__name__)
# the one front end that needs PyTorch (module docstring); every other export translates with onnxruntime, tokenizers
# and numpy alone (docs/deployment.md, "Serving without PyTorch")
NEEDS_TORCH = "an attached standalone reorderer decodes its positions in PyTorch (BTG chart: no ONNX form)"


def torch_installed() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


# ---------------------------------------------------------------------------------------------------------
# Sessions, the search's log_softmax, and the self-attention caches between steps
# ---------------------------------------------------------------------------------------------------------


def session_options(threads: int | None, spin_wait: bool = True):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    if not spin_wait:  # idle threads sleep instead of spinning: much faster on a machine shared with other work
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def reordered_cache(past: np.ndarray, new: np.ndarray | None, rows: np.ndarray) -> np.ndarray:
    """A self-attention cache [rows, heads, length, head_dim] for the next step: `past` with the step's own keys or
    values `new` [rows, heads, tokens, head_dim] appended (None: none yet, after the first step), its rows taken in
    the beams' new order `rows`."""
    if new is None:
        return past[rows]
    length = past.shape[2]
    cache = np.empty((len(rows), past.shape[1], length + new.shape[2], past.shape[3]), dtype=past.dtype)
    cache[:, :, :length] = past[rows]
    cache[:, :, length:] = new[rows]
    return cache


class IndirectCache:
    """The indirect self-attention caches for one `generate` call (step_caches.py): a buffer [rows, heads, capacity,
    head_dim] per cache input, written in place by the step graph at position `length`, and each row's history, the
    beam (row of its sentence, rows sentence-major) that holds each earlier position. Following the beams rewrites
    the history (ints), never the buffers; the capacity doubles (one copy) when the length reaches it, up to
    `limit` positions."""

    def __init__(self, present: dict[str, np.ndarray], beams: int, limit: int):
        import onnxruntime as ort

        self._ort = ort
        rows, _, self.length, _ = next(iter(present.values())).shape
        self.beams, self.limit = beams, max(int(limit), self.length + 1)
        self.own_beam = np.arange(rows, dtype=np.int64) % beams
        capacity = min(max(INITIAL_CACHE_CAPACITY, self.length + 1), self.limit)
        self.buffers = {}
        for name, value in present.items():
            self.buffers[name] = np.empty((*value.shape[:2], capacity, value.shape[3]), dtype=value.dtype)
            self.buffers[name][:, :, : self.length] = value
        self.history = np.empty((rows, capacity), dtype=np.int64)
        self.history[:, : self.length] = self.own_beam[:, None]  # the prompt: every row its own
        self._bind()

    def _bind(self):
        self.values = {name: self._ort.OrtValue.ortvalue_from_numpy(b) for name, b in self.buffers.items()}

    @property
    def capacity(self) -> int:
        return self.history.shape[1]

    def follow(self, rows: np.ndarray) -> None:
        """The hypotheses continue those at `rows` (search's reorder): their histories, not their caches."""
        self.history[:, : self.length] = self.history[rows, : self.length]
        if self.length >= self.capacity:  # room for the step's keys: double, at most `limit`
            capacity = min(2 * self.capacity, self.limit)
            if capacity <= self.length:
                raise ValueError(f"the decoder cache is full ({self.length} positions, the search's limit)")
            grow = [(0, 0), (0, 0), (0, capacity - self.capacity), (0, 0)]
            self.buffers = {name: np.pad(b, grow) for name, b in self.buffers.items()}
            self.history = np.pad(self.history, [(0, 0), (0, capacity - self.capacity)])
            self._bind()

    def bind(self, binding) -> None:
        """Bind each buffer as its cache input and as the matching `present` output (written in place); again after
        a growth moved the buffers."""
        for name, value in self.values.items():
            binding.bind_ortvalue_input(name, value)
            binding.bind_ortvalue_output(name.replace("past_key_values.", "present.", 1), value)

    def indirection(self) -> np.ndarray:
        """`cache_indirection` [sentences, beams, length] for the next step."""
        rows = self.history.shape[0]
        return np.ascontiguousarray(self.history[:, : self.length]).reshape(rows // self.beams, self.beams, -1)

    def advance(self) -> None:
        """After a step: each row wrote its keys at `length` in its own buffer row."""
        self.history[:, self.length] = self.own_beam
        self.length += 1


# ---------------------------------------------------------------------------------------------------------
# The translator
# ---------------------------------------------------------------------------------------------------------


class OnnxTranslator:
    """An export directory, loaded for translation (module docstring). `precision`: "fp32" or "int8" (exported
    with `--quantize int8`); `threads`: onnxruntime's intra-op threads (default: all cores); `streams`: batches
    `translate_batches` decodes at once, sharing `threads` out (streams.py; calls from several threads are safe);
    `spin_wait=False`: idle threads sleep (for a machine shared with other work); `verify`: check every file and the
    tokenizer against the manifest first (a ValueError naming the file). A hand-edited manifest (its seal) and a
    tokenizer that pads on the left are refused even with `verify=False`."""

    def __init__(
        self,
        directory,
        precision: str = "fp32",
        threads: int | None = None,
        verify: bool = True,
        spin_wait: bool = True,
        streams: int = 1,
    ):
        import onnxruntime as ort

        from ..evaluation.model_loading import check_padding_side

        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        self.streams = check_streams(streams)
        self._lock = threading.Lock()  # the tokenizer and the front end's lazy loads, under streams
        self.directory = Path(directory)
        self.manifest = read_manifest(self.directory)
        if precision == "int8" and not self.manifest.get("int8_graphs"):
            raise ValueError(f"precision='int8': {self.directory} has no int8 graphs (export with --quantize int8)")
        self.tokenizer = load_tokenizer(self.directory)
        check_padding_side(self.tokenizer, str(self.directory))
        if verify:
            verify_files(self.directory, self.manifest, self.tokenizer)
        facts = export_facts(self.directory, self.manifest)  # from the checked files, not the manifest
        self.position_limit = facts["max_position_embeddings"]
        if self.position_limit:  # the model's limit, not a smaller tokenizer's
            self.tokenizer.model_max_length = self.source_limit()
        self.layout = GraphLayout(**self.manifest["layout"])
        if self.layout.reorder_positions and not torch_installed():
            raise ValueError(f"{self.directory}: {NEEDS_TORCH}, which is not installed: pip install xlpe")
        if self.layout.indirect_cache and not indirect_attention_available():
            raise ValueError(
                f"{self.directory}: an export with the indirect self-attention cache needs an onnxruntime whose CPU "
                f"DecoderMaskedMultiHeadAttention reads `cache_indirection` (1.32 does), not {ort.__version__}: "
                "upgrade onnxruntime, or export the model again with this one (it then writes the appended cache)"
            )
        self.generation_config = facts["generation_config"]
        SearchSettings.from_generation_config(self.generation_config)
        options = session_options(threads_per_stream(threads, self.streams), spin_wait)
        providers = ["CPUExecutionProvider"]

        def load(file_name):
            name = int8_name(file_name) if precision == "int8" else file_name
            return ort.InferenceSession(str(self.directory / name), options, providers=providers)

        self.encoder, self.decoder, self.decoder_with_past = (
            load(ENCODER_FILE),
            load(DECODER_FILE),
            load(DECODER_WITH_PAST_FILE),
        )
        self.inputs = {
            session: {i.name for i in session.get_inputs()}
            for session in (self.encoder, self.decoder, self.decoder_with_past)
        }
        # the search's log_softmax (onnxruntime's, not numpy's), on the calling thread: a pool of its own would spin
        # beside the graphs' after each call (with two intra-op threads that made whole translations 1.2x slower)
        self._normalize = log_softmax_session(session_options(1))
        self._ort = ort
        self._reorderer = self._tagger = None

    # --- the front end ------------------------------------------------------------------------------------

    def source_limit(self) -> int:
        limit = self.position_limit
        return int(limit) if limit else int(self.tokenizer.model_max_length)

    def reorderer(self):
        """The attached standalone reorderer (PyTorch, eval mode), loaded once."""
        with self._lock:
            return self._load_reorderer()

    def _load_reorderer(self):
        if self._reorderer is None:
            from ..models.modeling_reorderer import XLPEReordererModel

            self._reorderer = XLPEReordererModel.from_pretrained(
                str(self.directory / self.manifest["front_end"]["reorderer"])
            ).eval()
        return self._reorderer

    def tagger(self):
        """The model's raw-text POS tagger (`RawTextTagger`), built once."""
        with self._lock:
            return self._load_tagger()

    def _load_tagger(self):
        if self._tagger is None:
            from ..models.pos_tagging_hub import RawTextTagger

            spec = self.manifest["front_end"]["source_tagger"]
            try:
                self._tagger = RawTextTagger(
                    spec["pos_tagger"], spec["pos_tags"], spec.get("nltk_data"), model_dir=str(self.directory)
                )
            except ImportError as error:  # its package (nltk, jieba, spaCy) is missing: one line naming it
                raise ValueError(f"{self.directory}: the source POS tagger {spec['pos_tagger']!r}: {error}") from None
        return self._tagger

    def encode_text(self, texts: list[str]) -> dict:
        """Token ids, mask and the family's extra source inputs of raw `texts` (numpy int64 arrays)."""
        with self._lock:
            encoded = self.tokenizer(
                list(texts), padding=True, truncation=True, max_length=self.source_limit(), return_tensors="np"
            )
        inputs = {
            "input_ids": encoded["input_ids"].astype(np.int64),
            "attention_mask": encoded["attention_mask"].astype(np.int64),
        }
        if self.layout.source_tags:
            inputs["pos_tag_ids"] = np.array(self.tagger().token_tag_rows(list(texts), encoded), dtype=np.int64)
        return inputs

    def source_inputs(self, input_ids, attention_mask, pos_tag_ids=None, reorder_positions=None) -> dict:
        """The encoder graph's feeds; `reorder_positions` of an attached reorderer are decoded here when not given."""
        feeds = {
            "input_ids": np.asarray(input_ids, dtype=np.int64),
            "attention_mask": np.asarray(attention_mask, dtype=np.int64),
        }
        if self.layout.source_tags:
            if pos_tag_ids is None:
                raise ValueError(
                    "pos_tag_ids: this model reads source POS tags; give them or use translate() on raw text"
                )
            feeds["pos_tag_ids"] = np.asarray(pos_tag_ids, dtype=np.int64)
        if self.layout.reorder_positions:
            if reorder_positions is None:
                import torch

                with torch.no_grad():
                    reorder_positions = (
                        self.reorderer()
                        .predict_positions(
                            torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"])
                        )
                        .numpy()
                    )
            feeds["reorder_positions"] = np.asarray(reorder_positions, dtype=np.int64)
        return feeds

    # --- graphs and search --------------------------------------------------------------------------------

    def _run(self, session, feeds: dict):
        return session.run(None, {name: value for name, value in feeds.items() if name in self.inputs[session]})

    def _tagger_ids(self, sequences: np.ndarray, new_tokens: int) -> np.ndarray:
        """The last window - 1 + new tokens of each hypothesis, left-filled with the pad id (the tagger's fill)."""
        width = self.layout.tagger_window - 1 + new_tokens
        fill = np.full((sequences.shape[0], width), self.generation_config["pad_token_id"], dtype=np.int64)
        return np.concatenate([fill, sequences], axis=1)[:, -width:]

    def generate(
        self, input_ids, attention_mask, pos_tag_ids=None, reorder_positions=None, budgets=None, **generate_kwargs
    ) -> np.ndarray:
        """Token ids [batch, length] (the decoder start token first) for a right-padded batch, as `model.generate`
        with the same arguments (`num_beams`, `max_new_tokens`, `max_length`, `length_penalty`, ...) would give.
        `budgets` [batch]: each sentence's length budget (the length rule; `model.generate` with
        `LengthBudgetLogitsProcessor(budgets, eos)` and `max_new_tokens=budgets.max()` when no cap is given)."""
        if budgets is not None:
            budgets = np.asarray(budgets, dtype=np.int64)
            if budgets.shape != (np.asarray(input_ids).shape[0],):
                raise ValueError(f"budgets must have one entry per sentence, got shape {budgets.shape}")
            if generate_kwargs.get("max_new_tokens") is None and generate_kwargs.get("max_length") is None:
                generate_kwargs["max_new_tokens"] = int(budgets.max())
        feeds = self.source_inputs(input_ids, attention_mask, pos_tag_ids, reorder_positions)
        settings = SearchSettings.from_generation_config(self.generation_config, **generate_kwargs)
        limit = self.position_limit
        if limit and settings.max_length - 1 > limit:  # decoder inputs: every token but the last
            raise ValueError(
                f"max_length={settings.max_length} (max_new_tokens + 1) needs {settings.max_length - 1} "
                f"decoder positions, more than the model's max_position_embeddings={limit}"
            )
        hidden = self._run(self.encoder, feeds)[0]
        beams, mask = settings.num_beams, feeds["attention_mask"]
        sentences = {"encoder_hidden_states": hidden, "encoder_attention_mask": mask}  # one row a sentence
        if beams > 1:
            hidden, mask = np.repeat(hidden, beams, axis=0), np.repeat(mask, beams, axis=0)
        state = {"encoder_hidden_states": hidden, "encoder_attention_mask": mask}
        names = self.layout.cache_names("past_key_values")
        own = [name for name in names if ".decoder." in name]  # self-attention: grows and follows the beams
        cross = [name for name in names if ".encoder." in name]  # cross-attention: fixed within a sentence
        appended = {}  # the last step's own keys/values, not yet in `state`
        if self.layout.indirect_cache:
            return self._generate_indirect(feeds, settings, budgets, state, sentences, own, cross, beams)

        def next_logits(sequences: np.ndarray, reorder):
            step = dict(state)
            if reorder is None:  # first step: the whole prompt, no cache
                logits, outputs = self._first_step(sequences, sentences, beams)
                state.update(outputs)
                return logits
            for name in own:  # cross-attention rows never change within a sentence
                step[name] = state[name] = reordered_cache(state[name], appended.get(name), reorder)
            step["decoder_input_ids"] = sequences[:, -1:]
            if self.layout.tagger_window:
                step["tagger_input_ids"] = self._tagger_ids(sequences, 1)
            logits, *present = self._run(self.decoder_with_past, step)
            appended.update(zip(own, present))
            return logits

        return search(next_logits, feeds["input_ids"].shape[0], settings, budgets, self._normalize)

    def _first_step(self, sequences: np.ndarray, sentences: dict, beams: int) -> tuple[np.ndarray, dict]:
        """The first step's logits [rows, vocab] and caches {input name: array}, run once per sentence: at the first
        step a sentence's beams are the same prompt over the same source, so the graph runs on each sentence's first
        row (rows are sentence-major) and its results are repeated for the beams (the cross-attention keys and
        values: 1/beams of the work; kept once per sentence, as the step graph takes them)."""
        step = dict(sentences, decoder_input_ids=sequences[::beams])
        if self.layout.tagger_window:
            step["tagger_input_ids"] = self._tagger_ids(step["decoder_input_ids"], sequences.shape[1])
        logits, *present = self._run(self.decoder, step)
        outputs = {}
        for name, value in zip(self.layout.cache_names("past_key_values"), present):
            per_sentence = ".encoder." in name
            outputs[name] = value if per_sentence or beams == 1 else np.repeat(value, beams, axis=0)
        return (np.repeat(logits, beams, axis=0) if beams > 1 else logits), outputs

    def _generate_indirect(self, feeds, settings, budgets, state, sentences, own, cross, beams) -> np.ndarray:
        """`generate`'s search with the indirect self-attention cache: the step graph reads and writes the
        `IndirectCache` buffers in place (onnxruntime IO binding: one buffer bound as a cache input and its `present`
        output)."""
        step_inputs = self.inputs[self.decoder_with_past]
        run = {}  # this call's cache, binding and logits buffer, made at the first step

        def next_logits(sequences: np.ndarray, reorder):
            if reorder is None:  # first step: the whole prompt, no cache
                logits, outputs = self._first_step(sequences, sentences, beams)
                for name in cross:
                    state[name] = outputs[name]
                run["cache"] = IndirectCache({name: outputs[name] for name in own}, beams, settings.max_length)
                run["binding"] = binding = self.decoder_with_past.io_binding()
                for name in (*cross, "encoder_hidden_states", "encoder_attention_mask"):
                    if name in step_inputs:
                        binding.bind_cpu_input(name, state[name])
                run["logits"] = np.empty_like(logits)
                binding.bind_ortvalue_output("logits", self._ort.OrtValue.ortvalue_from_numpy(run["logits"]))
                return logits
            cache, binding = run["cache"], run["binding"]
            cache.follow(reorder)
            cache.bind(binding)  # each step (a few bind calls): after a growth the buffers are new arrays
            fed = {"decoder_input_ids": np.ascontiguousarray(sequences[:, -1:])}
            fed["cache_indirection"] = cache.indirection()
            if self.layout.tagger_window:
                fed["tagger_input_ids"] = self._tagger_ids(sequences, 1)
            for name, value in fed.items():
                binding.bind_cpu_input(name, value)
            run["fed"] = fed  # bound arrays stay alive until the run (the binding may read them in place)
            self.decoder_with_past.run_with_iobinding(binding)
            cache.advance()
            return run["logits"]

        return search(next_logits, feeds["input_ids"].shape[0], settings, budgets, self._normalize)

    def translate(self, texts: list[str], **generate_kwargs) -> list[str]:
        """Translations of raw `texts` (one batch; pipeline conventions, module docstring); a warning counts the
        sources cut at the model's limit and the translations that reached their length budget or cap."""
        from ..models.length_limits import limit_warnings

        translations, too_long, at_limit = self.translate_with_report(texts, **generate_kwargs)
        numbered = ([i + 1 for i in too_long], [i + 1 for i in at_limit])
        for text in limit_warnings(self.source_limit(), *numbered, len(texts), "sentence", "max_new_tokens/max_length"):
            logger.warning(text)
        return translations

    def translate_with_report(self, texts: list[str], **generate_kwargs) -> tuple[list[str], list[int], list[int]]:
        """(translations of raw `texts`, indices of the texts longer than the model's limit (cut to it), indices of
        the translations that reached their length budget or cap): `translate` without the warnings."""
        from ..models.length_limits import explicit_length, generated_lengths, length_budgets, reached_limit

        if isinstance(texts, str) or not all(isinstance(text, str) for text in texts):
            raise ValueError(f"texts must be a list of strings, got {type(texts).__name__}")
        words = [" ".join(text.split()) for text in texts]
        if not words:
            return [], [], []
        limit = self.source_limit()
        with self._lock:
            full = self.tokenizer(words, truncation=False, verbose=False)["input_ids"]
        too_long = [i for i, ids in enumerate(full) if len(ids) > limit]
        inputs = self.encode_text(words)
        rows = len(words)
        if explicit_length(generate_kwargs):
            cap = generate_kwargs.get("max_new_tokens")
            budgets = np.full(rows, int(cap) if cap is not None else int(generate_kwargs["max_length"]) - 1)
            ids = self.generate(**inputs, **generate_kwargs)
        else:
            budgets = length_budgets(inputs["attention_mask"].sum(-1), limit)
            ids = self.generate(**inputs, budgets=budgets, **generate_kwargs)
        eos, pad = self.generation_config["eos_token_id"], self.generation_config["pad_token_id"]
        eos = eos[0] if isinstance(eos, (list, tuple)) else eos
        at_limit = np.flatnonzero(reached_limit(generated_lengths(ids, eos, pad), budgets)).tolist()
        with self._lock:
            decoded = self.tokenizer.batch_decode(ids, skip_special_tokens=True)
        translations = [text.strip() for text in decoded]
        return translations, too_long, at_limit


__all__ = ["INITIAL_CACHE_CAPACITY", "PRECISIONS", "IndirectCache", "OnnxTranslator"]
