"""The two one-node graphs the runtime builds itself, kept as their serialized bytes so that translating needs
onnxruntime alone (not the `onnx` package): the search's log_softmax (`log_softmax_session`) and the probe of
onnxruntime's `DecoderMaskedMultiHeadAttention` that says whether the indirect step graph can run
(`indirect_attention_available`). `log_softmax_model` and `probe_model` build the same bytes with `onnx.helper`
(tests/export/test_serving.py checks that they are equal).
"""

from __future__ import annotations

import base64
import functools

import numpy as np

LOG_SOFTMAX_MODEL = base64.b64decode(
    "CAg6jQEKNQoGc2NvcmVzEglsb2dfcHJvYnMiCkxvZ1NvZnRtYXgqFAoEYXhpcxj///////////8BoAECEgtsb2dfc29mdG1heFohCgZzY29yZXMS"
    "FwoVCAESEQoGEgRyb3dzCgcSBXZvY2FiYiQKCWxvZ19wcm9icxIXChUIARIRCgYSBHJvd3MKBxIFdm9jYWJCBAoAEA0="
)
PROBE_MODEL = base64.b64decode(
    "CAg68AMKrgEKAXEKAWsKAXYKAAoACgJwawoCcHYKBmxlbmd0aAoFYmVhbXMKC2luZGlyZWN0aW9uEgF5EglwcmVzZW50X2sSCXByZXNlbnRfdiIf"
    "RGVjb2Rlck1hc2tlZE11bHRpSGVhZEF0dGVudGlvbioQCgludW1faGVhZHMYAaABAiogChlwYXN0X3ByZXNlbnRfc2hhcmVfYnVmZmVyGAGgAQI6"
    "DWNvbS5taWNyb3NvZnQSBXByb2JlWhcKAXESEgoQCAESDAoCCAIKAggBCgIIAloXCgFrEhIKEAgBEgwKAggCCgIIAQoCCAJaFwoBdhISChAIARIM"
    "CgIIAgoCCAEKAggCWhwKAnBrEhYKFAgBEhAKAggCCgIIAQoCCAMKAggCWhwKAnB2EhYKFAgBEhAKAggCCgIIAQoCCAMKAggCWhQKBmxlbmd0aBIK"
    "CggIBhIECgIIAVoTCgViZWFtcxIKCggIBhIECgIIAVohCgtpbmRpcmVjdGlvbhISChAIBhIMCgIIAQoCCAIKAggDYhcKAXkSEgoQCAESDAoCCAIK"
    "AggBCgIIAmIjCglwcmVzZW50X2sSFgoUCAESEAoCCAIKAggBCgIIAwoCCAJiIwoJcHJlc2VudF92EhYKFAgBEhAKAggCCgIIAQoCCAMKAggCQgQK"
    "ABARQhEKDWNvbS5taWNyb3NvZnQQAQ=="
)
PROBE_ROWS, PROBE_WIDTH, PROBE_CAPACITY, PROBE_LENGTH = 2, 2, 3, 2


def log_softmax_model() -> bytes:
    """onnxruntime's LogSoftmax over the last axis of float32 [rows, vocab] scores, built with `onnx`."""
    from onnx import TensorProto, helper

    scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["rows", "vocab"])
    log_probs = helper.make_tensor_value_info("log_probs", TensorProto.FLOAT, ["rows", "vocab"])
    node = helper.make_node("LogSoftmax", ["scores"], ["log_probs"], axis=-1)
    model = helper.make_model(
        helper.make_graph([node], "log_softmax", [scores], [log_probs]), opset_imports=[helper.make_opsetid("", 13)]
    )
    model.ir_version = 8  # any onnxruntime the package accepts reads it
    return model.SerializeToString()


def probe_model() -> bytes:
    """One com.microsoft `DecoderMaskedMultiHeadAttention` node (one head, buffers shared between past and present,
    `cache_indirection`), of the probe's sizes, built with `onnx`."""
    from onnx import TensorProto, helper

    rows, width, capacity = PROBE_ROWS, PROBE_WIDTH, PROBE_CAPACITY
    tensor = helper.make_tensor_value_info
    names = ["q", "k", "v", "", "", "pk", "pv", "length", "beams", "indirection"]
    node = helper.make_node(
        "DecoderMaskedMultiHeadAttention",
        names,
        ["y", "present_k", "present_v"],
        domain="com.microsoft",
        num_heads=1,
        past_present_share_buffer=1,
    )
    inputs = [tensor(name, TensorProto.FLOAT, [rows, 1, width]) for name in "qkv"]
    inputs += [tensor(name, TensorProto.FLOAT, [rows, 1, capacity, width]) for name in ("pk", "pv")]
    inputs += [tensor("length", TensorProto.INT32, [1]), tensor("beams", TensorProto.INT32, [1])]
    inputs += [tensor("indirection", TensorProto.INT32, [1, rows, capacity])]
    outputs = [tensor("y", TensorProto.FLOAT, [rows, 1, width])]
    outputs += [tensor(name, TensorProto.FLOAT, [rows, 1, capacity, width]) for name in ("present_k", "present_v")]
    graph = helper.make_graph([node], "probe", inputs, outputs)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 8
    return model.SerializeToString()


