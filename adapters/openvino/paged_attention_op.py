"""OpenVINO's PagedAttentionExtension op (openvino 2026.4.1), built with the Python opset API
and compiled for the CPU plugin: the op adapters/openvino/ov_paged_engine.py calls.

The op takes 28 inputs in this order (src/core/src/op/paged_attention.cpp,
validate_and_infer_types, checks get_input_size() == 28 in this release; the input list
changed between releases: 14, 17, 25, 28, which is why setup pins the version). The CPU
plugin reads the first 21 (its executor, executor_pa.cpp). Every convention the adapter
relies on was measured against a float64 reference (adapters/openvino/README.md): the
caches are [blocks, kv_heads, 32, width] and the op writes new tokens' K and V into the
tensors it is given, in place; the node needs num_k_heads, k_head_size, num_v_heads and
v_head_size in its runtime info (compilation fails without them); `_PagedAttentionExtension`
is openvino.op's name for it (no public constructor in this release)."""

import numpy as np
import openvino as ov
import openvino.opset13 as ops
from openvino.op import _PagedAttentionExtension

F32, I32, U8 = ov.Type.f32, ov.Type.i32, ov.Type.u8
BLOCK = 32  # the CPU plugin asserts "block size must be 32" (executor_pa.cpp)

# (name, element type, partial shape); H = q heads, Hk = kv heads, S / SV = key / value head size
INPUTS = [
    ("query", F32, lambda H, Hk, S, SV: [-1, H * S]),            # [tokens, H*S]
    ("key", F32, lambda H, Hk, S, SV: [-1, Hk * S]),             # [tokens, Hk*S]
    ("value", F32, lambda H, Hk, S, SV: [-1, Hk * SV]),          # [tokens, Hk*SV]
    ("key_cache", F32, lambda H, Hk, S, SV: [-1, Hk, BLOCK, S]),   # [blocks, Hk, 32, S]; plugin resets type/shape
    ("value_cache", F32, lambda H, Hk, S, SV: [-1, Hk, BLOCK, SV]),
    ("past_lens", I32, lambda *a: [-1]),                          # [seqs]
    ("subsequence_begins", I32, lambda *a: [-1]),                 # [seqs+1], token offsets into query
    ("block_indices", I32, lambda *a: [-1]),                      # [total blocks], physical ids
    ("block_indices_begins", I32, lambda *a: [-1]),               # [seqs+1], offsets into block_indices
    ("scale", F32, lambda *a: []),                                # scalar; 0 -> 1/sqrt(S)
    ("sliding_window", I32, lambda *a: []),                       # scalar; 0 -> none
    ("alibi_slopes", F32, lambda *a: [-1]),                       # [H] or [0]
    ("max_context_len", I32, lambda *a: []),                      # scalar
    ("score_aggregation_window", I32, lambda *a: [-1]),           # [seqs] or [0]
    ("rotated_block_indices", I32, lambda *a: [-1]),              # [0]
    ("rotation_deltas", I32, lambda *a: [-1, -1]),                # [0,0]
    ("rotation_trig_lut", F32, lambda *a: [-1, -1]),              # [0,0]
    ("xattention_threshold", F32, lambda *a: [-1]),               # [0]
    ("xattention_block_size", I32, lambda *a: []),                # scalar
    ("xattention_stride", I32, lambda *a: []),                    # scalar
    ("sinks", F32, lambda *a: [-1, -1, -1, -1]),                  # [1,H,1,1] or [0,0,0,0]
    ("adaptive_rkv_start_size", I32, lambda *a: []),
    ("adaptive_rkv_evictable_sizes", I32, lambda *a: [-1]),
    ("adaptive_rkv_diversity_block_set_indices", I32, lambda *a: [-1]),
    ("adaptive_rkv_diversity_block_set_indices_begins", I32, lambda *a: [-1]),
    ("token_type_ids", I32, lambda *a: [-1]),
    ("qq_bias", U8, lambda *a: [-1]),
    ("qq_bias_begins", I32, lambda *a: [-1]),
]
NP = {F32: np.float32, I32: np.int32, U8: np.uint8}

_core = ov.Core()


def tensor(array):
    """An ov.Tensor holding a copy of array (ov.Tensor(numpy 0-d) gives shape [1], not [])."""
    array = np.asarray(array, order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
    t = ov.Tensor(ov.Type(array.dtype), ov.Shape(list(array.shape)))
    if array.size:
        t.data[...] = array
    return t


def build(H, Hk, S, SV, kv_precision="f32", infer_precision="f32", rt_info=True, threads=1):
    params = [ops.parameter(shape(H, Hk, S, SV), et, name=name) for name, et, shape in INPUTS]
    pa = _PagedAttentionExtension([p.output(0) for p in params])
    if rt_info:  # ConvertPagedAttnInputs reads these to shape the cache parameters
        rt = pa.get_rt_info()
        rt["num_k_heads"], rt["k_head_size"], rt["num_v_heads"], rt["v_head_size"] = Hk, S, Hk, SV
    model = ov.Model([pa.output(0)], params, "paged_attention")
    config = {"INFERENCE_PRECISION_HINT": infer_precision, "KV_CACHE_PRECISION": kv_precision,
              "INFERENCE_NUM_THREADS": threads}
    return _core.compile_model(model, "CPU", config)


