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


GQA_INPUTS = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
              "cos_cache", "sin_cache", "position_ids"]  # fmt: skip
INTEGERS = {"seqlens_k": proto.INT32, "total_sequence_length": proto.INT32, "position_ids": proto.INT64}


def gqa_prompt(q, k, v, past=None, extra=None, present=False, **attributes):
    """GroupQueryAttention (com.microsoft) at batch 1: q (tokens, heads, head_size), k and v
    (tokens, kv_heads, head_size), in one dtype, after past = (keys, values) of shape
    (kv_heads, cached, head_size) (default: none cached); extra: more inputs by name
    (cos_cache, sin_cache, position_ids). Returns the output (tokens, heads, head_size), and
    with present=True also the present keys (kv_heads, total, head_size)."""
    tokens, heads, size = q.shape
    kv_heads = k.shape[1]
    if past is None:
        past = (np.zeros((kv_heads, 0, size), q.dtype),) * 2
    total = past[0].shape[1] + tokens
    feeds = {"query": q.reshape(1, tokens, -1), "key": k.reshape(1, tokens, -1), "value": v.reshape(1, tokens, -1),
             "past_key": past[0][None], "past_value": past[1][None], "seqlens_k": np.array([total - 1], np.int32),
             "total_sequence_length": np.array(total, np.int32), **(extra or {})}  # fmt: skip
    names = [n if n in feeds else "" for n in GQA_INPUTS]
    while not names[-1]:
        names.pop()
    f = ELEMENTS[q.dtype.type]
    inputs = [proto.value_info(n, INTEGERS.get(n, f), list(feeds[n].shape)) for n in names if n]
    outputs = [proto.value_info("output", f, [1, tokens, heads * size])]
    outputs += [proto.value_info(n, f, [1, kv_heads, total, size]) for n in ("present_key", "present_value")]
    attributes = {"num_heads": heads, "kv_num_heads": kv_heads, **attributes}
    outs = ["output", "present_key", "present_value"]
    node = proto.node("GroupQueryAttention", names, outs, "com.microsoft", attributes)
    session = _session(node, inputs, outputs, {"": 21, "com.microsoft": 1})
    out, keys, _ = session.run(None, feeds)
    out = out.reshape(tokens, heads, size)
    return (out, keys[0]) if present else out


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
