#!/usr/bin/env python3
"""O1: OpenVINO's CPU PagedAttentionExtension drops ALiBi when sliding_window is set.

    .venv/bin/python adapters/openvino/repro/alibi_with_window.py

openvino and numpy alone (the op built by ../paged_attention_op.py, which uses only the
opset API). One head of size 1, two tokens with q = k = 0 and values 0 and 1, an ALiBi slope
of 0.25 (logit += slope * (key_pos - query_pos)). At position 1 both keys are visible
whether the window is 2 or absent: the logits are -0.25 and 0, so the row is
1 / (1 + e^-0.25) = 0.5622. Without a window the op returns that; with sliding_window = 2 it
returns 0.5, the plain mean, as if the slopes were not given.
"""

import os
import sys

import numpy as np
import openvino as ov

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import paged_attention_op as op  # noqa: E402

model = op.build(1, 1, 1, 1)
request = model.create_infer_request()


def row_at_1(window):
    feeds = {
        "query": np.zeros((2, 1), np.float32),
        "key": np.zeros((2, 1), np.float32),
        "value": np.array([[0.0], [1.0]], np.float32),
        "past_lens": np.array([0], np.int32),
        "subsequence_begins": np.array([0, 2], np.int32),
        "block_indices": np.array([0], np.int32),
        "block_indices_begins": np.array([0, 1], np.int32),
        "scale": np.array(1.0, np.float32),
        "sliding_window": np.array(window, np.int32),
        "alibi_slopes": np.array([0.25], np.float32),
        "max_context_len": np.array(2, np.int32),
    }
    for name, et, shape in op.INPUTS:
        if name not in feeds:
            feeds[name] = np.zeros((0,) * len(shape(1, 1, 1, 1)), op.NP[et])
    feeds["key_cache"] = np.zeros((1, 1, op.BLOCK, 1), np.float32)
    feeds["value_cache"] = np.zeros((1, 1, op.BLOCK, 1), np.float32)
    for name, array in feeds.items():
        request.set_tensor(name, op.tensor(array))
    request.infer()
    return float(request.get_output_tensor(0).data[1, 0])


print(f"openvino {ov.__version__}")
print(f"expected 1 / (1 + e^-0.25) = {1 / (1 + np.exp(-0.25)):.4f}")
for window in (0, 2):
    print(f"sliding_window {window}: row at position 1 = {row_at_1(window):.4f}")
