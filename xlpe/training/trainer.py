"""`ExtraInputsSeq2SeqTrainer`: the `Seq2SeqTrainer` of `xlpe-train`, for models with auxiliary losses and extra inputs.

What it changes, by method:

* `__init__`: `ddp_find_unused_parameters` defaults to False (an explicit value stays): every parameter of every
  family gets a gradient at every step (`seq2seq_scaffold.touch_parameters`). The model's `use_cache` survives the
  stock trainer's `--use_cache` (default False), so checkpoints decode with a cache. `num_items_in_batch` reaches
  only models whose `accepts_loss_kwargs` is set: the families weight each batch's loss by its share of the
  optimizer step's target tokens (`seq2seq_scaffold.weight_by_global_tokens`), the token mean of one big batch
  over accumulation steps and processes, as in fairseq; stock Marian/BART (a per-batch mean) keep the stock
  division by the accumulation steps. `--label_smoothing_factor` goes to a family model's own translation loss
  (same formula as `LabelSmoother`) and `labels` reach `forward`: the stock smoother takes them out, and with
  them the auxiliary losses (reorder predictor, DPE order loss, hypothesis tagger), which need them. Callbacks
  added: `TokenBatchEpoch` and the training report `throughput.TrainingReport` (padding, tokens/s, MFU).
* `compute_loss`: under `--torch_compile` marks the batch and length dimensions of the inputs dynamic
  (`mark_dynamic_dimensions`: one graph for every batch shape, tests/training/test_compile_counts.py); counts
  the training batch's padding (`TrainingReport.count_batch`); accumulates every `*_loss` field of the model
  output (`translation_loss`, `reorder_loss`, `order_loss`, `tag_loss`, ...) on the device.
* `log`: a training log line gets the mean of each loss part since the last line (over processes too; plain
  means of the batches' values, where `loss` weights batches by their target tokens) and the report's
  `padding_waste`, `target_tokens_per_second` and `mfu`. (`on_log` is too late for these: the line is already
  in `state.log_history` and the integrations have seen it.)
* `prediction_step`: `generate()` sees only what exists at test time (`generation_inputs`): `input_ids`,
  `attention_mask` and the source-side extra inputs a tool produces (POS tags), never the gold oracle positions
  (unless `eval_with_oracle_positions`, an upper bound) or target-side inputs; the evaluation loss is still
  teacher-forced with every gold input. Lengths follow the length rule (xlpe/models/length_rule.py): without
  `--generation_max_length`/`--val_max_target_length` each sentence gets min(floor(1.5 x its source tokens) +
  10, max_position_embeddings - 1) new tokens. `generate()` runs eager, under autocast in the training dtype
  (encoder included) and, for FSDP1, with the whole parameters.
* `evaluation_loop`: gathers with `gather_for_metrics` (no sample counted twice), adds `<prefix>_<part>_loss`,
  puts predictions and labels back in dataset order (`group_by_length` sorts evaluation batches too) from
  the `example_index` that `get_eval_dataloader`/`get_test_dataloader` add, and counts
  `<prefix>_inputs_truncated` (sources over the position limit) and `<prefix>_outputs_at_limit`.
* `get_train_dataloader`: `--max_tokens N` gives length-bucketed batches of at most N padded tokens
  (`sampling.TokenBatchSampler`), sharded by the sampler itself (accelerate's wrapper is a pass-through).
* `time_greedy_decoding`: the seconds a sentence of greedy decoding costs, for the run plan's first estimate.

Private `Trainer` methods overridden, where no public hook reaches (checked against transformers 5.23):

* `_get_train_sampler`: `group_by_length` as length-homogeneous batches in random order
  (`sampling.ShuffledLengthGroupedSampler`), not transformers' sorted sweeps (5 BLEU on the built-in demo); the
  public `get_train_dataloader` would mean copying the stock dataloader construction to change its sampler.
* `_set_signature_columns_if_needed`: keeps `example_index` through `remove_unused_columns`, which drops every
  column `forward` does not name; no argument names a column to keep (`remove_unused_columns=False` would pass
  every column on, to the collator and the model).
* `_issue_warnings_after_load`: a resume's "missing keys" warning is issued inside the private checkpoint
  loader, with no hook or callback between; tied weights and rebuilt buffers (`_keys_to_ignore_on_save`) are
  not missing, so they are filtered out before it.

`make_compute_metrics` scores generations with sacrebleu (BLEU, chrF; signatures kept on the trainer).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import defaultdict

import numpy as np
import torch
from accelerate.utils import gather_object
from transformers import Seq2SeqTrainer
from transformers.distributed.fsdp import is_fsdp_managed_module
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
from transformers.trainer_utils import EvalLoopOutput

from ..models.extra_inputs import EXTRA_INPUTS
from ..models.length_rule import (
    explicit_length,
    length_budgets,
    length_rule_generate_kwargs,
    position_limit,
    reached_limit,
    with_cap,
)
from ..models.length_rule import generated_lengths as rule_generated_lengths
from .callbacks import TokenBatchEpoch
from .sampling import (
    ShuffledLengthGroupedSampler,
    TokenBatchSampler,
    batch_sampler_dataloader,
    example_lengths,
    example_side_lengths,
)
from .throughput import TrainingReport

SOURCE_INPUTS = ("input_ids", "attention_mask")
EXAMPLE_INDEX = "example_index"  # position of an evaluation/test example in its dataset (restores input order)
logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------------
# The trainer: auxiliary losses, token batches, generation with the families' inputs
# ---------------------------------------------------------------------------------------------------------


def generation_inputs(inputs: dict, with_oracle_positions: bool = False) -> dict:
    """The part of a training batch that `generate()` may see (module docstring)."""

    def allowed(key: str) -> bool:
        if key in SOURCE_INPUTS:
            return True
        spec = EXTRA_INPUTS.get(key)
        # the extra inputs' table says which `generate` takes, and which are oracles (shown only when asked for)
        return spec is not None and spec.generate and (not spec.oracle or with_oracle_positions)

    return {key: value for key, value in inputs.items() if allowed(key)}


class ExtraInputsSeq2SeqTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` with the families' losses and inputs: what each overridden method changes is listed in the
    module docstring."""

    def __init__(self, *args, eval_with_oracle_positions: bool = False, **kwargs):
        training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
        if training_args is not None and training_args.ddp_find_unused_parameters is None:  # module docstring
            training_args.ddp_find_unused_parameters = False
        model = kwargs.get("model", args[0] if args else None)
        config = getattr(model, "config", None)
        inference_cache = getattr(config, "use_cache", None)
        super().__init__(*args, **kwargs)
        if config is not None and inference_cache is not None:
            # The stock Trainer writes `--use_cache` (default False) into the model's config; every checkpoint and
            # the final model would then carry it, and a model built from such a checkpoint decodes without cache.
            # The families' training forward never uses the cache (labels switch it off), so the model keeps its own.
            config.use_cache = inference_cache
        # `num_items_in_batch` only for models that use it (module docstring). The stock guess (forward takes
        # **kwargs) is True for stock Marian/BART too, which return a plain per-batch mean: the trainer would then
        # skip the division by gradient-accumulation steps and multiply by the number of processes.
        unwrapped = self.accelerator.unwrap_model(self.model)
        self.model_accepts_loss_kwargs = bool(getattr(unwrapped, "accepts_loss_kwargs", False))
        self.eval_with_oracle_positions = eval_with_oracle_positions
        self._loss_parts = {"train": defaultdict(float), "eval": defaultdict(float)}
        self._loss_counts = {"train": defaultdict(int), "eval": defaultdict(int)}
        self.metric_signatures: dict[str, str] = {}
        self._example_indices: list[torch.Tensor] = []
        self._indexed_views: dict[int, tuple] = {}  # id(dataset) -> (dataset, the same with example_index)
        self.token_sampler: TokenBatchSampler | None = None  # --max_tokens: built with the training dataloader
        self.add_callback(TokenBatchEpoch(self))
        self.report = TrainingReport(getattr(unwrapped, "config", None))  # padding, target tokens/s and MFU
        self.add_callback(self.report)
        self._route_label_smoothing()

    # --- label smoothing ----------------------------------------------------------------------------------
    def _route_label_smoothing(self) -> None:
        """`--label_smoothing_factor` for a family model: its own loss smooths, so `labels` (and with them the
        auxiliary losses) reach `forward` (module docstring). A stock model keeps the stock smoother."""
        config = getattr(self.model, "config", None)
        if not hasattr(config, "label_smoothing"):
            return
        factor = float(self.args.label_smoothing_factor)
        if factor > 0:
            if config.label_smoothing not in (0, factor):
                logger.warning(
                    "label smoothing: --label_smoothing_factor %s replaces the model's label_smoothing %s",
                    factor,
                    config.label_smoothing,
                )
            config.label_smoothing = factor
        elif config.label_smoothing > 0:
            logger.warning(
                "label smoothing: the model's config has label_smoothing=%s, which its translation loss "
                "applies (pass --label_smoothing_factor to change it)",
                config.label_smoothing,
            )
        self.label_smoother = None  # labels stay in the inputs; the model's loss is already smoothed

    # --- resuming: no false "missing keys" warning -------------------------------------------------------
    def _issue_warnings_after_load(self, load_result) -> None:
        """A checkpoint omits the tied weights (saved once, under the key they are tied to) and the buffers the
        model rebuilds itself (`_keys_to_ignore_on_save`, e.g. sinusoid tables); the stock trainer warns about
        those as "missing keys" on every correct resume. Only keys missing for another reason are reported."""
        model = self.accelerator.unwrap_model(self.model)
        expected = set(getattr(model, "all_tied_weights_keys", None) or {}) | set(model._keys_to_ignore_on_save or ())
        missing = [key for key in load_result.missing_keys if key not in expected]
        if len(missing) < len(load_result.missing_keys):
            model.tie_weights()
        super()._issue_warnings_after_load(type(load_result)(missing, load_result.unexpected_keys))

    # --- length-grouped training batches ----------------------------------------------------------------
    def _get_train_sampler(self, train_dataset=None):
        """`group_by_length`: length-homogeneous batches in random order (sampling.py), not transformers'
        sorted sweeps; every other strategy is the stock one."""
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if self.args.train_sampling_strategy != "group_by_length" or dataset is None or not hasattr(dataset, "__len__"):
            return super()._get_train_sampler(train_dataset)
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        batch = self.args.train_batch_size * self.args.gradient_accumulation_steps
        return ShuffledLengthGroupedSampler(example_lengths(dataset), batch, seed=seed)

    def get_train_dataloader(self):
        """`--max_tokens`: the training set in `TokenBatchSampler` batches, this process' share of them; the
        pass-through of accelerate's `BatchSamplerShard` keeps it from sharding them a second time."""
        max_tokens = getattr(self.args, "max_tokens", None)
        if not max_tokens:
            return super().get_train_dataloader()
        import datasets

        dataset, collator = self.train_dataset, self.data_collator
        if dataset is None or not hasattr(dataset, "__len__"):
            raise ValueError("--max_tokens needs a training dataset with a length (not an iterable dataset)")
        if isinstance(dataset, datasets.Dataset):
            dataset = self._remove_unused_columns(dataset, description="Training")
        else:
            collator = self._get_collator_with_removed_columns(collator, description="Training")
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        self.token_sampler = TokenBatchSampler(
            *example_side_lengths(dataset),
            max_tokens=max_tokens,
            seed=seed,
            num_replicas=self.accelerator.num_processes,
            rank=self.accelerator.process_index,
        )
        plan = self.token_sampler.plan()
        logger.info(
            "token batches (--max_tokens %d): %d batches per epoch over %d process(es), %.1f sentences and %.0f "
            "padded tokens per batch on average, padding %.1f%%",
            max_tokens,
            plan["batches_per_epoch"],
            self.accelerator.num_processes,
            plan["sentences_per_batch"],
            plan["padded_tokens_per_batch"],
            100 * plan["padding_waste"],
        )
        return batch_sampler_dataloader(self, dataset, collator, self.token_sampler)

    # --- predictions in input order -----------------------------------------------------------------------
    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        if EXAMPLE_INDEX not in self._signature_columns:  # kept by remove_unused_columns
            self._signature_columns = [*self._signature_columns, EXAMPLE_INDEX]

    def _indexed(self, dataset):
        """`dataset` with an `example_index` column 0..N-1 (replacing a stale one, e.g. after `select`), built
        once per dataset: periodic evaluations and the two test passes reuse it (`add_column` copies a
        `select`-ed dataset whole)."""
        cached = self._indexed_views.get(id(dataset))
        if cached is not None and cached[0] is dataset:
            return cached[1]
        self._indexed_views[id(dataset)] = (dataset, self._with_example_index(dataset))
        return self._indexed_views[id(dataset)][1]

    @staticmethod
    def _with_example_index(dataset):
        import datasets

        if isinstance(dataset, datasets.Dataset):
            if EXAMPLE_INDEX in dataset.column_names:
                dataset = dataset.remove_columns(EXAMPLE_INDEX)
            return dataset.add_column(EXAMPLE_INDEX, np.arange(len(dataset), dtype=np.int64))
        if dataset is None or not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            return dataset  # iterable datasets keep their order (no sampler)
        return _IndexedDataset(dataset)

    def get_eval_dataloader(self, eval_dataset=None):
        if isinstance(eval_dataset, str):
            eval_dataset = self.eval_dataset[eval_dataset]
        return super().get_eval_dataloader(
            self._indexed(eval_dataset if eval_dataset is not None else self.eval_dataset)
        )

    def get_test_dataloader(self, test_dataset):
        return super().get_test_dataloader(self._indexed(test_dataset))

    def _record_example_index(self, inputs: dict) -> None:
        index = inputs.pop(EXAMPLE_INDEX, None)
        if index is not None:  # gathered exactly like the predictions (duplicates of the last batch dropped)
            self._example_indices.append(self.accelerator.gather_for_metrics(index.to(self.args.device)))

    def _restore_input_order(self, output: EvalLoopOutput) -> EvalLoopOutput:
        indices, self._example_indices = self._example_indices, []
        if not indices or output.predictions is None:
            return output
        index = torch.cat(indices).cpu().numpy()
        rows = len(output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions)
        if len(index) != rows or not np.array_equal(np.sort(index), np.arange(rows)):
            raise RuntimeError(
                f"cannot restore the input order: {rows} predictions but example indices "
                f"{len(index)} (unique {len(np.unique(index))})"
            )
        order = np.argsort(index, kind="stable")

        def reorder(x):
            if x is None:
                return None
            return tuple(reorder(v) for v in x) if isinstance(x, (tuple, list)) else x[order]

        return EvalLoopOutput(
            predictions=reorder(output.predictions),
            label_ids=reorder(output.label_ids),
            metrics=output.metrics,
            num_samples=output.num_samples,
        )

    # --- auxiliary losses ---------------------------------------------------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        inputs.pop(EXAMPLE_INDEX, None)  # (a training set may carry one too)
        if self.args.torch_compile:  # after the move to the device (a mark made before is lost with the copy)
            mark_dynamic_dimensions(inputs)
        if model.training:
            self.report.count_batch(inputs)
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        bucket = "train" if model.training else "eval"
        if isinstance(outputs, dict):
            for name, value in outputs.items():
                if name.endswith("_loss") and isinstance(value, torch.Tensor) and value.numel() == 1:
                    self._loss_parts[bucket][name] += value.detach().float()  # stays on device: no sync per step
                    self._loss_counts[bucket][name] += 1
        return (loss, outputs) if return_outputs else loss

    def _pop_loss_parts(self, bucket: str) -> dict[str, float]:
        """Mean of each accumulated loss part since the last call, averaged over processes too."""
        names = sorted(self._loss_parts[bucket])
        sums, counts = {n: float(v) for n, v in self._loss_parts[bucket].items()}, self._loss_counts[bucket]
        self._loss_parts[bucket], self._loss_counts[bucket] = defaultdict(float), defaultdict(int)
        if self.args.world_size > 1:  # every process reaches this point together (log / evaluation_loop)
            gathered = gather_object([(names, [sums[n] for n in names], [counts[n] for n in names])])
            totals, numbers = defaultdict(float), defaultdict(int)
            for part_names, part_sums, part_counts in gathered:
                for name, value, count in zip(part_names, part_sums, part_counts):
                    totals[name] += value
                    numbers[name] += count
            sums, counts, names = totals, numbers, sorted(totals)
        return {name: round(sums[name] / counts[name], 4) for name in names if counts[name]}

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and not any(key.startswith(("eval_", "test_")) for key in logs):
            logs.update(self._pop_loss_parts("train"))
            logs.update(self.report.log_values())  # padding_waste, target_tokens_per_second, mfu
        super().log(logs, start_time)

    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
    ):
        # Seq2SeqTrainer.evaluate/predict switch to `accelerator.gather`, which keeps the samples that the
        # distributed sampler repeats to fill the last batch: scores would count them twice. Drop them.
        self.gather_function = self.accelerator.gather_for_metrics
        self._pop_loss_parts("eval")  # start clean
        self._example_indices = []
        output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)
        parts = self._pop_loss_parts("eval")
        output.metrics.update({f"{metric_key_prefix}_{name}": value for name, value in parts.items()})
        restored = bool(self._example_indices)
        output = self._restore_input_order(output)
        if restored:
            output.metrics.update(self._length_report(dataloader.dataset, output, metric_key_prefix))
        return output

    # --- the length rule ------------------------------------------------------------------------------------
    def _length_settings(self) -> tuple[int, int, int]:
        """(position limit, eos id, pad id) of the model being evaluated (xlpe/models/length_rule.py)."""
        model = self.accelerator.unwrap_model(self.model)
        config = model.generation_config
        eos = config.eos_token_id if config.eos_token_id is not None else model.config.eos_token_id
        pad = config.pad_token_id if config.pad_token_id is not None else model.config.pad_token_id
        eos = eos[0] if isinstance(eos, (list, tuple)) else eos
        return position_limit(model.config, self.processing_class), eos, pad

    def _length_report(self, dataset, output: EvalLoopOutput, prefix: str) -> dict:
        """`<prefix>_inputs_truncated` (sources longer than the model's position limit) and
        `<prefix>_outputs_at_limit` (translations that reached their length budget or the explicit cap instead of
        ending) of a generating evaluation whose predictions are in dataset order; {} otherwise."""
        predictions = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
        if predictions is None or not self.args.predict_with_generate or not hasattr(dataset, "__len__"):
            return {}
        try:
            column = dataset["input_ids"]
        except (KeyError, TypeError, IndexError):
            column = [dataset[i]["input_ids"] for i in range(len(dataset))]
        sources = np.array([len(ids) for ids in column], dtype=np.int64)
        if len(sources) != len(predictions):
            return {}
        limit, eos, pad = self._length_settings()
        ids = np.asarray(predictions)
        lengths = rule_generated_lengths(np.where(ids < 0, pad, ids), eos, pad)
        generation = {k: v for k, v in getattr(self, "_gen_kwargs", {}).items() if v is not None}
        if explicit_length(generation):
            cap = generation.get("max_new_tokens") or int(generation["max_length"]) - 1
            budgets = np.full(len(sources), int(cap))
        else:
            budgets = length_budgets(np.minimum(sources, limit), limit)
        return {
            f"{prefix}_inputs_truncated": int((sources > limit).sum()),
            f"{prefix}_outputs_at_limit": int(reached_limit(lengths, budgets).sum()),
        }

    # --- generation -----------------------------------------------------------------------------------------
    def time_greedy_decoding(self, dataset, sentences: int = 16) -> float | None:
        """Seconds a sentence of greedy decoding, the validation loss beside it, timed on the first `sentences`
        examples of `dataset` with every output forced to their mean reference length: what an evaluation of a
        model that has learnt to stop costs a sentence (an untrained model runs to its length budget, so timing
        a real evaluation this early would overstate it). `RunPlan` uses it for its first estimate, before any
        evaluation has run (xlpe/training/plan.py). None when `dataset` has no labelled examples."""
        if dataset is None or not len(dataset):
            return None
        subset = dataset.select(range(min(sentences, len(dataset))))
        if self.args.remove_unused_columns:  # as the evaluation's dataloader sees it (text columns dropped)
            subset = self._remove_unused_columns(subset, description="evaluation")
        inputs = self._prepare_inputs(self.data_collator([subset[i] for i in range(len(subset))]))
        labels = inputs.get("labels")
        if labels is None:
            return None
        length = max(int(round(float((labels != -100).sum()) / labels.shape[0])), 1)
        model = self.accelerator.unwrap_model(self.model)
        model = getattr(model, "_orig_mod", model)  # never the compiled module: an eval-mode graph costs a compile
        was_training = model.training
        model.eval()
        try:
            started = time.perf_counter()
            with torch.no_grad(), _full_parameters(self.model), self.accelerator.autocast():
                model.generate(
                    **generation_inputs(inputs, False),
                    **with_cap({"num_beams": 1, "do_sample": False, "min_new_tokens": length}, length),
                )
                model(**{key: value for key, value in inputs.items() if key != "example_index"})
            if torch.cuda.is_available() and labels.is_cuda:
                torch.cuda.synchronize()  # a timing: the one host sync of a one-off probe
            return (time.perf_counter() - started) / labels.shape[0]
        finally:
            model.train(was_training)

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
        self._record_example_index(inputs)
        if not self.args.predict_with_generate or prediction_loss_only:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
        inputs = self._prepare_inputs(inputs)
        if not gen_kwargs:
            gen_kwargs = dict(getattr(self, "_gen_kwargs", {}))
        gen_kwargs = {key: value for key, value in gen_kwargs.items() if value is not None}
        gen_kwargs.setdefault("synced_gpus", is_deepspeed_zero3_enabled() or is_fsdp_managed_module(self.model))
        if not explicit_length(gen_kwargs):  # the length rule: each sentence its own budget (module docstring)
            limit, eos, _ = self._length_settings()
            gen_kwargs, _ = length_rule_generate_kwargs(inputs["attention_mask"], limit, eos, gen_kwargs)
        with torch.no_grad():
            # FSDP1: generate() bypasses the wrapper and would see the shards. Autocast (--bf16/--fp16): the training
            # dtype for the whole of generate(); accelerate's forward wrapper covers only the decoder steps, not the
            # encoder, which generate() calls itself (module docstring)
            with _full_parameters(self.model), self.accelerator.autocast():
                generated = self.model.generate(
                    **generation_inputs(inputs, self.eval_with_oracle_positions), **gen_kwargs
                )
            loss, labels = None, inputs.get("labels")  # (the stock label smoother pops them in compute_loss)
            if labels is not None:
                with self.compute_loss_context_manager():
                    loss = self.compute_loss(model, dict(inputs)).detach().mean()
        return loss, generated, labels


