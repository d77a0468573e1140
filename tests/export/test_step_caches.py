"""The step graph's caches (xlpe/export/step_caches.py): the split, per-sentence and indirect attention forms equal
plain attention (property tests; the indirect form's onnxruntime kernel against its torch reference too); the
indirect step graph reads and writes its cache buffers in place through the beams' history and translates as PyTorch
does while the buffers grow; the appended step graph gives only the step's own keys and values and takes the
cross-attention cache once per sentence (no cache copy left in the graph); the manifest records which form an export
has, under the one format version; the tracing state is the export call's own."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

import test_export  # noqa: E402
from test_generation_consistency import build  # noqa: E402

from xlpe.export import exporter, runtime  # noqa: E402
from xlpe.export.graphs import DECODER_WITH_PAST_FILE  # noqa: E402
from xlpe.export.runtime import OnnxTranslator, reordered_cache  # noqa: E402
from xlpe.export.step_caches import (  # noqa: E402
    IndirectSelfAttention,
    indirect_self_attention,
    shared_attention,
    split_attention,
)

stack_tokenizer = test_export.stack_tokenizer  # the fixture, reused
assert_same_generation = test_export.assert_same_generation


def plain_attention(query, keys, values, mask, scaling):
    """softmax(q K^T s + mask) V, output (B, Lq, H, d): what transformers' eager attention computes."""
    scores = torch.matmul(query, keys.transpose(-1, -2)) * scaling
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min) if mask.dtype == torch.bool else scores + mask
    return torch.matmul(torch.softmax(scores, -1), values).transpose(1, 2)


shapes = st.tuples(
    st.integers(1, 3),  # sentences
    st.integers(1, 4),  # beams
    st.integers(1, 3),  # heads
    st.integers(0, 6),  # cached tokens
    st.integers(1, 3),  # new tokens
    st.sampled_from([1, 4, 8]),  # head width
)


@settings(max_examples=60, deadline=None)
@given(shape=shapes, mask_kind=st.sampled_from(["none", "bool", "float"]), seed=st.integers(0, 2**16))
def test_split_attention_is_attention_over_the_joined_cache(shape, mask_kind, seed):
    sentences, beams, heads, past, new, width = shape
    generator = torch.Generator().manual_seed(seed)
    rows = sentences * beams

    def draw(*size):
        return torch.randn(*size, generator=generator, dtype=torch.float64)

    query, new_keys, new_values = (
        draw(rows, heads, new, width),
        draw(rows, heads, new, width),
        draw(rows, heads, new, width),
    )
    past_keys, past_values = draw(rows, heads, past, width), draw(rows, heads, past, width)
    keys, values = torch.cat([past_keys, new_keys], 2), torch.cat([past_values, new_values], 2)
    causal = torch.arange(past + new)[None, :] > (past + torch.arange(new))[:, None]  # (Lq, Lp + Lq)
    if mask_kind == "none":  # the function masks later new tokens itself
        mask, expected_mask = None, ~causal
    elif mask_kind == "bool":
        keep = torch.rand(rows, 1, new, past + new, generator=generator) > 0.3
        keep[..., -1] = True  # a query's own token: never a fully masked row
        mask = expected_mask = keep
    else:
        mask = expected_mask = draw(rows, 1, 1, past + new)
    expected = plain_attention(query, keys, values, expected_mask, 0.7)
    actual = split_attention(query, past_keys, new_keys, past_values, new_values, mask, 0.7, causal=True)
    torch.testing.assert_close(actual, expected)


@settings(max_examples=60, deadline=None)
@given(shape=shapes, masked=st.booleans(), seed=st.integers(0, 2**16))
def test_shared_attention_is_attention_over_keys_repeated_per_beam(shape, masked, seed):
    sentences, beams, heads, _, new, width = shape
    source = 5
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(sentences * beams, heads, new, width, generator=generator, dtype=torch.float64)
    keys, values = (
        torch.randn(sentences, heads, source, width, generator=generator, dtype=torch.float64) for _ in "kv"
    )
    mask = None
    if masked:  # right padding per sentence, the same for its beams, as the runtime repeats it
        lengths = torch.randint(1, source + 1, (sentences,), generator=generator)
        mask = (torch.arange(source)[None, :] < lengths[:, None]).repeat_interleave(beams, 0)[:, None, None, :]
    expected = plain_attention(
        query, keys.repeat_interleave(beams, 0), values.repeat_interleave(beams, 0), mask, width**-0.5
    )
    torch.testing.assert_close(shared_attention(query, keys, values, mask, None), expected)


