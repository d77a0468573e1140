"""Length-grouped training batches the way MT toolkits make them (fairseq, Marian, Sockeye): examples of
similar length share a batch (little padding), and the *batches* come in random order.

transformers' `LengthGroupedSampler` (`--train_sampling_strategy group_by_length`) sorts each mega-batch of 50
batches by length and serves its batches in that sorted order: every 50 steps the model sweeps from the
longest to the shortest sentences. Where length tracks content (sentence structure, domain, a synthetic
grammar) consecutive updates then see one kind of sentence at a time, and the built-in demo lost 5 BLEU
(docs/benchmarks/training_switches.md). `ShuffledLengthGroupedSampler` groups the same way and then shuffles the
order of the batches, every epoch anew (`set_epoch`), reproducibly from the seed.

`TokenBatchSampler` (`--max_tokens N`) makes batches by token count instead of sentence count: examples
sorted by length are cut into batches whose padded size (longest side x sentences) stays within N, served in
random order (a one-sentence batch only where the budget forces it: `torch.compile` would specialise it); it
shards its batches over data-parallel processes itself and reports the padding it leaves.
"""

from __future__ import annotations

import numpy as np
import torch


class ShuffledLengthGroupedSampler(torch.utils.data.Sampler):
    """Indices of `lengths` (one per example: its longer side in tokens) such that every run of `batch_size`
    consecutive indices is one length-homogeneous batch (sorted within random mega-batches of
    `batch_size * mega_batch_mult` examples), and the batches follow each other in random order.

    Args:
        lengths: length of each example.
        batch_size: examples per (accumulated) batch, as the Trainer consumes them.
        seed: the shuffles of epoch e use seed + e.
        mega_batch_mult: batches per sorting window (50, as transformers); smaller keeps more randomness.
    """

    def __init__(self, lengths, batch_size: int, seed: int = 0, mega_batch_mult: int = 50):
        if batch_size < 1 or mega_batch_mult < 1:
            raise ValueError(f"batch_size and mega_batch_mult must be >= 1, got {batch_size} and {mega_batch_mult}")
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.batch_size, self.seed, self.mega_batch_mult, self.epoch = (
            int(batch_size),
            int(seed),
            int(mega_batch_mult),
            0,
        )

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.lengths)

    def batches(self) -> list[np.ndarray]:
        """This epoch's batches, in the order they are served."""
        rng = np.random.default_rng(self.seed + self.epoch)
        permutation = rng.permutation(len(self.lengths))
        window = self.batch_size * self.mega_batch_mult
        batches = []
        for start in range(0, len(permutation), window):
            chunk = permutation[start : start + window]
            chunk = chunk[np.argsort(-self.lengths[chunk], kind="stable")]  # longest first within the window
            batches += [chunk[k : k + self.batch_size] for k in range(0, len(chunk), self.batch_size)]
        # a short (last) batch stays last, so the dataloader's batches keep their boundaries
        full = [b for b in batches if len(b) == self.batch_size]
        short = [b for b in batches if len(b) < self.batch_size]
        return [full[k] for k in rng.permutation(len(full))] + short

    def __iter__(self):
        return iter(np.concatenate(self.batches()).tolist() if len(self.lengths) else [])


def example_lengths(dataset) -> np.ndarray:
    """Longer side (`input_ids` or `labels`) of every example of a `datasets.Dataset` or a map-style dataset
    of dicts, vectorised over Arrow for the former."""
    import datasets

    if isinstance(dataset, datasets.Dataset):
        import pyarrow.compute as pc

        table = dataset.with_format("arrow")
        columns = [c for c in ("input_ids", "labels") if c in dataset.column_names]
        if not columns:
            raise ValueError(
                f"length-grouped batches need `input_ids` or `labels`; the dataset has {dataset.column_names}"
            )
        sides = [pc.list_value_length(table[c]).to_numpy(zero_copy_only=False) for c in columns]
        return np.maximum.reduce(sides) if len(sides) > 1 else sides[0]
    return np.asarray([max(len(item.get("input_ids", ())), len(item.get("labels", ()))) for item in dataset])


# ---------------------------------------------------------------------------------------------------------
# Token-based batches (--max_tokens)
# ---------------------------------------------------------------------------------------------------------


