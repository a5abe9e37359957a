"""One-node ONNX Runtime sessions for the repro scripts of this folder: onnxruntime and
numpy only (and ../onnx_proto.py, which encodes the model bytes by hand; onnx.helper
would build the same model)."""

import os
import sys

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import onnx_proto as proto  # noqa: E402

ort.set_default_logger_severity(3)
ELEMENTS = {np.float32: proto.FLOAT, np.float16: proto.FLOAT16}


def _session(node, inputs, outputs, opsets):
    model = proto.model(node, inputs, outputs, opsets)
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"])


def gqa_prompt(q, k, v, **attributes):
    """GroupQueryAttention (com.microsoft) over one prompt with an empty past, batch 1:
    q (tokens, heads, head_size), k and v (tokens, kv_heads, head_size), in one dtype.
    Returns the output (tokens, heads, head_size)."""
    tokens, heads, size = q.shape
    kv_heads = k.shape[1]
    f = ELEMENTS[q.dtype.type]
    names = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length"]
    inputs = [proto.value_info(n, f, [1, tokens, h * size]) for n, h in zip(names, (heads, kv_heads, kv_heads))]
    inputs += [proto.value_info(n, f, [1, kv_heads, 0, size]) for n in names[3:5]]
    inputs += [proto.value_info(names[5], proto.INT32, [1]), proto.value_info(names[6], proto.INT32, [])]
    outputs = [proto.value_info("output", f, [1, tokens, heads * size])]
    outputs += [proto.value_info(n, f, [1, kv_heads, tokens, size]) for n in ("present_key", "present_value")]
    attributes = {"num_heads": heads, "kv_num_heads": kv_heads, **attributes}
    node = proto.node("GroupQueryAttention", names, ["output", "present_key", "present_value"], "com.microsoft", attributes)
    session = _session(node, inputs, outputs, {"": 21, "com.microsoft": 1})
    empty = np.zeros((1, kv_heads, 0, size), q.dtype)
    feeds = {"query": q.reshape(1, tokens, -1), "key": k.reshape(1, tokens, -1), "value": v.reshape(1, tokens, -1),
             "past_key": empty, "past_value": empty, "seqlens_k": np.array([tokens - 1], np.int32),
             "total_sequence_length": np.array(tokens, np.int32)}  # fmt: skip
    return session.run(None, feeds)[0].reshape(tokens, heads, size)


def attention_prompt(q, k, v, opset=23, **attributes):
    """The ONNX Attention operator over one prompt, 4-D inputs (1, heads, tokens, size) made
    from q (tokens, heads, size), k and v (tokens, kv_heads, size). Returns (tokens, heads, size)."""
    f = ELEMENTS[q.dtype.type]
    arrays = [x.transpose(1, 0, 2)[None] for x in (q, k, v)]
    inputs = [proto.value_info(n, f, list(a.shape)) for n, a in zip(("Q", "K", "V"), arrays)]
    outputs = [proto.value_info("Y", f, [1, q.shape[1], q.shape[0], v.shape[2]])]
    node = proto.node("Attention", ["Q", "K", "V"], ["Y"], "", attributes)
    session = _session(node, inputs, outputs, {"": opset})
    return session.run(None, dict(zip(("Q", "K", "V"), arrays)))[0][0].transpose(1, 0, 2)