@given(seed=st.integers(0, 2**16), appended=st.booleans())
def test_reordered_cache_appends_and_reorders_in_one(seed, appended):
    rng = np.random.default_rng(seed)
    past = rng.standard_normal((6, 2, 3, 4)).astype(np.float32)
    new = rng.standard_normal((6, 2, 1, 4)).astype(np.float32) if appended else None
    rows = rng.integers(0, 6, 6)
    expected = (np.concatenate([past, new], 2) if appended else past)[rows]
    actual = reordered_cache(past, new, rows)
    assert actual.flags.c_contiguous and np.array_equal(actual, expected)


def cache_copies(path) -> list[str]:
    """The `Concat` nodes of a step graph that read one of its cache inputs."""
    graph = onnx.load(str(path)).graph
    cache_inputs = {i.name for i in graph.input if i.name.startswith("past_key_values.")}
    return [n.name for n in graph.node if n.op_type == "Concat" and cache_inputs & set(n.input)]


def appended_form(monkeypatch):
    """Exports written with the appended self-attention cache where the model would take the indirect one."""
    real_layout = exporter.graph_layout
    monkeypatch.setattr(
        exporter, "graph_layout", lambda m: dataclasses.replace(real_layout(m), self_attention_cache="appended")
    )


def test_step_graph_copies_no_cache(stack_tokenizer, tmp_path, monkeypatch):
    """The appended form, a stock-attention family: the step graph's outputs are the step's own keys/values, no node
    reads a cache input into a `Concat`, and the cross-attention cache inputs have their own row axis ("sentences")."""
    appended_form(monkeypatch)
    model, source = build("xlpe-combination")
    manifest = exporter.export_model(model, stack_tokenizer, tmp_path / "onnx")
    assert manifest["format_version"] == 5 and manifest["layout"]["self_attention_cache"] == "appended"
    assert not cache_copies(tmp_path / "onnx" / DECODER_WITH_PAST_FILE)
    graph = onnx.load(str(tmp_path / "onnx" / DECODER_WITH_PAST_FILE)).graph
    for value in [*graph.input, *graph.output]:
        if value.name.startswith(("past_key_values.", "present.")):
            rows = value.type.tensor_type.shape.dim[0].dim_param
            per_sentence = value.name.startswith("past_key_values.") and ".encoder." in value.name
            assert rows == ("sentences" if per_sentence else "batch"), value.name

    translator = OnnxTranslator(tmp_path / "onnx", threads=1)
    layout = translator.layout
    feeds = {"decoder_input_ids": np.full((6, 1), 5, dtype=np.int64)}  # 2 sentences x 3 beams
    feeds["encoder_attention_mask"] = np.ones((6, 4), dtype=np.int64)
    feeds["encoder_hidden_states"] = np.zeros((6, 4, model.config.d_model), dtype=np.float32)
    for name in layout.cache_names("past_key_values"):
        rows, length = (2, 4) if ".encoder." in name else (6, 3)
        feeds[name] = np.ones((rows, layout.decoder_heads, length, layout.head_dim), dtype=np.float32)
    logits, *present = translator._run(translator.decoder_with_past, feeds)
    assert logits.shape[0] == 6
    assert [p.shape for p in present] == [(6, layout.decoder_heads, 1, layout.head_dim)] * len(present)
    assert_same_generation(model, translator, source)


