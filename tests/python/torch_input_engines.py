"""The numpy engine asking for torch tensors (its `inputs`) and checking it gets them: run
by test_api.py in an interpreter of its own, so that torch stays out of pytest's."""

import types

import torch
from numpy_engine import NumpyEngine


def _as_numpy(chunk):
    return types.SimpleNamespace(
        seq=chunk.seq,
        tokens=chunk.tokens,
        q=chunk.q.cpu().numpy(),
        k=chunk.k.cpu().numpy(),
        v=chunk.v.cpu().numpy(),
    )


class TorchInputs(NumpyEngine):
    inputs = "torch"

    def step(self, chunks):
        for chunk in chunks:
            for x in (chunk.q, chunk.k, chunk.v):
                assert isinstance(x, torch.Tensor) and x.dtype == torch.float32, type(x)
                assert x.device.type == "cpu" and x.shape[0] == chunk.tokens
        return super().step([_as_numpy(chunk) for chunk in chunks])


class CudaInputs(NumpyEngine):
    inputs = "torch:cuda"

    def step(self, chunks):
        for chunk in chunks:
            assert all(x.device.type == "cuda" for x in (chunk.q, chunk.k, chunk.v))
        return super().step([_as_numpy(chunk) for chunk in chunks])
