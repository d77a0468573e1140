"""What the TorchScript ONNX exporter and onnxruntime need beyond the models' own code, written here (not in the
models) so that export changes no forward:

* symbolics for ops the exporter lacks or handles for static shapes only: `torch.isin` (XL PE's fixed tokens),
  `torch.sort(stable=True)` (the built-in reorder predictor's ranking) and `Tensor.unfold` over a dynamic axis
  (mvPE+POS's hypothesis-tagger windows), registered for the export's opset;
* `exportable_attention(model)`: while exporting, every `nn.MultiheadAttention` (the built-in reorder
  predictor's `nn.TransformerEncoder`) is swapped for `ExportableSelfAttention`, the same computation on the
  same parameters written with batch-agnostic reshapes: traced, `nn.MultiheadAttention` bakes the example's batch
  size and length into its reshapes, and its fused fast path has no ONNX form;
* one graph pass, `fix_graph`: onnxruntime has no `Where` kernel for bool tensors, which the directional heads'
  mask (`torch.where(forward, later, earlier)`) produces; such a node becomes `Or(And(c, x), And(Not(c), y))`.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F


class ExportableSelfAttention(nn.Module):
    """`nn.MultiheadAttention` (batch_first self-attention, key padding mask, no dropout) on its own parameters."""

    def __init__(self, attention: nn.MultiheadAttention):
        super().__init__()
        if not attention.batch_first or not attention._qkv_same_embed_dim or attention.bias_k is not None:
            raise ValueError("only batch_first self-attention with packed in_proj and no bias_k/bias_v is swapped")
        self.attention, self.heads = attention, attention.num_heads

    def __getattr__(self, name: str):  # batch_first, in_proj_weight, ...: what nn.TransformerEncoder inspects
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("attention"), name)

    def forward(self, query, key, value, attn_mask=None, key_padding_mask=None, need_weights=False, is_causal=False):
        if attn_mask is not None or is_causal:
            raise ValueError("attn_mask / is_causal: the swapped attention supports a key padding mask only")
        batch, length, width = query.shape
        attention = self.attention
        q, k, v = F.linear(query, attention.in_proj_weight, attention.in_proj_bias).chunk(3, dim=-1)
        q, k, v = (t.reshape(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        mask = None if key_padding_mask is None else ~key_padding_mask.bool()[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return attention.out_proj(out.transpose(1, 2).reshape(batch, length, width)), None


@contextmanager
def exportable_attention(model: nn.Module):
    """Swap every `nn.MultiheadAttention` in `model` for `ExportableSelfAttention` for the duration."""
    swapped = []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.MultiheadAttention):
                setattr(parent, name, ExportableSelfAttention(child))
                swapped.append((parent, name, child))
    try:
        yield
    finally:
        for parent, name, child in swapped:
            setattr(parent, name, child)


def _isin_symbolic(g, elements, test_elements, assume_unique, invert):
    """`torch.isin` (XL PE's fixed tokens), which the TorchScript exporter lacks: any(elements[..., None] ==
    test_elements) over the last axis, as Equal + ReduceMax."""
    from torch.onnx import symbolic_helper

    column = g.op("Unsqueeze", elements, g.op("Constant", value_t=torch.tensor([-1], dtype=torch.long)))
    hits = g.op("Cast", g.op("Equal", column, test_elements), to_i=6)  # int32
    if g.opset >= 18:  # axes became an input
        reduced = g.op("ReduceMax", hits, g.op("Constant", value_t=torch.tensor([-1], dtype=torch.long)), keepdims_i=0)
    else:
        reduced = g.op("ReduceMax", hits, axes_i=[-1], keepdims_i=0)
    found = g.op("Cast", reduced, to_i=9)  # bool
    return g.op("Not", found) if symbolic_helper._maybe_get_const(invert, "b") else found


def _sort_symbolic(g, self, *args):
    """`torch.sort`, also its `stable=True` overload (the built-in predictor's ranking), which the TorchScript
    exporter refuses: a full-length `TopK`, whose spec breaks ties by the lower index (a stable sort)."""
    from torch.onnx import symbolic_helper

    dim, descending = args[-2:] if len(args) >= 3 else args
    dim = symbolic_helper._get_const(dim, "i", "dim")
    descending = bool(symbolic_helper._maybe_get_const(descending, "b"))
    shape = g.op("Shape", self)
    size = g.op("Gather", shape, g.op("Constant", value_t=torch.tensor([dim], dtype=torch.long)), axis_i=0)
    values, indices = g.op("TopK", self, size, axis_i=dim, largest_i=int(descending), sorted_i=1, outputs=2)
    return values, indices


def _unfold_symbolic(g, self, dimension, size, step):
    """`Tensor.unfold` over an axis of dynamic length (mvPE+POS's hypothesis-tagger windows), which the exporter
    handles only for static lengths: a `Gather` of the window indices start + [0, size), window axis moved last."""
    from torch.onnx import symbolic_helper

    dim = symbolic_helper._get_const(dimension, "i", "dimension")
    size = symbolic_helper._get_const(size, "i", "size")
    step = symbolic_helper._get_const(step, "i", "step")
    rank = symbolic_helper._get_tensor_rank(self)
    dim = dim % rank

    def const(value):
        return g.op("Constant", value_t=torch.tensor(value, dtype=torch.long))

    length = g.op("Gather", g.op("Shape", self), const(dim), axis_i=0)
    starts = g.op("Range", const(0), g.op("Add", g.op("Sub", length, const(size)), const(1)), const(step))
    index = g.op("Add", g.op("Unsqueeze", starts, const([1])), const([list(range(size))]))  # [windows, size]
    windows = g.op("Gather", self, index, axis_i=dim)  # dims: ..., windows, size, ... (size at dim + 1)
    order = [i for i in range(rank + 1) if i != dim + 1] + [dim + 1]
    return g.op("Transpose", windows, perm_i=order)


def register_symbolics(opset: int) -> None:
    """Register the symbolics above with the TorchScript exporter for `opset`."""
    torch.onnx.register_custom_op_symbolic("aten::isin", _isin_symbolic, opset)
    torch.onnx.register_custom_op_symbolic("aten::sort", _sort_symbolic, opset)
    torch.onnx.register_custom_op_symbolic("aten::unfold", _unfold_symbolic, opset)


def fix_graph(path: Path) -> int:
    """Rewrite bool `Where` nodes of the ONNX file at `path` in place (module docstring); returns how many."""
    import onnx
    from onnx import TensorProto, helper, shape_inference

    model = onnx.load(str(path))
    inferred = shape_inference.infer_shapes(model)
    types = {
        info.name: info.type.tensor_type.elem_type
        for info in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
    }
    types.update({init.name: init.data_type for init in model.graph.initializer})
    nodes, rewritten = [], 0
    for node in model.graph.node:
        if node.op_type != "Where" or types.get(node.output[0]) != TensorProto.BOOL:
            nodes.append(node)
            continue
        condition, x, y = node.input
        name = node.name or f"bool_where_{rewritten}"
        nodes += [
            helper.make_node("And", [condition, x], [f"{name}/then"], name=f"{name}/And_then"),
            helper.make_node("Not", [condition], [f"{name}/not"], name=f"{name}/Not"),
            helper.make_node("And", [f"{name}/not", y], [f"{name}/else"], name=f"{name}/And_else"),
            helper.make_node("Or", [f"{name}/then", f"{name}/else"], list(node.output), name=f"{name}/Or"),
        ]
        rewritten += 1
    if rewritten:
        del model.graph.node[:]
        model.graph.node.extend(nodes)
        onnx.save(model, str(path))
    return rewritten


__all__ = ["ExportableSelfAttention", "exportable_attention", "fix_graph", "register_symbolics"]
