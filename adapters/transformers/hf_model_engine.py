#!/usr/bin/env python3
"""kvfuzz's tiny transformer as a Hugging Face transformers checkpoint, run by the model's own
forward with its cache, as a kvfuzz whole-model engine (ids in, logits out):

    KVFUZZ_ENGINE_TIMEOUT=60 kvfuzz check --engine "exec:.venv/bin/python adapters/transformers/hf_model_engine.py"

    import kvfuzz, hf_model_engine                  # in-process, the same engine
    kvfuzz.check(hf_model_engine.HfModel, cases=50)

Per case the model is a MistralForCausalLM (Llama's architecture with an optional sliding
window) whose config is the case's model and layout: vocab_size, hidden_size (width),
intermediate_size (ffn), num_hidden_layers, num_attention_heads, num_key_value_heads,
head_dim, rms_norm_eps 1e-5, rope_parameters {"rope_type": "default", "rope_theta": theta},
sliding_window (the layout's window, or None), tie_word_embeddings False; its weights are
kvfuzz's (config.weights(), transposed to torch's Linear [out][in]) loaded with
load_state_dict(strict=True); each attention module's `scaling` is the layout's scale
(MistralAttention takes head_dim^-0.5 from nowhere else). Per chunk, batch 1:
model(input_ids, cache=cache, use_cache=True) (5.25's name for
past_key_values), the model deriving cache_position
and position_ids from the cache's length and building its own causal or sliding-window
mask. One DynamicCache per sequence: reset makes a new one, truncate crops it
(DynamicCache.crop with the negative count of tokens to remove), fork deep-copies it. With
--cache static a StaticCache(config=..., max_cache_len=STATIC_LENGTH) instead (sliding
layers when the layout has a window), cropped the same way where it can be, else (a sliding
layer that went past its window) rebuilt by forwarding the kept ids into a new one. With
--shared-cache every sequence is a row of one DynamicCache, every step one forward padded to
its longest chunk (hf_attention_engine.PaddedRows: pads and dropped tokens masked in the 2D
attention_mask, each row's position_ids its live tokens, fork by reorder_cache); no windows
(the model's masks would count pads in a window).

--dtype f32 (the default), bf16 or f16: the model loaded in that dtype (model.to(dtype): its
weights rounded to it, every product, norm, residual sum and logit computed in it, the
DynamicCache in it), declared as numerics.activations (kvfuzz's reference rounds the weights
the same way and tolerates one rounding at each place of the forward) beside what the
attention adapter declares for that dtype (hf_attention_engine.numerics: rotary tables in the
dtype, sdpa's P and exp); the layout's dtype is the model's (its cache's). RoPE is always
applied (rope_required), and q, k and v have one head size (value_dim_is_head_dim).

--attention sdpa|eager picks the attention interface; --generate runs each chunk through
model.generate() instead (its prefill of the chunk's first id, then its decode loop, the
chunk's other ids forced by a logits processor, the logits from output_logits); --bug
window|rope|pads|fork-rows breaks one mapping on purpose (negative controls): sliding_window
one wider than the layout's, rope_theta doubled; with --shared-cache, pads left unmasked, a
fork that copies the row's mask but not its cache row. In-process the classes HfModel, HfModelEager,
HfModelGenerate, HfModelBugWindow, HfModelBugRope, HfModelStatic and HfModelSharedCache
are these.
"""

import argparse
import copy
import os
import sys

import numpy as np
import torch
from transformers import (
    DynamicCache,
    LogitsProcessor,
    LogitsProcessorList,
    MistralConfig,
    MistralForCausalLM,
    StaticCache,
)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# One declaration of how sdpa computes; one test of when a cache can be cropped.
from hf_attention_engine import STATIC_LENGTH, PaddedRows, common, croppable, numerics  # noqa: E402

torch.set_num_threads(1)  # kvfuzz runs cases side by side; results do not depend on it

