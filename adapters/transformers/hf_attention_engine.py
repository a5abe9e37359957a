#!/usr/bin/env python3
"""Hugging Face transformers' attention pieces, in the order its Mistral model uses them, as
a kvfuzz engine:

    KVFUZZ_ENGINE_TIMEOUT=60 kvfuzz check --engine "exec:.venv/bin/python adapters/transformers/hf_attention_engine.py"

    import kvfuzz, hf_attention_engine                   # in-process, the same engine
    kvfuzz.check(hf_attention_engine.factory(["--attention", "eager"]), cases=100)

Per chunk, as MistralModel.forward and MistralAttention.forward do for one layer: the mask
from the cache before the update (masking_utils.create_causal_mask, or
create_sliding_window_causal_mask when the layout has a window: the model's config carries
sliding_window), the rotary embedding at the chunk's position_ids (MistralRotaryEmbedding,
rope_parameters = {"rope_type": "default", "rope_theta": theta}), apply_rotary_pos_emb,
DynamicCache.update, then the attention interface the config names
(ALL_ATTENTION_FUNCTIONS: "sdpa" by default, "eager" or "flex_attention"), with the layout's scale as
`scaling`. q, k and v come from kvfuzz instead of projections. One DynamicCache per
sequence, batch 1: reset makes a new one, truncate crops it (DynamicCache.crop with the
number of tokens to remove), fork deep-copies it (--fork beam: then moves the copy as beam
search does, batch_repeat_interleave(2), reorder_cache, batch_select_indices). With --cache
dynamic-config, DynamicCache(config=...): its sliding layers (DynamicSlidingWindowLayer,
which keep the last sliding_window - 1 tokens) when the layout has a window, truncated by
crop until a layer went past its window, then rebuilt from the kept tokens. With --cache static, a StaticCache of
STATIC_LENGTH slots made from the config (its sliding layers when the layout has a window),
cropped the same way where it can be (a sliding layer that went past its window cannot:
rebuilt from the kept tokens), its unused slots masked by the mask functions. The engine's positions are the cache's
lengths (get_seq_length), as a model's cache_position is.

Numerics, as the pieces compute (README.md in this folder): the rotary tables are computed
in f32 from f32 angles (inv_freq in f32 times the f32 position) and cast to the dtype, the
rotation computed in the dtype; the cache stores the rotated keys in the dtype; "sdpa" is
torch's CPU flash attention (adapters/torch: its exp is fexp_u20 in bf16 and f16, exp_u20
in f32); "eager" is a matmul, torch.softmax in f32 and a matmul, offered in f32 only (in
bf16 and f16 its scores come out of the matmul rounded to the dtype, which no declaration
expresses yet).

--bug window|rope|numerics|no-crop breaks one mapping on purpose (negative controls): the
config's sliding_window one wider than the layout's window, rope_theta twice the layout's, no
numerics declared, a truncate that leaves the cache as it was.
"""

import argparse
import copy
import os
import sys

import numpy as np
import torch
from transformers import DynamicCache, MistralConfig, StaticCache
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.mistral.modeling_mistral import (
    MistralRotaryEmbedding,
    apply_rotary_pos_emb,
    eager_attention_forward,
)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import kv_adapter as common  # noqa: E402

torch.set_num_threads(1)  # kvfuzz runs cases side by side; results do not depend on it

TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
# A StaticCache's slots (max_cache_len), and so the longest sequence it is offered
# (supports.max_context): every step attends over all of them, masked.
STATIC_LENGTH = 512
BUGS = ("window", "rope", "numerics", "no-crop", "pads", "fork-rows")


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attention", choices=("sdpa", "eager", "flex_attention"), default="sdpa")
    parser.add_argument("--dtype", choices=sorted(TORCH_DTYPES) + ["layout"], default="layout",
                        help="the dtype it computes in; layout (default): each case's own")  # fmt: skip
    parser.add_argument("--cache", choices=("dynamic", "dynamic-config", "static"), default="dynamic",
                        help="DynamicCache(); DynamicCache(config=...) (its sliding layers when the layout has a window); "
                             "or StaticCache of STATIC_LENGTH slots (with the config's sliding window)")  # fmt: skip
    parser.add_argument("--fork", choices=("copy", "beam"), default="copy",
                        help="fork as copy.deepcopy, or as beam search moves a cache: batch_repeat_interleave(2), "
                             "reorder_cache, batch_select_indices")  # fmt: skip
    parser.add_argument("--batch", choices=("per-sequence", "padded"), default="per-sequence",
                        help="a batch-1 cache per sequence, or one cache whose batch rows are the sequences, "
                             "every step padded to its longest chunk (as a static-batch server pads)")  # fmt: skip
    parser.add_argument("--bug", choices=BUGS, help="break one mapping on purpose")
    options = parser.parse_args(argv)
    if options.batch == "padded" and (options.cache != "dynamic" or options.fork != "copy"):
        parser.error("--batch padded keeps one DynamicCache() of every sequence (its fork is reorder_cache)")
    if options.fork == "beam" and options.cache == "static":
        parser.error("--fork beam needs a dynamic cache (a StaticCache's layers have no batch_repeat_interleave)")
    if options.attention != "sdpa" and options.dtype not in ("f32", "layout"):
        parser.error(f"--attention {options.attention} runs in f32 only (its half-precision scores are not declarable)")
    return options


