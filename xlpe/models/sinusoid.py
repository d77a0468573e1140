"""The sinusoid table every position encoding in this package is read from.

One function, `sinusoid_table`, builds PE(pos) for all three papers:

* XL PE (Ding et al., Eq. 1 and 6): PE_abs and PE_XL are rows of the *same* table, indexed by the
  absolute position and by the BTG-reordered position respectively.
* DPE (Zheng et al., Eq. 1): the order loss pulls the DPE output toward the row of each token's target rank.
* mvPE (Eq. 5-6, 9-10): the base is `max_length` (e.g. 500) instead of 10000 and position p is encoded as
  the original PE of p*k (the "step").

Layout: Marian's, i.e. NOT interleaved: the first ceil(d/2) features are sines, the rest cosines,
PE[p, j] = sin(p / base^(2j/d)) for j < d/2 and cos(p / base^(2(j-d/2)/d)) after. Using Marian's layout
means a stock MarianMT checkpoint sees bit-identical absolute PEs (tested against
`MarianSinusoidalPositionalEmbedding.create_weight`), which the upgrade path needs. The table is computed
in float64 and cast, vectorised (no Python loop over positions).
"""

from __future__ import annotations

import torch
from torch import nn

try:  # transformers >= 5: initialisation helpers that respect `_is_hf_initialized`
    from transformers import initialization as hf_init
except ImportError:  # pragma: no cover
    hf_init = None


def sinusoid_table(
    num_positions: int,
    dim: int,
    base: float = 10000.0,
    step: float = 1.0,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Return the [num_positions, dim] sinusoid table PE(p * step) with the given base (Marian layout)."""
    if num_positions <= 0 or dim <= 0:
        raise ValueError(f"num_positions and dim must be positive, got {num_positions} and {dim}")
    if base <= 1.0:
        raise ValueError(f"base must be > 1, got {base}")
    positions = torch.arange(num_positions, dtype=torch.float64)[:, None] * float(step)
    pair_index = torch.arange(dim, dtype=torch.float64) // 2  # j // 2, as in Marian's create_weight
    angles = positions / torch.pow(torch.tensor(float(base), dtype=torch.float64), 2.0 * pair_index / dim)
    sentinel = (dim + 1) // 2
    table = torch.empty(num_positions, dim, dtype=torch.float64)
    table[:, :sentinel] = torch.sin(angles[:, 0::2])
    table[:, sentinel:] = torch.cos(angles[:, 1::2])
    return table.to(dtype)


class SinusoidalPositions(nn.Module):
    """A frozen sinusoid table with gather by arbitrary position ids.

    The table is a non-persistent buffer (never saved, rebuilt by `init_own_parameters`, which the
    models' shared `_init_weights` calls, so it survives `post_init` and `from_pretrained` on the meta device).
    `forward(position_ids)` accepts any integer tensor shape and returns shape + [dim].
    """

    def __init__(self, num_positions: int, dim: int, base: float = 10000.0, step: float = 1.0):
        super().__init__()
        self.num_positions, self.dim, self.base, self.step = num_positions, dim, base, step
        self.register_buffer("table", sinusoid_table(num_positions, dim, base, step), persistent=False)

    @torch.no_grad()
    def init_own_parameters(self) -> None:
        fresh = sinusoid_table(self.num_positions, self.dim, self.base, self.step)
        if hf_init is not None:
            hf_init.copy_(self.table, fresh.to(self.table.device, self.table.dtype))
        else:  # pragma: no cover
            self.table.copy_(fresh)

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        return nn.functional.embedding(position_ids, self.table)