# ---------------------------------------------------------------------------------------------------------
# Helpers: dynamic dimensions, whole parameters for generate() under FSDP, datasets that carry their example index
# ---------------------------------------------------------------------------------------------------------


def mark_dynamic_dimensions(inputs: dict) -> dict:
    """Marks the batch and length dimensions (0 and 1) of every tensor in `inputs` dynamic for `torch.compile`
    (`maybe_mark_dynamic`: no error where torch specialises one, e.g. a size of 1); returns `inputs`. One graph
    then serves batches whose source and target lengths are equal at the first trace and differ later, too
    (tests/training/test_compile_counts.py; `ExtraInputsSeq2SeqTrainer.compute_loss` marks every forward's inputs)."""
    for value in inputs.values():
        if isinstance(value, torch.Tensor):
            for dim in range(min(value.dim(), 2)):
                torch._dynamo.maybe_mark_dynamic(value, dim)
    return inputs


def _full_parameters(model):
    """Context in which an FSDP1-wrapped `model` holds its whole parameters (as the stock
    `Seq2SeqTrainer.prediction_step` does for `generate()`); nothing for any other model (FSDP2 registers
    `generate` as a forward method instead)."""
    if torch.distributed.is_available():
        from torch.distributed.fsdp import FullyShardedDataParallel

        if isinstance(model, FullyShardedDataParallel):
            return FullyShardedDataParallel.summon_full_params(model)
    return contextlib.nullcontext()