def test_the_tracing_state_is_the_export_calls_own(stack_tokenizer, tmp_path):
    """Two exports, one after the other: each call's cache records live in its own `TracedCaches` (filled while
    the step graph is traced, not kept by the module), and transformers' attention functions are as before."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from xlpe.export import step_caches

    before = {name: ALL_ATTENTION_FUNCTIONS.get(name) for name in ("sdpa", "eager")}
    made = []
    real = step_caches.TracedCaches

    class Recorded(real):
        def __init__(self):
            super().__init__()
            made.append(self)

    model, _ = build("xlpe-combination")
    with pytest.MonkeyPatch.context() as patch:
        from xlpe.export import graphs

        patch.setattr(graphs, "TracedCaches", Recorded)
        for name in ("a", "b"):
            exporter.export_model(model, stack_tokenizer, tmp_path / name)
    assert len(made) == 2 and made[0] is not made[1]
    layers = model.config.decoder_layers
    for traced in made:  # the step graph's: one buffered stand-in per layer, its cross keys and values per sentence
        assert len(traced.buffered) == layers and len(traced.per_sentence) == 2 * layers
    assert {name: ALL_ATTENTION_FUNCTIONS.get(name) for name in ("sdpa", "eager")} == before
    assert not [name for name in vars(step_caches) if name.isupper() and isinstance(getattr(step_caches, name), dict)]


# --- the indirect cache ------------------------------------------------------------------------------


def explicit_history_attention(query, new_keys, new_values, key_buffer, value_buffer, indirection, scaling):
    """The indirect form spelled out: each hypothesis's keys gathered position by position from the beam rows its
    history names, joined with its own new key, then plain attention."""
    rows, heads, _, width = query.shape
    sentences, beams, length = indirection.shape
    outputs = []
    for row in range(rows):
        sentence, beam = divmod(row, beams)
        history = [sentence * beams + int(indirection[sentence, beam, t]) for t in range(length)]
        keys = torch.stack([key_buffer[h, :, t] for t, h in enumerate(history)] + [new_keys[row, :, 0]], dim=1)
        values = torch.stack([value_buffer[h, :, t] for t, h in enumerate(history)] + [new_values[row, :, 0]], dim=1)
        outputs.append(plain_attention(query[row : row + 1], keys[None], values[None], None, scaling))
    return torch.cat(outputs)


indirect_shapes = st.tuples(
    st.integers(1, 3),  # sentences
    st.integers(1, 4),  # beams
    st.integers(1, 3),  # heads
    st.integers(0, 5),  # cached positions
    st.integers(1, 3),  # room left in the buffer
    st.sampled_from([1, 4, 8]),  # head width
)


def indirect_case(shape, seed):
    sentences, beams, heads, length, room, width = shape
    generator = torch.Generator().manual_seed(seed)
    rows = sentences * beams
    query, new_keys, new_values = (torch.randn(rows, heads, 1, width, generator=generator) for _ in range(3))
    key_buffer, value_buffer = (torch.randn(rows, heads, length + room, width, generator=generator) for _ in range(2))
    indirection = torch.randint(0, beams, (sentences, beams, length), generator=generator)
    return query, new_keys, new_values, key_buffer, value_buffer, indirection, width**-0.5


@settings(max_examples=60, deadline=None)
@given(shape=indirect_shapes, seed=st.integers(0, 2**16))
def test_indirect_attention_reads_each_position_from_the_beam_its_history_names(shape, seed):
    case = indirect_case(shape, seed)
    output, present_keys, present_values = indirect_self_attention(*case)
    expected = explicit_history_attention(*case)
    assert output.shape == expected.shape and torch.allclose(output, expected, atol=1e-5)
    _, new_keys, new_values, key_buffer, value_buffer, indirection, _ = case
    length = indirection.shape[-1]
    for present, buffer, new in ((present_keys, key_buffer, new_keys), (present_values, value_buffer, new_values)):
        assert torch.equal(present[:, :, length], new[:, :, 0])  # the step's keys at `length`, in every row
        assert torch.equal(present[:, :, :length], buffer[:, :, :length])  # nothing else moved
        assert torch.equal(present[:, :, length + 1 :], buffer[:, :, length + 1 :])


class _IndirectModule(torch.nn.Module):
    def __init__(self, scaling: float):
        super().__init__()
        self.scaling = scaling

    def forward(self, query, new_keys, new_values, key_buffer, value_buffer, indirection):
        return IndirectSelfAttention.apply(
            query, new_keys, new_values, key_buffer, value_buffer, indirection, self.scaling
        )


@pytest.mark.parametrize("shape", [(2, 3, 2, 4, 2, 8), (1, 1, 1, 0, 1, 4), (3, 4, 2, 6, 3, 4)])
def test_the_exported_kernel_matches_its_torch_reference_in_place(shape, tmp_path):
    """`IndirectSelfAttention` exported (one onnxruntime `DecoderMaskedMultiHeadAttention`), run with its buffers
    bound as input and output: the reference's output, and the step's keys written into the caller's buffers."""
    import onnxruntime as ort

    case = indirect_case(shape, seed=sum(shape))
    names = ["query", "new_keys", "new_values", "key_buffer", "value_buffer", "indirection"]
    path = tmp_path / "indirect.onnx"
    torch.onnx.export(
        _IndirectModule(case[6]),
        case[:6],
        str(path),
        input_names=names,
        output_names=["output", "present_keys", "present_values"],
        dynamic_axes={"indirection": {2: "length"}, "key_buffer": {2: "capacity"}, "value_buffer": {2: "capacity"}},
        opset_version=17,
        dynamo=False,
        custom_opsets={"com.microsoft": 1},
    )
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    buffers = [case[3].numpy().copy(), case[4].numpy().copy()]
    values = [ort.OrtValue.ortvalue_from_numpy(buffer) for buffer in buffers]
    binding = session.io_binding()
    for name, tensor in zip(names[:3], case[:3]):
        binding.bind_cpu_input(name, tensor.numpy())
    binding.bind_cpu_input("indirection", case[5].numpy())
    binding.bind_output("output")  # outputs come back in the order they were bound
    for name, output, value in zip(("key_buffer", "value_buffer"), ("present_keys", "present_values"), values):
        binding.bind_ortvalue_input(name, value)
        binding.bind_ortvalue_output(output, value)
    session.run_with_iobinding(binding)
    expected, present_keys, present_values = indirect_self_attention(*case)
    assert np.allclose(binding.get_outputs()[0].numpy(), expected.numpy(), atol=1e-5)
    assert np.array_equal(buffers[0], present_keys.numpy()) and np.array_equal(buffers[1], present_values.numpy())


