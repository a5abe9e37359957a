#!/usr/bin/env python3
"""transformers 5.25.0: a model with sliding_window = 1 attends to more than its window once
generate() caches it (docs/findings/torch-and-transformers.md, T7).

DynamicSlidingWindowLayer.update keeps `full_key_states[:, :, -self.sliding_window + 1 :, :]`,
"the last sliding_window - 1 tokens": for sliding_window = 1 the slice is [0:], every token,
so the cache keeps growing and the next step's query sees its earlier keys. Each token's
logits through generate() then differ from the same model's forward without a cache (which
masks each query to itself); with sliding_window = 2 they agree to 1e-8.

    .venv/bin/python adapters/transformers/repro/sliding_window_1.py
    max |cached - full| per row: [7.450580596923828e-09, 0.003237476572394371]
"""
import torch
from transformers import MistralConfig, MistralForCausalLM

torch.manual_seed(0)
config = MistralConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                       num_attention_heads=1, num_key_value_heads=1, head_dim=8,
                       sliding_window=1, bos_token_id=None, eos_token_id=None, pad_token_id=None)
model = MistralForCausalLM(config).eval()
ids = torch.tensor([[3, 5]])
with torch.no_grad():
    full = model(input_ids=ids).logits[0]                # no cache: each token sees itself only
    out = model.generate(input_ids=ids[:, :1], max_new_tokens=2, do_sample=False,
                         output_logits=True, return_dict_in_generate=True,
                         eos_token_id=None, pad_token_id=0,
                         prefix_allowed_tokens_fn=lambda b, s: [5] if s.shape[-1] == 1 else [0])
cached = torch.stack([step[0] for step in out.logits])   # the same two rows, through the cache
print("max |cached - full| per row:", (cached - full).abs().amax(-1).tolist())

# The layer itself: it should keep sliding_window - 1 = 0 tokens of 3.
from transformers.cache_utils import DynamicSlidingWindowLayer  # noqa: E402

layer = DynamicSlidingWindowLayer(sliding_window=1)
layer.update(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))
print("tokens kept by a sliding_window=1 layer after 3:", layer.keys.shape[2], "(expected 0)")
