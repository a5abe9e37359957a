"""What the ONNX Runtime adapters share: dtypes, sessions, and (from adapters/common's
kv_adapter, which every Python adapter shares) poison, kvfuzz's RoPE in float64, the
per-sequence cache of the concatenating paths and the two doors.
"""

import functools
import os
import sys

import numpy as np
import onnxruntime as ort

ort.set_default_logger_severity(3)  # errors come back as exceptions, hence as error replies

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(HERE, "..", "common"))

import onnx_proto as proto  # noqa: E402
from kv_adapter import (  # noqa: E402,F401  (the ORT engines' one namespace: common.X)
    CacheHistory,
    Caches,
    check_fork,
    JsonRows,
    poison_value,
    rope_angles,
    rotate,
    round_up,
    serve_exec,
)
from kv_adapter import check_step as check_any_step  # noqa: E402

NUMPY_DTYPES = {"f16": np.float16, "f32": np.float32}
ONNX_DTYPES = {"f16": proto.FLOAT16, "f32": proto.FLOAT}


@functools.lru_cache(maxsize=128)
def session(model_bytes):
    """An InferenceSession per distinct model: sessions are stateless, so one process (an
    exec worker, or a forked in-process worker) builds each model once for all its cases."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # kvfuzz runs cases side by side; results do not depend on it
    options.log_severity_level = 3
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def caches(config, np_dtype, key_width, value_width):
    """Per-sequence numpy caches in the kernel's dtype (kv_adapter.Caches)."""
    return Caches(config, lambda shape: np.zeros(shape, np_dtype), key_width, value_width)


def check_step(chunks, caches, config, dtype):
    check_any_step(chunks, caches, config, dtype, "ORT's")
