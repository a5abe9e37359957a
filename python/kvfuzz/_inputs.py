"""What a Python engine's chunk.q, chunk.k and chunk.v are: float32 numpy arrays by default,
or torch tensors when the engine's class says so, for an engine written in torch:

    inputs = "torch"          # torch tensors on the host, sharing the arrays' memory (DLPack)
    inputs = "torch:cuda"     # the same, then moved to that device (any torch device name)

kvfuzz's engine wrapper (python/src/py_engine.cpp) asks input_converter once per engine."""

from __future__ import annotations

from typing import Any, Callable, Optional


def input_converter(engine: Any) -> Optional[Callable[[Any], Any]]:
    """None for numpy inputs (the default), else the function that makes each input array
    what the engine's `inputs` asks for. Raises ValueError naming `inputs` and what was
    expected when the attribute makes no sense."""
    kind = getattr(engine, "inputs", "numpy")
    if kind == "numpy":
        return None
    if not isinstance(kind, str) or not (kind == "torch" or kind.startswith("torch:")):
        raise ValueError(f"inputs: expected 'numpy', 'torch' or 'torch:DEVICE', got {kind!r}")
    import torch

    device_name = kind.partition(":")[2]
    device = None
    if device_name:
        try:
            device = torch.device(device_name)
        except RuntimeError as error:
            raise ValueError(f"inputs: {kind!r} names no torch device ({error})") from None

    def convert(array: Any) -> Any:
        tensor = torch.from_dlpack(array)  # no copy: the tensor is the array's memory
        return tensor if device is None else tensor.to(device)

    return convert


def preload(factory: Any) -> None:
    """Imports torch here when the engine class asks for torch inputs, before kvfuzz forks
    its workers: each forked worker then has it already (an import of torch costs seconds,
    and a check forks a worker per case)."""
    kind = getattr(factory, "inputs", "numpy")
    if isinstance(kind, str) and kind.startswith("torch"):
        import torch  # noqa: F401