def log_softmax_session(options):
    """`normalize(scores) -> log_probs`: onnxruntime's LogSoftmax over the last axis of float32 [rows, vocab] scores,
    as `search`'s `normalize`, run with the given session options. On one beam step's scores (64 hypotheses x 8,000
    tokens, one thread) it takes ~0.6 ms against numpy's ~2.1 ms (vectorised exp); it is the search's one pass over
    a step's whole scores (search.py, `SearchSettings.beam_log_probs`)."""
    import onnxruntime as ort

    session = ort.InferenceSession(LOG_SOFTMAX_MODEL, options, providers=["CPUExecutionProvider"])

    def normalize(values: np.ndarray) -> np.ndarray:
        return session.run(None, {"scores": values})[0]

    return normalize


def probe_feeds() -> tuple[dict, np.ndarray]:
    """(the probe's feeds, what the kernel must give for `y` [rows, width]): two beams of one sentence whose
    `cache_indirection` makes each read one earlier position from the other's buffer row (a kernel that ignored it
    would give other numbers); the expected output is the attention over the positions it names plus the step's
    own key (step_caches.py's `indirect_self_attention` with one head)."""
    rows, width, capacity, length = PROBE_ROWS, PROBE_WIDTH, PROBE_CAPACITY, PROBE_LENGTH
    generator = np.random.default_rng(0)
    query, keys, values = (generator.standard_normal((rows, 1, width), dtype=np.float32) for _ in range(3))
    key_buffer, value_buffer = (generator.standard_normal((rows, 1, capacity, width), dtype=np.float32) for _ in "kv")
    indirection = np.array([[[0, 1], [1, 0]]], dtype=np.int32)  # [sentences, beams, length]
    expected = np.empty((rows, width), dtype=np.float64)
    for row in range(rows):  # the reference: 2 rows of 3 positions
        sources = indirection[0, row, :length]
        past_keys = key_buffer[sources, 0, np.arange(length)]  # [length, width]
        past_values = value_buffer[sources, 0, np.arange(length)]
        all_keys = np.concatenate([past_keys, keys[row]], axis=0).astype(np.float64)
        all_values = np.concatenate([past_values, values[row]], axis=0).astype(np.float64)
        scores = all_keys @ query[row, 0].astype(np.float64) * width**-0.5
        weights = np.exp(scores - scores.max())
        expected[row] = (weights / weights.sum()) @ all_values
    feeds = {"q": query, "k": keys, "v": values, "pk": key_buffer, "pv": value_buffer}
    feeds.update(length=np.array([length], dtype=np.int32), beams=np.array([rows], dtype=np.int32))
    feeds["indirection"] = np.pad(indirection, [(0, 0), (0, 0), (0, capacity - length)])
    return feeds, expected


@functools.lru_cache(maxsize=1)
def indirect_attention_available() -> bool:
    """Whether the installed onnxruntime runs `DecoderMaskedMultiHeadAttention` on the CPU *and* reads the cache
    through `cache_indirection` (the indirect step graph): the probe graph (`probe_model`) on `probe_feeds`."""
    try:
        import onnxruntime as ort
    except ImportError:
        return False
    feeds, expected = probe_feeds()
    try:
        session = ort.InferenceSession(PROBE_MODEL, providers=["CPUExecutionProvider"])
        output = session.run(["y"], feeds)[0]
    except Exception:  # an onnxruntime without the kernel: its error types differ between releases
        return False
    return bool(np.allclose(output.reshape(PROBE_ROWS, PROBE_WIDTH), expected, atol=1e-5))


__all__ = [
    "LOG_SOFTMAX_MODEL",
    "PROBE_MODEL",
    "indirect_attention_available",
    "log_softmax_model",
    "log_softmax_session",
    "probe_feeds",
    "probe_model",
]