class _IndexedDataset(torch.utils.data.Dataset):
    """A map-style dataset of dicts whose items also carry `example_index` (for non-`datasets` datasets)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        return {**self.dataset[index], EXAMPLE_INDEX: index}


# ---------------------------------------------------------------------------------------------------------
# BLEU / chrF
# ---------------------------------------------------------------------------------------------------------


def decode_ids(tokenizer, ids) -> list[str]:
    """Token ids (-100 = padding, as in labels) to text."""
    ids = np.asarray(ids)
    ids = np.where((ids < 0) | (ids >= len(tokenizer)), tokenizer.pad_token_id, ids)
    return [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]


def score_translations(
    hypotheses: list[str], references: list[str], target_lang: str | None = None, tokenize: str | None = None
) -> dict:
    """{"bleu": ..., "chrf": ..., "bleu_signature": ..., "chrf_signature": ...} (sacrebleu, 0-100); `tokenize`:
    sacrebleu's BLEU tokenizer (default: its choice for `target_lang`)."""
    from ..evaluation.metrics import corpus_bleu_chrf

    scores = corpus_bleu_chrf(hypotheses, references, target_language=target_lang, tokenize=tokenize)
    return {
        "bleu": scores["bleu"]["score"],
        "chrf": scores["chrf"]["score"],
        "bleu_signature": scores["bleu"]["signature"],
        "chrf_signature": scores["chrf"]["signature"],
    }