class TokenBatchSampler(torch.utils.data.Sampler):
    """Batches of example indices whose padded size (longest example of the batch, source or target side, x
    sentences) stays within `max_tokens`, the way fairseq/Marian/Sockeye batch: examples sorted by length
    (longer side, then both sides together; ties in random order), cut greedily into batches, and the batches
    served in random order, every epoch anew, reproducibly from `seed + epoch`.

    The cut depends only on the sorted lengths, so every epoch has the same number of batches (the Trainer
    counts them once). With `num_replicas` processes every process draws the same batches and keeps every
    `num_replicas`-th one from position `rank`: the shards partition the epoch. When the batch count does not
    divide by `num_replicas`, the batches with the most sentences are halved until it does (no example
    is repeated or dropped); only when single sentences cannot make up the count (a tiny set) are the first
    batches served once more (`repeated`). Deterministic per (seed, epoch), so a resumed run sees the same batches.

    Args:
        source_lengths: tokens of each example's source (`input_ids`).
        target_lengths: tokens of each example's target (`labels`); None = sources only.
        max_tokens: bound on max(source, target length) x sentences of every batch.
        seed: the shuffles of epoch e use seed + e.
        num_replicas, rank: data-parallel processes and this one's index.
    """

    def __init__(
        self,
        source_lengths,
        target_lengths=None,
        max_tokens: int = 4096,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        source = np.asarray(source_lengths, dtype=np.int64)
        target = source if target_lengths is None else np.asarray(target_lengths, dtype=np.int64)
        if source.shape != target.shape or source.ndim != 1:
            raise ValueError(
                f"source and target lengths must be two equal 1-d sequences, got {source.shape} and {target.shape}"
            )
        if max_tokens < 1:
            raise ValueError(f"--max_tokens must be >= 1, got {max_tokens}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, num_replicas={num_replicas}), got {rank}")
        self.source, self.target = source, target
        self.lengths, self.totals = np.maximum(source, target), source + target
        longest = int(self.lengths.max()) if len(self.lengths) else 0
        if longest > max_tokens:
            raise ValueError(
                f"--max_tokens {max_tokens} is smaller than the longest training example ({longest} tokens): "
                f"raise it to at least {longest} or lower --max_source_length/--max_target_length"
            )
        if len(self.lengths) < num_replicas:
            raise ValueError(
                f"{len(self.lengths)} training examples cannot fill one batch on each of {num_replicas} processes"
            )
        self.max_tokens, self.seed, self.num_replicas, self.rank, self.epoch = (
            int(max_tokens),
            int(seed),
            int(num_replicas),
            int(rank),
            0,
        )
        self.sizes = batch_sizes(np.sort(self.lengths), self.max_tokens, self.num_replicas)
        self.repeated = -len(self.sizes) % self.num_replicas  # batches served twice so that every process has as many

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        """Batches per epoch of this process."""
        return (len(self.sizes) + self.repeated) // self.num_replicas

    def all_batches(self) -> list[np.ndarray]:
        """Every process' batches of this epoch, in serving order (process r serves positions r, r + N, ...)."""
        rng = np.random.default_rng(self.seed + self.epoch)
        tie_break = rng.permutation(len(self.lengths))
        order = tie_break[np.lexsort((self.totals[tie_break], self.lengths[tie_break]))]  # by length, then total
        batches = np.split(order, np.cumsum(self.sizes)[:-1]) if len(order) else []
        batches = [batches[k] for k in rng.permutation(len(batches))]
        return batches + batches[: self.repeated]

    def batches(self) -> list[np.ndarray]:
        """This process' batches of this epoch, in the order they are served."""
        return self.all_batches()[self.rank :: self.num_replicas]

    def __iter__(self):
        return iter([batch.tolist() for batch in self.batches()])

    def plan(self) -> dict:
        """Batches per epoch (all processes), sentences and padded tokens per batch, and the share of padding
        (both sides padded apart, as the collator pads them) in this epoch's batches."""
        batches = self.all_batches()
        if not batches:
            return {
                "batches_per_epoch": 0,
                "sentences_per_batch": 0.0,
                "padded_tokens_per_batch": 0.0,
                "padding_waste": 0.0,
            }
        order, sizes = np.concatenate(batches), np.asarray([len(b) for b in batches])
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        longest = np.maximum.reduceat(self.lengths[order], starts)
        padded = sizes * (
            np.maximum.reduceat(self.source[order], starts) + np.maximum.reduceat(self.target[order], starts)
        )
        return {
            "batches_per_epoch": len(batches),
            "sentences_per_batch": round(float(sizes.mean()), 2),
            "padded_tokens_per_batch": round(float((sizes * longest).mean()), 1),
            "padding_waste": round(1.0 - float(self.totals.sum()) / max(float(padded.sum()), 1.0), 4),
        }


def batch_sizes(sorted_lengths: np.ndarray, max_tokens: int, num_replicas: int = 1) -> np.ndarray:
    """Greedy cut of ascending `sorted_lengths` into consecutive batches with (longest x count) <= max_tokens,
    one step per distinct length; one-sentence batches take a sentence from the batch before them where the
    budget allows (`pair_single_sentences`); then the biggest batches are halved until the count divides by
    `num_replicas` or every batch is one sentence."""
    sizes: list[int] = []
    open_count = 0
    values, counts = np.unique(sorted_lengths, return_counts=True)
    for length, count in zip(values.tolist(), counts.tolist()):
        capacity = max_tokens // length  # sentences of this length (or shorter) that fit
        if open_count >= capacity:
            sizes.append(open_count)
            open_count = 0
        take = min(capacity - open_count, count)
        open_count, count = open_count + take, count - take
        if count:
            sizes.append(open_count)
            full, open_count = divmod(count, capacity)
            sizes += [capacity] * full
    if open_count:
        sizes.append(open_count)
    sizes_array = pair_single_sentences(np.asarray(sizes, dtype=np.int64), sorted_lengths, max_tokens)
    while len(sizes_array) % num_replicas and sizes_array.max() > 1:
        largest = int(np.argmax(sizes_array))
        half = sizes_array[largest] // 2  # halves stay adjacent: the cut remains one pass over sorted lengths
        sizes_array = np.concatenate(
            [sizes_array[:largest], [sizes_array[largest] - half, half], sizes_array[largest + 1 :]]
        )
    return sizes_array


def pair_single_sentences(sizes: np.ndarray, sorted_lengths: np.ndarray, max_tokens: int) -> np.ndarray:
    """`sizes` (a cut of ascending `sorted_lengths`) where a one-sentence batch gets a second sentence when two of
    its length fit `max_tokens`: the boundaries between it and the nearest earlier batch of >= 3 sentences move
    one sentence back (the batches in between have two and keep two). Every batch keeps its budget (the others
    only trade their longest sentence for a shorter one), the cut stays one pass over sorted lengths, and a
    one-sentence batch is left only where the budget forces it. Why: `torch.compile` specialises a dimension of
    size 1, so a one-sentence batch would compile the training step once more (the leftover at the end of the
    cut makes one in about one epoch in `capacity`)."""
    sizes = sizes.copy()
    ends = np.cumsum(sizes)
    for k in np.flatnonzero(sizes == 1).tolist():
        if 2 * int(sorted_lengths[ends[k] - 1]) > max_tokens:
            continue
        donor = k - 1
        while donor >= 0 and sizes[donor] == 2:
            donor -= 1
        if donor >= 0 and sizes[donor] >= 3:
            sizes[donor] -= 1
            sizes[k] += 1
    return sizes


def example_side_lengths(dataset) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) tokens of every example (`input_ids`, `labels`; a missing side counts 0), read from
    Arrow for a `datasets.Dataset`."""
    import datasets

    if isinstance(dataset, datasets.Dataset):
        import pyarrow.compute as pc

        table = dataset.with_format("arrow")
        sides = [
            pc.list_value_length(table[c]).to_numpy(zero_copy_only=False).astype(np.int64)
            if c in dataset.column_names
            else np.zeros(len(dataset), dtype=np.int64)
            for c in ("input_ids", "labels")
        ]
        if "input_ids" not in dataset.column_names and "labels" not in dataset.column_names:
            raise ValueError(f"token batches need `input_ids` or `labels`; the dataset has {dataset.column_names}")
        return sides[0], sides[1]
    source = np.asarray([len(item.get("input_ids", ())) for item in dataset], dtype=np.int64)
    return source, np.asarray([len(item.get("labels", ())) for item in dataset], dtype=np.int64)


# ---------------------------------------------------------------------------------------------------------
# A batch sampler in a Trainer (xlpe-train's --max_tokens, xlpe-reorder train's batches)
# ---------------------------------------------------------------------------------------------------------


def batch_sampler_dataloader(trainer, dataset, collator, batch_sampler):
    """`trainer`'s training dataloader serving `batch_sampler`'s batches of `dataset` (a sampler that shards its
    batches over processes itself: the pass-through of accelerate's `BatchSamplerShard` keeps them from being
    sharded a second time). The sampler's epoch is set by the Trainer's loop (and `callbacks.TokenBatchEpoch`)."""
    from functools import partial

    from transformers.trainer_utils import seed_worker

    args = trainer.args
    workers = args.dataloader_num_workers
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_sampler=batch_sampler,
        collate_fn=collator,
        num_workers=workers,
        pin_memory=args.dataloader_pin_memory,
        persistent_workers=args.dataloader_persistent_workers,
        prefetch_factor=args.dataloader_prefetch_factor if workers else None,
        worker_init_fn=partial(seed_worker, num_workers=workers, rank=args.process_index),
    )
    prepared = trainer.accelerator.prepare(loader)
    wrapper = getattr(prepared, "batch_sampler", None)
    if wrapper is not batch_sampler and getattr(wrapper, "batch_sampler", None) is batch_sampler:
        wrapper.num_processes, wrapper.process_index = 1, 0  # the sampler already gave this process its share
    return prepared


# ---------------------------------------------------------------------------------------------------------
# The standalone reorderer's batches (xlpe-reorder train): length-grouped, by a word-pair budget
# ---------------------------------------------------------------------------------------------------------

# "word_pairs" (default): length-grouped batches of about the same number of word pairs (padded), in random order;
# "sentences": length-grouped batches of `batch_size` sentences; "random": the stock random batches (before 2026-11-28)
REORDERER_BATCHING = ("word_pairs", "sentences", "random")


def word_pair_costs(word_counts) -> np.ndarray:
    """Each sentence's cost in a reorderer batch: its padded word pairs, max(words, median words)^2. The pair scores
    are [words x words] per sentence and the loss is a mean over word pairs; the BTG chart (cubic) runs on chunks of
    rows of similar length, so with length-grouped batches its cost per batch is budget x words. Sentences shorter
    than the median count as the median: batches of short sentences do not grow past about `batch_size` sentences
    (the token encoder's cost is per token)."""
    counts = np.maximum(np.asarray(word_counts, dtype=np.int64), 1)
    floor = int(np.median(counts)) if len(counts) else 1
    return np.maximum(counts, floor) ** 2


def word_pair_budget(word_counts, batch_size: int) -> int:
    """The word-pair budget of a batch (sentences x the batch's longest padded pairs, `word_pair_costs`) for which
    `TokenBatchSampler`'s cut makes as many batches as `batch_size` sentences a step would (ceil(N / batch_size)),
    so `batch_size` keeps its meaning on average: sentences a step, and the epoch about as many steps. Never below
    the costliest sentence."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    costs = np.sort(word_pair_costs(word_counts))
    if not len(costs):
        return 1
    target = -(-len(costs) // batch_size)
    low, high = int(costs[-1]), int(costs[-1]) * len(costs)  # (one batch of everything at the top)
    while low < high:  # the smallest budget whose cut has at most `target` batches
        middle = (low + high) // 2
        if len(batch_sizes(costs, middle)) <= target:
            high = middle
        else:
            low = middle + 1
    return low


class WordPairBatchSampler(TokenBatchSampler):
    """`TokenBatchSampler` over sentences of `word_counts` words, each costing `word_pair_costs` (its padded word
    pairs), within `word_pair_budget`: batches cut from the sentences sorted by words (ties of cost, the sentences
    under the median, broken by words), fewer sentences the longer they are, served in random order (seed + epoch).
    The biggest batches are then halved until there are exactly ceil(N / `batch_size`) a epoch: `batch_size` is
    the mean sentences a step, and an epoch as many steps as random batches of `batch_size` make."""

    def __init__(self, word_counts, batch_size: int, seed: int = 0):
        counts = np.asarray(word_counts, dtype=np.int64)
        budget = word_pair_budget(counts, batch_size)
        super().__init__(word_pair_costs(counts), counts, max_tokens=budget, seed=seed)
        self.batch_size = int(batch_size)
        sizes, target = self.sizes, -(-len(counts) // self.batch_size)
        while len(sizes) < target and sizes.max() > 1:  # (the budget's cut can jump past the target count)
            largest = int(np.argmax(sizes))
            half = sizes[largest] // 2
            sizes = np.concatenate([sizes[:largest], [sizes[largest] - half, half], sizes[largest + 1 :]])
        self.sizes = sizes


def reorderer_batch_sampler(word_counts, batch_size: int, seed: int, batching: str = "word_pairs"):
    """The sampler `xlpe-reorder train` draws its training batches from, for sentences of `word_counts` words:
    "word_pairs" a `WordPairBatchSampler` (a batch sampler: length-grouped batches, fewer sentences the longer they
    are, `batch_size` sentences on average); "sentences" a `ShuffledLengthGroupedSampler` (an index sampler:
    `batch_size` consecutive indices make one length-grouped batch); "random": None (the Trainer's own random
    sampler). Seeded: epoch e draws with seed + e, so a run resumed at an epoch's checkpoint draws the batches the
    interrupted one would have."""
    if batching not in REORDERER_BATCHING:
        raise ValueError(f"batching must be one of {REORDERER_BATCHING}, got {batching!r}")
    if batching == "random":
        return None
    if batching == "sentences":
        return ShuffledLengthGroupedSampler(np.asarray(word_counts), batch_size, seed=seed)
    return WordPairBatchSampler(word_counts, batch_size, seed=seed)