def factory(argv=None):
    """An engine factory for kvfuzz.check / kvfuzz.replay, with the command line's flags."""
    options = parse(argv)
    return lambda config: HfAttentionEngine(config, options)


def numerics(dtype, attention, bug=None):
    """How the pieces compute in `dtype` (the module's docstring)."""
    if bug == "numerics":
        return {}
    half = dtype != "f32"
    declared = {
        "output": dtype,
        "rotated_keys_in_storage": half,  # f32: nothing to round
        "rotated_queries_in_storage": half,
        "rope_angles_exact": False,  # f32 angles
        "rope_tables": dtype,
    }
    if attention == "sdpa":
        declared.update({"p": dtype if half else "none", "exp_ulps": 1024 if half else 20})
    return declared


def croppable(cache):
    """Whether crop can take tokens back: not a StaticCache's sliding layer that went past its
    window (is_croppable), nor a DynamicCache's sliding layer that did (it kept only the last
    sliding_window - 1 tokens; its crop raises without activate_past_recording)."""
    for layer in cache.layers:
        if not getattr(layer, "is_croppable", True):
            return False
        if getattr(layer, "is_sliding", False) and layer.get_seq_length() >= layer.get_max_length():
            return False
    return True


class _Layer(torch.nn.Module):
    """What the attention interfaces read of MistralAttention (its projections are not
    needed: kvfuzz hands q, k and v), without building its weights."""

    def __init__(self, config, groups):
        super().__init__()
        self.config, self.layer_idx, self.num_key_value_groups, self.is_causal = config, 0, groups, True
        self.eval()


