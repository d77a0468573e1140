"""How distinct the encoder's token states are at initialisation, by encoder depth and init
(docs/benchmarks/depth_and_init.md). This was a hypothesis for the weak Table 5 rows: the init that keeps
the states distinct trains worse, so it is not their explanation (docs/training.md, "Initialisation").

    python bench/studies/init_probe.py                       # d=128 (CPU mode) and d=512 (Transformer-base)
    python bench/studies/init_probe.py --d_model 256 --layers 2,8

For a stock post-LN `MarianMTModel` built the way `xlpe-train` builds one (embeddings scaled by sqrt(d)), it
encodes random sentences and reports, averaged over sentences:
  * within-sentence cosine: mean cosine between the encoder outputs of two different tokens of one sentence
    (1 = every position carries the same vector: the source is lost before training starts);
  * own-token cosine: cosine between a token's encoder output and its own embedding (0 = identity lost).
Inits: "all d^-1/2" (HF's init_std = d^-1/2, xlpe-train's default: every linear layer has gain 1),
"emb d^-1/2, linear 0.02" (--init_std 0.02 --embedding_init_std d^-1/2), and fairseq-style xavier linears.
"""

from __future__ import annotations

import argparse

import torch
from transformers import MarianConfig, MarianMTModel

INITS = ("all d^-1/2", "emb d^-1/2, linear 0.02", "xavier linears")


def build(d_model: int, layers: int, init: str, vocab: int = 4000) -> MarianMTModel:
    heads, ffn = (4, 2 * d_model) if d_model < 256 else (8, 4 * d_model)
    config = MarianConfig(
        vocab_size=vocab,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=2,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        scale_embedding=True,
        init_std=d_model**-0.5 if init == INITS[0] else 0.02,
        pad_token_id=0,
        decoder_start_token_id=0,
        max_position_embeddings=256,
    )
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        if init != INITS[0]:
            model.get_input_embeddings().weight.normal_(0.0, d_model**-0.5)
        if init == INITS[2]:
            for module in model.get_encoder().modules():
                if isinstance(module, torch.nn.Linear):
                    torch.nn.init.xavier_uniform_(module.weight)
    return model


@torch.no_grad()
def probe(model: MarianMTModel, batch: int = 32, length: int = 20, seed: int = 0) -> tuple[float, float]:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(5, model.config.vocab_size, (batch, length), generator=generator)
    states = torch.nn.functional.normalize(model.get_encoder()(input_ids=tokens).last_hidden_state, dim=-1)
    off_diagonal = ~torch.eye(length, dtype=torch.bool)
    within = (states @ states.transpose(1, 2))[:, off_diagonal].mean().item()
    embeddings = torch.nn.functional.normalize(model.get_input_embeddings()(tokens), dim=-1)
    return within, (states * embeddings).sum(-1).mean().item()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d_model", default="128,512", help="comma-separated widths")
    parser.add_argument("--layers", default="2,4,6", help="comma-separated encoder depths")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    depths = [int(x) for x in args.layers.split(",")]
    print("| d | init | " + " | ".join(f"{n} enc layers: within / own" for n in depths) + " |")
    print("|---|---|" + "---|" * len(depths))
    for d_model in (int(x) for x in args.d_model.split(",")):
        for init in INITS:
            cells = []
            for layers in depths:
                torch.manual_seed(args.seed)
                within, own = probe(build(d_model, layers, init), seed=args.seed)
                cells.append(f"{within:.2f} / {own:.2f}")
            print(f"| {d_model} | {init} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
