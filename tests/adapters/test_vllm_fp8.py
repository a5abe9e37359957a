"""vLLM's fp8 KV caches through the adapter, in-process, on a CPU with AVX-512 (the builds
that have them; tests/adapters/vllm_tests.cmake runs this file only there). The pool's
poison lands where the kernel keeps each slot (K transposed inside a block, V by slot), and
the writer truncates toward zero where kvfuzz's fp8 formats round to nearest even
(docs/findings/vllm.md, V4). Loads the AVX-512 build without BF16 (every AVX-512 CPU runs
it); the kvfuzz package is imported as test_vllm_inprocess.py does."""

import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_vllm_inprocess import FIXTURES, kvfuzz, vllm_cpu_engine  # noqa: E402

FP8 = ["--library", "avx512", "--finite-poison", "--no-bf16", "--no-softcap", "--fp8"]


def config(kv_heads=2, head_dim=32):
    return type("C", (), {"kv_heads": kv_heads, "head_dim": head_dim})()


def test_fp8_pool_poisons_the_slots_the_kernel_keeps():
    vllm_cpu_engine.factory(FP8)  # loads the build
    pool = vllm_cpu_engine.TorchPool(config(), 32, torch.float32, float("nan"), "vec", "fp8_e4m3fn", (1.0, 1.0))
    pool.grow(3)
    nan = int(torch.tensor(float("nan")).to(torch.float8_e4m3fn).view(torch.uint8))
    assert pool.kv.dtype == torch.uint8 and bool((pool.kv == nan).all())
    rows = (torch.arange(32 * 2 * 32, dtype=torch.float32).reshape(32, 2, 32) % 7) + 1  # 1..7: exact in fp8
    pool.write(rows, rows, list(range(32, 64)))  # block 1, every slot
    pool.poison(1, 5)
    want = rows.to(torch.float8_e4m3fn).view(torch.uint8)
    slabs = pool.kv[1].view(2, 2, 32 * 32)
    k, v = slabs[:, 0].view(2, 32, 32), slabs[:, 1].view(2, 32, 32)  # K [head][lane][slot], V [head][slot][lane]
    assert torch.equal(k[:, :, :5], want[:5].permute(1, 2, 0)) and bool((k[:, :, 5:] == nan).all())
    assert torch.equal(v[:, :5], want[:5].permute(1, 0, 2)) and bool((v[:, 5:] == nan).all())
    assert bool((pool.kv[2] == nan).all())


def test_the_writer_truncates_toward_zero():
    vllm_cpu_engine.factory(FP8)
    for name, dtype in (("fp8_e4m3fn", torch.float8_e4m3fn), ("fp8_e5m2", torch.float8_e5m2)):
        pool = vllm_cpu_engine.TorchPool(config(1), 32, torch.float32, 0.0, "vec", name, (0.5, 0.5))
        pool.grow(2)
        x = torch.from_numpy(np.random.default_rng(0).standard_normal((32, 1, 32)).astype(np.float32) * 4)
        pool.write(x, x, list(range(32, 64)))
        stored = pool.kv[1].view(2, 32 * 32)[1].view(32, 32).view(dtype).float()  # V [slot][lane]
        scaled = x[:, 0] / 0.5
        rounded = scaled.to(dtype).float()
        assert bool((stored.abs() <= scaled.abs()).all()), name  # toward zero, every element
        assert float((stored == rounded).float().mean()) < 0.7, name  # not rounded to nearest


def test_fp8_truncation_fails_its_fixture():
    fixture = os.path.join(FIXTURES, "vllm-fp8-truncated.json")
    result = kvfuzz.replay(fixture, vllm_cpu_engine.factory(FP8), fork=False)
    assert not result.passed and "mismatch" in result.summary(), result.summary()
