"""What `bench/speed.py` times: model sizes, synthetic token batches (the same for every model), and each
xlpe family beside the stock model it is compared with (`Spec`: how to build it, what it is fed)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import BartConfig, BartForConditionalGeneration, MarianConfig, MarianMTModel

import xlpe
from xlpe.models.registry import generate_inputs

# ---------------------------------------------------------------------------------------------------------
# Sizes and data
# ---------------------------------------------------------------------------------------------------------

SIZES = {
    # seconds on a CPU: the smoke test of the whole harness (tests/test_bench_speed.py, gpu_session.sh --cpu)
    "tiny": {
        "d_model": 128,
        "ffn": 256,
        "heads": 4,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "vocab_size": 1000,
        "batch_size": 8,
        "max_tokens": 256,
        "gen_batch_size": 4,
    },
    # the CPU default: small enough for ~10 min on 2 cores with every family
    "small": {
        "d_model": 256,
        "ffn": 1024,
        "heads": 4,
        "encoder_layers": 3,
        "decoder_layers": 3,
        "vocab_size": 8000,
        "batch_size": 32,
        "max_tokens": 1536,
        "gen_batch_size": 32,
    },
    # Transformer-base (Vaswani et al. 2017) for the GPU run
    "base": {
        "d_model": 512,
        "ffn": 2048,
        "heads": 8,
        "encoder_layers": 6,
        "decoder_layers": 6,
        "vocab_size": 32000,
        "batch_size": 128,
        "max_tokens": 24576,
        "gen_batch_size": 128,
    },
    # max_tokens: padded tokens (longest side x sentences) per token batch; at base, 24,576 gives >= 16k real
    # target tokens per batch on the stored newstest lengths (the "realistic batch")
}

PAD, EOS, BART_BOS, BART_PAD, BART_EOS = 0, 1, 0, 1, 2
FIRST_WORD_ID = 3  # token ids below this are special in both the Marian and the BART layout
FIRST_TAG_ID, NUM_POS_TAG_IDS = 3, 48  # mvPE+POS's default (nltk-en, Penn) tag ids: 3 specials, then 45 tags


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, S], right padded with PAD, EOS closes each row
    attention_mask: torch.Tensor
    labels: torch.Tensor  # [B, T], -100 on padding, EOS closes each row
    reorder_positions: torch.Tensor  # oracle-style XL order: a permutation of the movable tokens, EOS fixed
    target_positions: torch.Tensor  # DPE supervision: target rank of each source token, -100 where unaligned
    pos_tag_ids: torch.Tensor
    decoder_pos_tag_ids: torch.Tensor
    new_tokens: int  # generation length (min == max) for this batch

    @property
    def target_tokens(self) -> int:
        return int((self.labels != -100).sum())

    @property
    def source_tokens(self) -> int:
        return int(self.attention_mask.sum())

    def to(self, device) -> Batch:
        moved = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in self.__dict__.items()}
        return Batch(**moved)


def make_batches(count: int, batch_size: int, vocab_size: int, mean_len: float, seed: int) -> list[Batch]:
    """Synthetic batches with realistic lengths: a length-bucketed batcher's batch of sentences whose source
    lengths are N(mean_len, (mean_len/5)^2) clipped to [8, 2 mean_len], target length = source x U(0.9, 1.3).
    Generation length (forced, min == max): ceil(1.2 x the batch's mean source length)."""
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        src_len = (
            (torch.randn(batch_size, generator=gen) * mean_len / 5 + mean_len).round().clamp(8, 2 * mean_len).long()
        )
        tgt_len = (src_len.float() * (0.9 + 0.4 * torch.rand(batch_size, generator=gen))).round().clamp(min=4).long()
        S, T = int(src_len.max()), int(tgt_len.max())
        input_ids = torch.full((batch_size, S), PAD)
        labels = torch.full((batch_size, T), -100)
        reorder = torch.arange(S).repeat(batch_size, 1)
        target_positions = torch.full((batch_size, S), -100)
        pos = torch.zeros(batch_size, S, dtype=torch.long)
        dpos = torch.zeros(batch_size, T, dtype=torch.long)
        for b in range(batch_size):
            n, m = int(src_len[b]), int(tgt_len[b])
            input_ids[b, : n - 1] = torch.randint(FIRST_WORD_ID, vocab_size, (n - 1,), generator=gen)
            input_ids[b, n - 1] = EOS
            labels[b, : m - 1] = torch.randint(FIRST_WORD_ID, vocab_size, (m - 1,), generator=gen)
            labels[b, m - 1] = EOS
            reorder[b, : n - 1] = torch.randperm(n - 1, generator=gen)  # EOS (index n-1) keeps its place
            ranks = torch.randperm(n - 1, generator=gen)
            aligned = torch.rand(n - 1, generator=gen) < 0.85  # some source words unaligned, as with real alignments
            target_positions[b, : n - 1] = torch.where(aligned, ranks, torch.full_like(ranks, -100))
            pos[b, :n] = torch.randint(FIRST_TAG_ID, NUM_POS_TAG_IDS, (n,), generator=gen)
            dpos[b, :m] = torch.randint(FIRST_TAG_ID, NUM_POS_TAG_IDS, (m,), generator=gen)
        attention_mask = (torch.arange(S)[None] < src_len[:, None]).long()
        batches.append(
            Batch(
                input_ids,
                attention_mask,
                labels,
                reorder,
                target_positions,
                pos,
                dpos,
                math.ceil(1.2 * float(src_len.float().mean())),
            )
        )
    return batches


def batch_from_lengths(source_lengths, target_lengths, vocab_size: int, gen: torch.Generator) -> Batch:
    """One right-padded batch of random token ids with the given per-sentence lengths (EOS included), built
    without per-sentence loops; the family inputs as in `make_batches`: oracle-style `reorder_positions` (a random
    permutation of the movable tokens, EOS and padding in place), `target_positions` (a random rank per movable
    token, ~15% unaligned = -100), POS tags on real tokens (0 on padding)."""
    src = torch.as_tensor(source_lengths, dtype=torch.long)
    tgt = torch.as_tensor(target_lengths, dtype=torch.long)
    if src.ndim != 1 or src.shape != tgt.shape or len(src) == 0 or int(src.min()) < 2 or int(tgt.min()) < 2:
        raise ValueError(
            "source/target lengths must be two equal non-empty 1-d sequences of lengths >= 2 (EOS included)"
        )
    B, S, T = len(src), int(src.max()), int(tgt.max())
    pos_s, pos_t = torch.arange(S)[None], torch.arange(T)[None]
    real_s, real_t = pos_s < src[:, None], pos_t < tgt[:, None]
    movable = pos_s < (src - 1)[:, None]  # every source token but EOS
    input_ids = torch.randint(FIRST_WORD_ID, vocab_size, (B, S), generator=gen)
    input_ids = torch.where(movable, input_ids, torch.where(real_s, EOS, PAD))
    labels = torch.randint(FIRST_WORD_ID, vocab_size, (B, T), generator=gen)
    labels = torch.where(pos_t < (tgt - 1)[:, None], labels, torch.where(real_t, EOS, -100))
    fixed_key = 1.0 + pos_s.float()  # >= 1: after every movable token (keys in [0, 1)), in index order
    reorder = torch.where(movable, torch.rand(B, S, generator=gen), fixed_key).argsort(dim=1)
    ranks = torch.where(movable, torch.rand(B, S, generator=gen), fixed_key).argsort(dim=1).argsort(dim=1)
    aligned = movable & (torch.rand(B, S, generator=gen) < 0.85)
    target_positions = torch.where(aligned, ranks, -100)
    pos = torch.randint(FIRST_TAG_ID, NUM_POS_TAG_IDS, (B, S), generator=gen) * real_s
    dpos = torch.randint(FIRST_TAG_ID, NUM_POS_TAG_IDS, (B, T), generator=gen) * real_t
    return Batch(
        input_ids,
        real_s.long(),
        labels,
        reorder,
        target_positions,
        pos,
        dpos,
        math.ceil(1.2 * float(src.float().mean())),
    )


def spread_picks(groups: list, count: int, key) -> list:
    """`count` of `groups` evenly spread over their order by `key` (short to long), so the picks cover the
    corpus' length range in its proportions (every token batch holds about the same number of tokens)."""
    ordered = sorted(groups, key=key)
    if count >= len(ordered):
        return ordered
    return [ordered[int((k + 0.5) * len(ordered) / count)] for k in range(count)]


def token_batches(distribution: dict, max_tokens: int, count: int, vocab_size: int, seed: int) -> list[Batch]:
    """`count` token batches as `xlpe-train --max_tokens` makes them (`TokenBatchSampler`: sentences sorted by
    length, cut greedily so that longest side x sentences <= max_tokens) from sentence lengths drawn from the
    stored real distribution, picked evenly over the batches' length range (short to long). Batches filled to
    less than 3/4 of `max_tokens` (the remainders at the ends of the cut) are not picked when others exist."""
    from xlpe.training.sampling import TokenBatchSampler

    from .lengths import sample

    mean = sum(max(s, t) * c for s, t, c in distribution["pairs"]) / sum(c for _, _, c in distribution["pairs"])
    pool = max(2048, int(6 * count * max_tokens / mean))  # enough sentences for several times `count` batches
    src, tgt = sample(distribution, pool, seed)
    longest = int(max(src.max(), tgt.max()))
    if max_tokens < longest:
        raise ValueError(f"--max-tokens {max_tokens} is below the longest sentence drawn ({longest} tokens)")
    groups = TokenBatchSampler(src, tgt, max_tokens=max_tokens, seed=seed).all_batches()
    full = [g for g in groups if len(g) * max(int(src[g].max()), int(tgt[g].max())) >= 0.75 * max_tokens] or groups
    picks = spread_picks(full, count, key=lambda g: int(max(src[g].max(), tgt[g].max())))
    gen = torch.Generator().manual_seed(seed)
    return [batch_from_lengths(src[g], tgt[g], vocab_size, gen) for g in picks]


def sentence_batches(distribution: dict, batch_size: int, count: int, vocab_size: int, seed: int) -> list[Batch]:
    """`count` batches of `batch_size` sentences with real lengths, length-bucketed as `xlpe-translate` batches
    (sentences sorted by source length, cut in order), picked evenly over the length range."""
    from .lengths import sample

    src, tgt = sample(distribution, batch_size * max(16, 2 * count), seed + 1)
    order = src.argsort(kind="stable")
    groups = [order[k : k + batch_size] for k in range(0, len(order) - batch_size + 1, batch_size)]
    picks = spread_picks(groups, count, key=lambda g: int(src[g].max()))
    gen = torch.Generator().manual_seed(seed + 1)
    return [batch_from_lengths(src[g], tgt[g], vocab_size, gen) for g in picks]


def bart_view(batch: Batch) -> Batch:
    """The same sentences in BART's special-token layout (pad 1, eos 2)."""
    input_ids = batch.input_ids.clone()
    input_ids[batch.input_ids == PAD] = BART_PAD
    input_ids[batch.input_ids == EOS] = BART_EOS
    labels = batch.labels.clone()
    labels[batch.labels == EOS] = BART_EOS
    return Batch(**{**batch.__dict__, "input_ids": input_ids, "labels": labels})


# ---------------------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------------------


def shared_kwargs(dims: dict) -> dict:
    """The dims every config of one run shares (Marian and BART spell them the same)."""
    return {
        "vocab_size": dims["vocab_size"],
        "d_model": dims["d_model"],
        "encoder_layers": dims["encoder_layers"],
        "decoder_layers": dims["decoder_layers"],
        "encoder_attention_heads": dims["heads"],
        "decoder_attention_heads": dims["heads"],
        "encoder_ffn_dim": dims["ffn"],
        "decoder_ffn_dim": dims["ffn"],
        "max_position_embeddings": 512,
    }


def marian_kwargs(dims: dict, **overrides) -> dict:
    special = {"pad_token_id": PAD, "eos_token_id": EOS, "decoder_start_token_id": PAD, "forced_eos_token_id": None}
    return {**shared_kwargs(dims), **special, **overrides}


def bart_kwargs(dims: dict, **overrides) -> dict:
    special = {
        "pad_token_id": BART_PAD,
        "bos_token_id": BART_BOS,
        "eos_token_id": BART_EOS,
        "decoder_start_token_id": BART_EOS,
        "forced_bos_token_id": None,
        "forced_eos_token_id": None,
    }
    return {**shared_kwargs(dims), **special, **overrides}


@dataclass
class Spec:
    name: str
    build: Callable[[dict], torch.nn.Module]
    baseline: str | None = None  # name of the spec this one is divided by (None: it is a baseline)
    train_inputs: Callable[[Batch], dict] = lambda batch: {}
    gen_inputs: Callable[[Batch], dict] = lambda batch: {}
    generation: bool = True  # False: not timed in generation (e.g. a training-only variant of another row)
    train_forward: Callable | None = None  # (model, batch) -> output with .loss; default model(**inputs)
    bart_layout: bool = False
    train_target: float | None = None
    gen_target: float | None = None
    note: str = ""


def xl_spec(strategy: str, train_positions: str = "oracle", label: str = "", **config) -> Spec:
    def build(dims):
        xl_heads = 0 if strategy == "in" else max(1, dims["heads"] // 4)
        cfg = xlpe.XLPEMarianConfig(
            **marian_kwargs(dims, xl_strategy=strategy, xl_heads=xl_heads, xl_train_positions=train_positions, **config)
        )
        return xlpe.XLPEMarianMTModel(cfg)

    suffix = "" if train_positions == "oracle" else ", train on predicted positions"
    return Spec(
        f"XL PE {strategy}{suffix}{label}",
        build,
        baseline="Marian",
        train_inputs=lambda b: {"reorder_positions": b.reorder_positions},
        train_target=1.03,
        gen_target=1.05,
        note="tau = H/4" if strategy != "in" else "",
    )


def external_positions_forward(model, batch: Batch):
    """The paper's setting: XL positions come from an external reorderer (lader), so the translation model's
    training step has no predictor. The encoder is called without `compute_reorder_loss` (the MT model's forward
    always asks for the predictor's loss when positions and labels are given), then the model on its output."""
    encoder_outputs = model.model.encoder(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, reorder_positions=batch.reorder_positions
    )
    return model(attention_mask=batch.attention_mask, encoder_outputs=encoder_outputs, labels=batch.labels)


def all_specs(families: list[str], dims: dict) -> list[Spec]:
    specs = [Spec("Marian", lambda d: MarianMTModel(MarianConfig(**marian_kwargs(d))), note="stock")]
    if "xlpe" in families:
        specs += [xl_spec("in"), xl_spec("head"), xl_spec("combination"), xl_spec("combination", "predicted")]
        specs[-1].generation = False  # at inference it is the "combination" model: nothing else to time
        specs[-1].note = "xl_train_positions='predicted': the translation loss sees the predictor's order"
        # the predictor's width is the one knob that matters for the training overhead (docs/benchmarks/speed.md):
        # also measure a predictor a quarter of the model's width when the package default differs from it
        default_hidden = xlpe.XLPEMarianConfig(**marian_kwargs(dims)).reorder_predictor_hidden_size
        heads = xlpe.XLPEMarianConfig().reorder_predictor_heads
        quarter = max(8 * heads, dims["d_model"] // (4 * heads) * heads)
        if quarter != default_hidden:
            specs.append(
                xl_spec("combination", label=f", predictor h={quarter}", reorder_predictor_hidden_size=quarter)
            )
            specs[-1].note = f"predictor hidden {quarter} = d_model/4 instead of the default {default_hidden}"
        external = xl_spec("combination", label=", external positions (no predictor)")
        external.train_forward = external_positions_forward
        external.gen_inputs = lambda b: {"reorder_positions": b.reorder_positions}
        external.note = (
            "the paper's setting: reorderings from an external tool (its cost not counted), the predictor never runs"
        )
        specs.append(external)
    if "baselines" in families:  # XL PE Table 1's baselines and the stack (position_attention.py), beside stock Marian

        def variant(name, strategy, note, **config):
            spec = (
                xl_spec(strategy, label=name, **config)
                if strategy != "none"
                else Spec(
                    f"XL PE none{name}",
                    lambda d: xlpe.XLPEMarianMTModel(
                        xlpe.XLPEMarianConfig(**marian_kwargs(d, xl_strategy="none", **config))
                    ),
                    baseline="Marian",
                )
            )
            spec.note = note
            return spec

        specs += [
            variant(
                ", relative PE k=16",
                "none",
                "Shaw et al.: keys and values (eager attention)",
                relative_attention_max_distance=16,
            ),
            variant(
                ", relative PE k=16, keys only",
                "none",
                "keys only: an SDPA bias",
                relative_attention_max_distance=16,
                relative_attention_values=False,
            ),
            variant(
                ", DiSAN-style heads",
                "none",
                "directional masks on the encoder heads (SDPA bias)",
                directional_attention=True,
            ),
            variant(", relative PE k=16", "combination", "XL PE + relative PE", relative_attention_max_distance=16),
            variant(
                ", RoPE",
                "none",
                "rotary positions on both sides, no sinusoid (SDPA)",
                rotary_attention=True,
                absolute_positions=False,
            ),
            variant(
                ", XL-RoPE",
                "head",
                "RoPE; the tau heads of layer 1 rotated by the XL positions, predictor on",
                xl_position_form="rotary",
                rotary_attention=True,
                absolute_positions=False,
            ),
            variant(
                ", XL-relative k=16",
                "head",
                "relative PE; the tau heads of layer 1 on XL distances, predictor on",
                xl_position_form="relative",
                relative_attention_max_distance=16,
                absolute_positions=False,
            ),
        ]
    if "dpe" in families:
        from xlpe.models.configuration_dpe import (
            DPEMarianConfig,  # registered by `import xlpe` when present
        )

        dpe_layers = DPEMarianConfig().dpe_layers
        deep = f"Marian {dims['encoder_layers'] + dpe_layers}E"
        specs.append(
            Spec(
                deep,
                lambda d: MarianMTModel(
                    MarianConfig(**marian_kwargs(d, encoder_layers=d["encoder_layers"] + dpe_layers))
                ),
                note=f"stock, +{dpe_layers} encoder layers (= DPE's parameters; the paper's 8E at base size)",
            )
        )
        specs.append(
            Spec(
                "DPE",
                lambda d: xlpe.get_family("dpe").generation_model_class(DPEMarianConfig(**marian_kwargs(d))),
                baseline=deep,
                train_inputs=lambda b: {"target_positions": b.target_positions},
                train_target=1.03,
                gen_target=1.03,
                note=f"{dpe_layers} DPE layers",
            )
        )
    if "mvpe_pos" in families:
        family = xlpe.get_family("mvpe_pos")
        specs.append(
            Spec(
                "BART",
                lambda d: BartForConditionalGeneration(BartConfig(**bart_kwargs(d))),
                bart_layout=True,
                note="stock",
            )
        )
        pos_inputs = lambda b: {"pos_tag_ids": b.pos_tag_ids, "decoder_pos_tag_ids": b.decoder_pos_tag_ids}
        specs.append(
            Spec(
                "mvPE+POS",
                lambda d: family.generation_model_class(family.config_class(**bart_kwargs(d))),
                baseline="BART",
                train_inputs=pos_inputs,
                gen_inputs=lambda b: {"pos_tag_ids": b.pos_tag_ids},
                bart_layout=True,
                train_target=1.05,
                gen_target=1.05,
            )
        )
    for name in families:  # any other registered family: one row beside the stock model it extends
        if name not in HAND_WRITTEN and name in xlpe.MODEL_FAMILIES:
            specs += registry_specs(xlpe.get_family(name), {spec.name for spec in specs})
    return specs


# the families with their own rows above (the papers' baselines: DPE beside a deeper Marian, XL PE's variants);
# every other registered family is timed by `registry_specs` with no edit here
HAND_WRITTEN = ("xlpe", "dpe", "mvpe_pos")


def registry_specs(family, existing: set[str]) -> list[Spec]:
    """A registered family's row (its default config at the run's dims, its extra inputs made from their
    `example` kinds: `ModelFamily.example_inputs`) and, when missing, the stock row it is divided by."""
    bart = family.stock_classes()[1] is BartForConditionalGeneration
    kwargs, baseline = (bart_kwargs, "BART") if bart else (marian_kwargs, "Marian")
    specs = []
    if baseline not in existing:  # stock Marian is always the first row
        specs.append(
            Spec("BART", lambda d: BartForConditionalGeneration(BartConfig(**bart_kwargs(d))), bart_layout=True)
        )
    made: dict[int, tuple[Batch, dict]] = {}  # per batch, made once (outside the timed steps after the first)

    def examples(batch: Batch, config) -> dict:
        if id(batch) not in made or made[id(batch)][0] is not batch:
            labels = batch.labels.clamp_min(0)
            values = family.example_inputs(
                config,
                batch.input_ids,
                labels,
                attention_mask=batch.attention_mask,
                decoder_attention_mask=batch.labels != -100,
            )
            made[id(batch)] = (batch, values)
        return made[id(batch)][1]

    built: dict[str, object] = {}

    def build(d):
        built["config"] = family.config_class(**kwargs(d))
        return family.generation_model_class(built["config"])

    specs.append(
        Spec(
            family.title,
            build,
            baseline=baseline,
            train_inputs=lambda b: examples(b, built["config"]),
            gen_inputs=lambda b: {k: v for k, v in examples(b, built["config"]).items() if k in generate_inputs()},
            bart_layout=bart,
            note="registered family, default config (no hand-written row)",
        )
    )
    return specs
