#!/usr/bin/env python3
"""The attention features through the exec door: tests/python/features_engine.py's numpy
engines served by kvfuzz.exec_server, whose chunks hold lists (numpy arrays in, lists out).
For the ctests python_exec_features and python_exec_features_sink_bug, and with
--quantized (the quantized KV caches) python_exec_kv_formats and
python_exec_kv_formats_v_scale_bug, and with --latent (MLA's value read from its key)
python_exec_value_from_key and python_exec_value_from_key_bug:

    kvfuzz check --engine "exec:.venv/bin/python tests/python/features_exec_engine.py [--quantized | --latent] [--bug]"
"""

import os
import sys
from types import SimpleNamespace

import numpy as np

from kvfuzz.exec_server import serve

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "python-engine"))

from features_engine import (  # noqa: E402
    FeaturesEngine,
    Fp8VScaleDroppedEngine,
    LatentAtKeyEndEngine,
    LatentEngine,
    QuantizedEngine,
    SinkPrefillOnlyEngine,
)

BUGGY = {
    SinkPrefillOnlyEngine: " with the sink bug",
    Fp8VScaleDroppedEngine: " with V's scale dropped",
    LatentAtKeyEndEngine: " reading values from the key's end",
}


def served(base):
    class Served(base):
        name = "features-numpy (exec)" + BUGGY.get(base, "")

        def step(self, chunks):
            arrays = [
                SimpleNamespace(seq=c.seq, tokens=len(c.q), q=np.asarray(c.q, dtype=np.float32),
                                k=np.asarray(c.k, dtype=np.float32),
                                v=np.asarray(c.v, dtype=np.float32))
                for c in chunks
            ]
            return [(positions.tolist(), out.tolist()) for positions, out in super().step(arrays)]

    return Served


if __name__ == "__main__":
    flags = set(sys.argv[1:])
    if "--quantized" in flags:
        serve(served(Fp8VScaleDroppedEngine if "--bug" in flags else QuantizedEngine))
    elif "--latent" in flags:
        serve(served(LatentAtKeyEndEngine if "--bug" in flags else LatentEngine))
    else:
        serve(served(SinkPrefillOnlyEngine if "--bug" in flags else FeaturesEngine))
