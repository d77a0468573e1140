"""Length-grouped training batches the way MT toolkits make them (fairseq, Marian, Sockeye): examples of
similar length share a batch (little padding), and the *batches* come in random order.

transformers' `LengthGroupedSampler` (`--train_sampling_strategy group_by_length`) sorts each mega-batch of 50
batches by length and serves its batches in that sorted order: every 50 steps the model sweeps from the
longest to the shortest sentences. Where length tracks content (sentence structure, domain, a synthetic
grammar) consecutive updates then see one kind of sentence at a time, and the built-in demo lost 5 BLEU
(BENCHMARKS.md, "Training switches"). `ShuffledLengthGroupedSampler` groups the same way and then shuffles the
order of the batches, every epoch anew (`set_epoch`), reproducibly from the seed.
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
        self.batch_size, self.seed, self.mega_batch_mult, self.epoch = int(batch_size), int(seed), int(mega_batch_mult), 0

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
            raise ValueError(f"length-grouped batches need `input_ids` or `labels`; the dataset has {dataset.column_names}")
        sides = [pc.list_value_length(table[c]).to_numpy(zero_copy_only=False) for c in columns]
        return np.maximum.reduce(sides) if len(sides) > 1 else sides[0]
    return np.asarray([max(len(item.get("input_ids", ())), len(item.get("labels", ()))) for item in dataset])