BUGS = ("window", "rope", "pads", "fork-rows")
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attention", choices=("sdpa", "eager"), default="sdpa")
    parser.add_argument("--generate", action="store_true",
                        help="each chunk through model.generate() (its prefill and decode loop), not forward")  # fmt: skip
    parser.add_argument("--padded-batch", action="store_true",
                        help="each step as one left-padded batch through model.generate(), every "
                             "sequence's history prefilled again in it")  # fmt: skip
    parser.add_argument("--cache", choices=("dynamic", "static"), default="dynamic",
                        help="DynamicCache(), or StaticCache(config=..., max_cache_len=STATIC_LENGTH) "
                             "(its sliding layers when the layout has a window)")  # fmt: skip
    parser.add_argument("--shared-cache", action="store_true",
                        help="every sequence a row of one DynamicCache, every step padded to its longest chunk "
                             "(the model's forward with the 2D attention_mask and each row's position_ids)")  # fmt: skip
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="f32",
                        help="the model's dtype (model.to): its weights, activations and cache")  # fmt: skip
    parser.add_argument("--bug", choices=BUGS, help="break one mapping on purpose")
    options = parser.parse_args(argv)
    if options.cache == "static" and (options.generate or options.padded_batch):
        parser.error("--cache static runs the model's forward (generate() makes its own caches)")
    if options.shared_cache and (options.cache == "static" or options.generate or options.padded_batch):
        parser.error("--shared-cache runs the model's forward over one DynamicCache")
    return options


class ForcedIds(LogitsProcessor):
    """Makes greedy generate() pick `ids[row]` in turn for each row of its batch: the chunk's
    next tokens are kvfuzz's, not the model's. generate() returns the logits from before the
    processors (output_logits)."""

    def __init__(self, *ids):
        self.ids, self.at = [list(row) for row in ids], 0

    def __call__(self, input_ids, scores):
        forced = torch.full_like(scores, float("-inf"))
        for row, ids in enumerate(self.ids):
            forced[row, ids[self.at]] = 0
        self.at += 1
        return forced


def state_dict(weights):
    """kvfuzz's weights as MistralForCausalLM's state dict (kv_adapter.llama_weights: Linear
    weights [out][in])."""
    return {name: torch.from_numpy(array) for name, array in common.llama_weights(weights).items()}


