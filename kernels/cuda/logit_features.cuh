// The attention features of a layout as the CUDA kernels compute them (kvfuzz/scenario.h,
// Layout: softcap, alibi, sinks, chunked_local; the reference's definition in
// docs/fixture-format.md, "Attention features"): a scaled score is soft-capped, then biased
// by ALiBi; a sink joins the row's softmax with its own logit and no value, once per row
// (decode adds it where the splits merge, prefill where the row is normalised); chunked
// local attention moves the first visible key.
#pragma once

#include "cuda/cuda_compat.h"

namespace kvfuzz::cuda {

struct LogitFeatures {
  float softcap = 0.0f;          // 0: none; else logit -> softcap * tanh(logit / softcap)
  const float* alibi = nullptr;  // [q_heads]: logit += alibi[h] * (key - query); null: none
  const float* sinks = nullptr;  // [q_heads]: each row's sink logit; null: none
  int chunked_local = 0;         // 0: none; else the query at p sees keys from p / C * C on
};

// The logit of q head h's scaled score s for the key at `key` seen from the query at `query`.
KVFUZZ_DEVICE float feature_logit(const LogitFeatures& f, float s, int h, int key, int query) {
  if (f.softcap > 0.0f) s = f.softcap * tanhf(s / f.softcap);
  if (f.alibi != nullptr) s += f.alibi[h] * static_cast<float>(key - query);
  return s;
}

// The first key position the query at `pos` sees: the window's cut (0: none) and chunked
// local attention's, whichever is later (Layout::first_visible).
KVFUZZ_HOST_DEVICE int first_visible_key(int pos, int window, int chunked_local) {
  int lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
  if (chunked_local > 0) {
    const int chunk_start = pos / chunked_local * chunked_local;
    lo = lo > chunk_start ? lo : chunk_start;
  }
  return lo;
}

}  // namespace kvfuzz::cuda