class HfAttentionEngine:
    def __init__(self, config, options):
        self.config, self.options = config, options
        self.dtype = config.dtype if options.dtype == "layout" else options.dtype
        self.torch_dtype = TORCH_DTYPES[self.dtype]
        import transformers

        self.name = f"transformers-{transformers.__version__}-{options.attention}-{options.dtype}"
        self.name += "" if options.cache == "dynamic" else f"-{options.cache}"
        self.name += "-beam-fork" if options.fork == "beam" else ""
        self.name += "-padded-batch" if options.batch == "padded" else ""
        self.name += f" (bug: {options.bug})" if options.bug else ""
        offered = ["f32"] if options.attention != "sdpa" else list(TORCH_DTYPES)
        self.numerics, dtypes = common.per_dtype(
            options.dtype, offered, lambda dtype: numerics(dtype, options.attention, options.bug)
        )
        # Its configs validate RoPE on an even head_dim even without rotary (MistralConfig).
        self.supports = {"dtypes": dtypes, "value_dim_is_head_dim": True, "head_dim_multiple": 2}
        if options.cache == "static":
            self.supports["max_context"] = STATIC_LENGTH
        if options.batch == "padded":
            # The mask functions measure a window in cache slots, pads included: a padded
            # row's window is not its tokens'.
            self.supports["windows"] = False
        c = config
        theta = c.rope_theta if c.rope_theta is not None else 10000.0
        window = c.window + (options.bug == "window") if c.window else None
        self.hf = MistralConfig(
            hidden_size=c.q_heads * c.head_dim, num_attention_heads=c.q_heads,
            num_key_value_heads=c.kv_heads, head_dim=c.head_dim, num_hidden_layers=1,
            intermediate_size=4, vocab_size=4, sliding_window=window,
            rope_parameters={"rope_type": "default", "rope_theta": theta * (2 if options.bug == "rope" else 1)},
            max_position_embeddings=1 << 20,
        )  # fmt: skip
        self.hf._attn_implementation = options.attention
        self.layer = _Layer(self.hf, c.q_heads // c.kv_heads)
        self.rotary = MistralRotaryEmbedding(self.hf) if c.rope_theta is not None else None
        self.attend = ALL_ATTENTION_FUNCTIONS.get_interface(options.attention, eager_attention_forward)
        # What each sequence's cache was given, (k, v) per chunk: a sliding StaticCache that
        # went past its window cannot be cropped (is_croppable), so a truncate rebuilds it
        # from the kept tokens, as a server recomputes them.
        self.history = [[] for _ in range(c.sequences)]
        self.caches = [self._new_cache() for _ in range(c.sequences)]
        if options.batch == "padded":
            self.padded = PaddedBatch(self, c.sequences)

    def _new_cache(self):
        if self.options.cache == "static":
            return StaticCache(config=self.hf, max_cache_len=STATIC_LENGTH)
        if self.options.cache == "dynamic-config":
            return DynamicCache(config=self.hf)
        return DynamicCache()


    def _input(self, rows):
        """rows[token][head][lane] as (1, heads, tokens, lanes) in the kernel's dtype."""
        return torch.from_numpy(np.asarray(rows, np.float32)).to(self.torch_dtype).permute(1, 0, 2)[None]

    def step(self, chunks):
        seqs = [chunk.seq for chunk in chunks]
        if len(set(seqs)) != len(seqs) or not all(0 <= s < len(self.caches) for s in seqs):
            raise ValueError(f"step's sequences {seqs}: expected distinct ones in 0..{len(self.caches) - 1}")
        if self.options.batch == "padded":
            return self.padded.step(chunks)
        return [self._forward(chunk) for chunk in chunks]

    def _forward(self, chunk):
        cache = self.caches[chunk.seq]
        past, new = int(cache.get_seq_length()), len(chunk.q)  # int: a StaticCache answers its live counter
        position_ids = torch.arange(past, past + new)[None]
        embeds = torch.zeros(1, new, self.hf.hidden_size, dtype=self.torch_dtype)  # shape and dtype only
        make_mask = create_sliding_window_causal_mask if self.hf.sliding_window else create_causal_mask
        mask = make_mask(config=self.hf, inputs_embeds=embeds, attention_mask=None, cache=cache,
                         position_ids=position_ids)  # fmt: skip
        q, k, v = self._input(chunk.q), self._input(chunk.k), self._input(chunk.v)
        if self.rotary is not None:
            cos, sin = self.rotary(embeds, position_ids)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
        self.history[chunk.seq].append((k, v))
        k, v = cache.update(k, v, 0)
        out, _ = self.attend(self.layer, q, k, v, mask, dropout=0.0, scaling=float(self.config.scale),
                             sliding_window=self.hf.sliding_window)  # fmt: skip
        return range(past, past + new), out[0].to(torch.float64).numpy()

    def reset(self, seq):
        if self.options.batch == "padded":
            return self.padded.truncate(seq, 0)
        self.caches[seq] = self._new_cache()
        self.history[seq] = []

    def truncate(self, seq, keep):
        if self.options.batch == "padded":
            return self.padded.truncate(seq, keep)
        length = int(self.caches[seq].get_seq_length())
        if not 0 <= keep <= length:
            raise ValueError(f"sequence {seq} holds {length} tokens, cannot keep {keep}")
        if self.options.bug == "no-crop":
            return  # the bug: the cache keeps the dropped tokens and its length
        self.history[seq] = self._kept(self.history[seq], keep)
        if keep == 0:
            self.caches[seq] = self._new_cache()  # crop(-length) of a whole cache: nothing left to crop
        elif keep < length and croppable(self.caches[seq]):
            self.caches[seq].crop(keep - length)  # a negative count: the tokens to remove
        elif keep < length:
            self.caches[seq] = self._new_cache()
            k, v = (torch.cat(parts, dim=2) for parts in zip(*self.history[seq]))
            self.caches[seq].update(k, v, 0)

    @staticmethod
    def _kept(history, keep):
        """The first `keep` tokens of a sequence's (k, v) chunks."""
        kept = []
        for k, v in history:
            if keep <= 0:
                break
            kept.append((k[:, :, :keep], v[:, :, :keep]))
            keep -= k.shape[2]
        return kept

    def fork(self, src, dst):
        if src == dst:
            raise ValueError(f"fork of sequence {src} into itself")
        if self.options.batch == "padded":
            return self.padded.fork(src, dst)
        cache = copy.deepcopy(self.caches[src])
        if self.options.fork == "beam":
            # As generate() moves a cache for beam search: the batch expanded to the beams,
            # reordered by the chosen beams, then one row kept (the second copy of row 0).
            cache.batch_repeat_interleave(2)
            cache.reorder_cache(torch.tensor([1, 0]))
            cache.batch_select_indices(torch.tensor([0]))
        self.caches[dst] = cache
        self.history[dst] = list(self.history[src])


class PaddedRows:
    """One DynamicCache whose batch rows are the sequences, as a static-batch server keeps
    them (--batch padded, here and in hf_model_engine.py). Every step adds as many slots to
    every row as its longest chunk: a row in the step gets its chunk at the end, after pads,
    a row not in it only pads. The 2D attention_mask is 0 on pads and on tokens a reset or
    truncate dropped (their slots stay in the cache, attended by nobody); each row's
    position_ids count its live tokens, as generate() derives them from the mask; fork is
    reorder_cache with the destination row taking the source's."""

    def __init__(self, sequences):
        self.cache = DynamicCache()
        self.mask = [[] for _ in range(sequences)]  # per row, per cache slot: 1 a live token
        self.live = [0] * sequences  # per row: its live tokens, the next token's position

    def add_step(self, lengths, attend_pads=False):
        """Slots for a step whose rows get `lengths[row]` new tokens (absent: none): the step's
        width, position_ids [rows, width] and the attention_mask [rows, slots] to use.
        attend_pads: the bug of leaving pads unmasked."""
        rows, width = len(self.mask), max(lengths.values())
        position_ids = torch.zeros(rows, width, dtype=torch.long)
        for row in range(rows):
            n = lengths.get(row, 0)
            position_ids[row, : width - n] = self.live[row]  # pads take the next position, unused
            position_ids[row, width - n :] = torch.arange(self.live[row], self.live[row] + n)
            self.mask[row] += [int(attend_pads)] * (width - n) + [1] * n
        return width, position_ids, torch.tensor(self.mask, dtype=torch.long)

    def take(self, row, n):
        """The positions of the `n` tokens the step just gave `row` (they sit at its end)."""
        first = self.live[row]
        self.live[row] += n
        return range(first, first + n)

    def truncate(self, seq, keep, forget=True):
        """forget False: the bug of leaving the row's dropped tokens and its length."""
        if not 0 <= keep <= self.live[seq]:
            raise ValueError(f"sequence {seq} holds {self.live[seq]} tokens, cannot keep {keep}")
        if not forget:
            return
        seen = 0
        for slot, live in enumerate(self.mask[seq]):
            if live:
                seen += 1
                if seen > keep:
                    self.mask[seq][slot] = 0
        self.live[seq] = keep

    def fork(self, src, dst, move_cache=True):
        """move_cache False: the bug of copying the row's mask but not its cache row."""
        order = list(range(len(self.mask)))
        order[dst] = src
        if self.cache.get_seq_length() > 0 and move_cache:
            self.cache.reorder_cache(torch.tensor(order))
        self.mask[dst] = list(self.mask[src])
        self.live[dst] = self.live[src]


class PaddedBatch(PaddedRows):
    """--batch padded at attention level: q, k and v of every row, the mask from
    create_causal_mask with the cache, the rotary at each row's positions."""

    def __init__(self, engine, sequences):
        super().__init__(sequences)
        self.engine = engine

    def step(self, chunks):
        e, rows = self.engine, len(self.mask)
        width, position_ids, attention_mask = self.add_step(
            {chunk.seq: len(chunk.q) for chunk in chunks}, attend_pads=e.options.bug == "pads"
        )
        heads = {"q": e.config.q_heads, "k": e.config.kv_heads, "v": e.config.kv_heads}
        dims = {"q": e.config.head_dim, "k": e.config.head_dim, "v": e.config.value_dim}
        inputs = {name: np.zeros((rows, width, heads[name], dims[name]), np.float32) for name in heads}
        for chunk in chunks:
            for name in inputs:
                inputs[name][chunk.seq, width - len(chunk.q) :] = np.asarray(getattr(chunk, name), np.float32)
        q, k, v = (torch.from_numpy(inputs[n]).to(e.torch_dtype).permute(0, 2, 1, 3) for n in ("q", "k", "v"))
        embeds = torch.zeros(rows, width, e.hf.hidden_size, dtype=e.torch_dtype)
        mask = create_causal_mask(config=e.hf, inputs_embeds=embeds, attention_mask=attention_mask,
                                  cache=self.cache, position_ids=position_ids)  # fmt: skip
        if e.rotary is not None:
            cos, sin = e.rotary(embeds, position_ids)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k, v = self.cache.update(k, v, 0)
        out, _ = e.attend(e.layer, q, k, v, mask, dropout=0.0, scaling=float(e.config.scale))
        return [
            (self.take(chunk.seq, len(chunk.q)), out[chunk.seq, width - len(chunk.q) :].to(torch.float64).numpy())
            for chunk in chunks
        ]

    def truncate(self, seq, keep, forget=True):
        super().truncate(seq, keep, forget=self.engine.options.bug != "no-crop")

    def fork(self, src, dst, move_cache=True):
        super().fork(src, dst, move_cache=self.engine.options.bug != "fork-rows")


def main():
    common.serve_exec(factory())


if __name__ == "__main__":
    main()