def generated_lengths(ids, tokenizer) -> np.ndarray:
    """Tokens of each generated row up to and including its first EOS (beam search pads rows with EOS)."""
    ids = np.asarray(ids)
    ended = np.cumsum((ids == tokenizer.eos_token_id) | (ids < 0), axis=1) > 0
    return ((~ended) & (ids != tokenizer.pad_token_id)).sum(axis=1) + (ids == tokenizer.eos_token_id).any(axis=1)


def make_compute_metrics(
    tokenizer, trainer_ref: list, target_lang: str | None = None, bleu_tokenize: str | None = None
):
    """`compute_metrics` for the trainer: BLEU, chrF, mean generation length, the share of looping outputs, and
    BLEU and chrF of the same outputs against shuffled references (`bleu_shuffled`, `chrf_shuffled`: what the
    learning check compares the scores with); the sacrebleu signatures go to `trainer.metric_signatures`
    (strings do not belong in logged metrics). `trainer_ref` is a one-element list filled with the trainer
    after it is built."""

    from ..evaluation.metrics import repetition_rate, shuffled_reference_scores

    def compute_metrics(prediction) -> dict[str, float]:
        predictions = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
        hypotheses, references = decode_ids(tokenizer, predictions), decode_ids(tokenizer, prediction.label_ids)
        scores = score_translations(hypotheses, references, target_lang, bleu_tokenize)
        if trainer_ref:
            trainer_ref[0].metric_signatures = {"bleu": scores["bleu_signature"], "chrf": scores["chrf_signature"]}
        metrics = {
            "bleu": round(scores["bleu"], 2),
            "chrf": round(scores["chrf"], 2),
            "gen_len": round(float(generated_lengths(predictions, tokenizer).mean()), 2),
            "repetition": round(repetition_rate(hypotheses), 4),  # looping outputs: the learning check reads it
        }
        if len(hypotheses) >= 2:  # the same outputs against other lines' references: the learning check's control
            shuffled = shuffled_reference_scores(hypotheses, references, target_lang, bleu_tokenize)
            metrics.update(bleu_shuffled=round(shuffled["bleu"], 2), chrf_shuffled=round(shuffled["chrf"], 2))
        return metrics

    return compute_metrics