class HfModel:
    whole_model = True
    options = parse([])
    supports = {"dtypes": ["f32"], "value_dim_is_head_dim": True, "head_dim_multiple": 2,
                "rope_required": True}  # fmt: skip

    def __init__(self, config):
        import transformers

        o = self.options
        self.name = f"transformers-{transformers.__version__}-model-{o.attention}"
        self.name += "-generate" if o.generate else ""
        self.name += "-padded-batch" if o.padded_batch else ""
        self.name += "-static" if o.cache == "static" else ""
        self.name += "-shared-cache" if o.shared_cache else ""
        self.name += f"-{o.dtype}" if o.dtype != "f32" else ""
        self.name += f" (bug: {o.bug})" if o.bug else ""
        self.numerics = numerics(o.dtype, o.attention)
        self.supports = dict(self.supports, dtypes=[o.dtype])
        if o.dtype != "f32":
            self.numerics["activations"] = o.dtype
        if o.cache == "static":
            self.supports = dict(self.supports, max_context=STATIC_LENGTH)
        if o.shared_cache:
            # The model's mask functions measure a window in cache slots, pads included.
            self.supports = dict(self.supports, windows=False)
        self.new_case(config)

    def new_case(self, config):
        """The next case's model, as a fresh object would be (kvfuzz reuses this object)."""
        layout, model, o = config.engine, config.model, self.options
        self.history = [[] for _ in range(layout.sequences)]  # each sequence's ids (generate() takes them all)
        self.rows = None  # --shared-cache: the rows of one cache (PaddedRows), made with the model
        if layout.rope_theta is None or layout.head_dim % 2 or layout.value_dim != layout.head_dim:
            self.model = None  # kvfuzz's probe (the smallest layout) asks only for declarations
            self.caches = [DynamicCache() for _ in range(layout.sequences)]
            return
        window = layout.window + (o.bug == "window") if layout.window else None
        theta = layout.rope_theta * (2 if o.bug == "rope" else 1)
        self.hf = MistralConfig(
            vocab_size=model.vocab, hidden_size=model.width, intermediate_size=model.ffn,
            num_hidden_layers=model.layers, num_attention_heads=layout.q_heads,
            num_key_value_heads=layout.kv_heads, head_dim=layout.head_dim, rms_norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": theta}, sliding_window=window,
            max_position_embeddings=1 << 20, tie_word_embeddings=False,
            bos_token_id=None, eos_token_id=None, pad_token_id=None,
        )  # fmt: skip
        self.hf._attn_implementation = o.attention
        self.model = MistralForCausalLM(self.hf).eval()
        self.model.load_state_dict(state_dict(config.weights()), strict=True)
        self.model.to(DTYPES[o.dtype])  # bf16, f16: the weights rounded to nearest even
        for layer in self.model.model.layers:
            layer.self_attn.scaling = float(layout.scale)
        self.caches = [self._new_cache() for _ in range(layout.sequences)]
        self.rows = PaddedRows(layout.sequences) if o.shared_cache else None

    def _new_cache(self):
        if self.options.cache == "static":
            return StaticCache(config=self.hf, max_cache_len=STATIC_LENGTH)
        return DynamicCache()

    def step(self, chunks):
        seqs = [chunk.seq for chunk in chunks]
        if len(set(seqs)) != len(seqs) or not all(0 <= s < len(self.caches) for s in seqs):
            raise ValueError(f"step's sequences {seqs}: expected distinct ones in 0..{len(self.caches) - 1}")
        if self.options.padded_batch:
            return self._padded_batch(chunks)
        if self.rows is not None:
            return self._shared_cache(chunks)
        forward = self._generate if self.options.generate else self._forward
        return [forward(chunk) for chunk in chunks]

    def _padded_batch(self, chunks):
        """One generate() call for the step, as a server batches requests: row r's prompt is
        its sequence's history and its chunk's first id, left-padded to the longest (attention
        mask 0 on the pads, so generate() takes each row's positions from the mask), the
        chunk's other ids forced in the decode loop (a shorter chunk's row goes on with id 0,
        its logits unused). The cache lives for the call only: each step prefills every
        history again, so kvfuzz's reset, truncate and fork are the histories'."""
        prompts = [self.history[c.seq] + [int(c.ids[0])] for c in chunks]
        rest = [[int(i) for i in c.ids[1:]] for c in chunks]
        steps = max(len(r) for r in rest) + 1
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.no_grad():
            out = self.model.generate(
                input_ids=input_ids, attention_mask=mask, max_new_tokens=steps, do_sample=False,
                eos_token_id=None, pad_token_id=0, output_logits=True, return_dict_in_generate=True,
                logits_processor=LogitsProcessorList([ForcedIds(*(r + [0] * (steps - len(r)) for r in rest))]),
            )  # fmt: skip
        results = []
        for row, chunk in enumerate(chunks):
            past = len(self.history[chunk.seq])
            tokens = len(chunk.ids)
            logits = torch.stack([step[row] for step in out.logits[:tokens]])
            self.history[chunk.seq].extend(int(i) for i in chunk.ids)
            results.append((range(past, past + tokens), logits.to(torch.float32).numpy()))
        return results

    def _shared_cache(self, chunks):
        """One forward for the step over the shared cache (hf_attention_engine.PaddedRows): row r's
        ids after pads (id 0, masked), each row's positions its live tokens."""
        width, position_ids, attention_mask = self.rows.add_step(
            {c.seq: len(c.ids) for c in chunks}, attend_pads=self.options.bug == "pads"
        )
        ids = torch.zeros(len(self.rows.mask), width, dtype=torch.long)
        for chunk in chunks:
            ids[chunk.seq, width - len(chunk.ids) :] = torch.as_tensor(np.asarray(chunk.ids, np.int64))
        with torch.no_grad():
            out = self.model(input_ids=ids, attention_mask=attention_mask, position_ids=position_ids,
                             cache=self.rows.cache, use_cache=True)  # fmt: skip
        results = []
        for chunk in chunks:
            n = len(chunk.ids)
            self.history[chunk.seq].extend(int(i) for i in chunk.ids)
            logits = out.logits[chunk.seq, width - n :].to(torch.float32).numpy()
            results.append((self.rows.take(chunk.seq, n), logits))
        return results

    def _generate(self, chunk):
        """The chunk's first id as the uncached end of the prompt (generate()'s prefill), the
        others forced as its decode steps, and one more forced step (id 0, never kept) so that
        the last id is forwarded too: the cache then holds the chunk, and output_logits holds
        one row per id."""
        cache, history = self.caches[chunk.seq], self.history[chunk.seq]
        past = int(cache.get_seq_length())
        ids = [int(i) for i in chunk.ids]
        prompt = torch.tensor([history + ids[:1]])
        with torch.no_grad():
            out = self.model.generate(
                input_ids=prompt, attention_mask=torch.ones_like(prompt), cache=cache,
                max_new_tokens=len(ids), do_sample=False, eos_token_id=None, pad_token_id=0,
                logits_processor=LogitsProcessorList([ForcedIds(ids[1:] + [0])]),
                output_logits=True, return_dict_in_generate=True,
            )  # fmt: skip
        history.extend(ids)
        logits = torch.stack([step[0] for step in out.logits]).to(torch.float32).numpy()
        return range(past, past + len(ids)), logits

    def _forward(self, chunk):
        cache = self.caches[chunk.seq]
        past = int(cache.get_seq_length())
        ids = torch.as_tensor(np.asarray(chunk.ids, np.int64))[None]
        with torch.no_grad():
            out = self.model(input_ids=ids, cache=cache, use_cache=True)
        self.history[chunk.seq].extend(int(i) for i in chunk.ids)
        return range(past, past + len(chunk.ids)), out.logits[0].to(torch.float32).numpy()

    def reset(self, seq):
        if self.rows is not None:
            self.rows.truncate(seq, 0)  # the shared cache's row: its per-sequence cache is unused
        else:
            self.caches[seq] = self._new_cache()
        self.history[seq] = []

    def truncate(self, seq, keep):
        length = len(self.history[seq])
        if not 0 <= keep <= length:
            raise ValueError(f"sequence {seq} holds {length} tokens, cannot keep {keep}")
        del self.history[seq][keep:]
        if self.options.padded_batch:
            return  # its caches live for one step: the history is the sequence
        if self.rows is not None:
            return self.rows.truncate(seq, keep)
        if keep == 0:
            self.caches[seq] = self._new_cache()  # crop(-length) of a whole cache: nothing left to crop
        elif keep < length and croppable(self.caches[seq]):
            self.caches[seq].crop(keep - length)  # a negative count: the tokens to remove
        elif keep < length:
            # A sliding StaticCache layer that went past its window cannot take tokens back:
            # the kept ids are forwarded again into a new cache, as a server recomputes them.
            self.caches[seq] = self._new_cache()
            ids = torch.tensor([self.history[seq]])
            with torch.no_grad():
                self.model(input_ids=ids, cache=self.caches[seq], use_cache=True)

    def fork(self, src, dst):
        if src == dst:
            raise ValueError(f"fork of sequence {src} into itself")
        if self.rows is not None:
            self.rows.fork(src, dst, move_cache=self.options.bug != "fork-rows")
        else:
            self.caches[dst] = copy.deepcopy(self.caches[src])
        self.history[dst] = list(self.history[src])


class HfModelEager(HfModel):
    options = parse(["--attention", "eager"])


class HfModelGenerate(HfModel):
    options = parse(["--generate"])


class HfModelPaddedBatch(HfModel):
    options = parse(["--padded-batch"])


class HfModelBugWindow(HfModel):
    options = parse(["--bug", "window"])


class HfModelBugRope(HfModel):
    options = parse(["--bug", "rope"])


class HfModelStatic(HfModel):
    options = parse(["--cache", "static"])


class HfModelSharedCache(HfModel):
    options = parse(["--shared-cache"])


def factory(argv=None):
    """The engine class for these command-line flags (a class: kvfuzz reads whole_model off it)."""
    return type("HfModel", (HfModel,), {"options": parse(argv)})


def main():
    common.serve_model_exec(factory())


if __name__ == "__main__":
    main()