def test_format_4_step_graph_reads_and_writes_its_buffers(stack_tokenizer, tmp_path):
    """The default export of a stock-attention family: one indirect-attention kernel per decoder layer, no node
    copies a self-attention cache input, the self-attention outputs are the buffers (the capacity axis)."""
    model, _ = build("xlpe-combination")
    manifest = exporter.export_model(model, stack_tokenizer, tmp_path / "onnx")
    assert manifest["format_version"] == 5 and manifest["layout"]["self_attention_cache"] == "indirect"
    graph = onnx.load(str(tmp_path / "onnx" / DECODER_WITH_PAST_FILE)).graph
    kernels = [n for n in graph.node if n.op_type == "DecoderMaskedMultiHeadAttention"]
    assert len(kernels) == model.config.decoder_layers
    assert not cache_copies(tmp_path / "onnx" / DECODER_WITH_PAST_FILE)
    for value in [*graph.input, *graph.output]:
        if ".decoder." in value.name:
            assert value.type.tensor_type.shape.dim[2].dim_param == "capacity", value.name
    assert [i.name for i in graph.input][-1] == "cache_indirection"


@pytest.mark.parametrize("name", ["xlpe-combination", "dpe", "mvpe_pos-decoder-tags-learned", "dpe+rotary-decoder"])
def test_format_4_translates_as_pytorch_while_its_buffers_grow(name, stack_tokenizer, tmp_path, monkeypatch):
    """Buffers of two positions at first, so every call doubles them several times: still PyTorch's tokens,
    greedy and beam."""
    monkeypatch.setattr(runtime, "INITIAL_CACHE_CAPACITY", 2)
    model, source = build(name)
    manifest = exporter.export_model(model, stack_tokenizer, tmp_path / "onnx")
    assert manifest["layout"]["self_attention_cache"] == "indirect"
    assert_same_generation(model, OnnxTranslator(tmp_path / "onnx", threads=1), source)


def test_attention_with_its_own_terms_is_written_with_the_appended_cache(stack_tokenizer, tmp_path):
    """Relative-position self-attention has no indirect form: the same format version, the layout says so."""
    model, _ = build("xlpe-combination+relative-decoder-only")
    manifest = exporter.export_model(model, stack_tokenizer, tmp_path / "onnx")
    assert manifest["format_version"] == 5 and manifest["layout"]["self_attention_cache"] == "appended"
    graph = onnx.load(str(tmp_path / "onnx" / DECODER_WITH_PAST_FILE)).graph
    assert not [n for n in graph.node if n.op_type == "DecoderMaskedMultiHeadAttention"]


def test_an_onnxruntime_without_the_kernel_gets_the_appended_cache_and_an_indirect_export_is_refused_by_name(
    stack_tokenizer, tmp_path, monkeypatch
):
    """`indirect_attention_available` (checked numerically: the kernel must read the history) decides the format;
    an indirect export loaded where the kernel is missing is a one-line ValueError, not onnxruntime's error."""
    from xlpe.export import graphs
    from xlpe.export.step_caches import indirect_attention_available

    assert indirect_attention_available()  # the pinned onnxruntime has it
    model, source = build("dpe")
    exporter.export_model(model, stack_tokenizer, tmp_path / "indirect")
    monkeypatch.setattr(graphs, "indirect_attention_available", lambda: False)
    manifest = exporter.export_model(model, stack_tokenizer, tmp_path / "appended")
    assert manifest["layout"]["self_attention_cache"] == "appended"
    assert_same_generation(model, OnnxTranslator(tmp_path / "appended", threads=1), source, beams=(3,))
    monkeypatch.setattr(runtime, "indirect_attention_available", lambda: False)
    with pytest.raises(ValueError, match="indirect self-attention cache .* upgrade onnxruntime, or export the model"):
        OnnxTranslator(tmp_path / "indirect", threads=1)
