// Standalone reproduction of docs/findings/llama.cpp.md, finding 1, using llama.h only:
//
//   llama-f32-cache-flash-attention MODEL.gguf [TOKENS]
//
// decodes tokens 0, 1, ..., TOKENS-1 (default 8) as one sequence in one batch, all logits
// on, in four contexts: K/V cache f32 or f16, flash attention auto (llama.cpp's default)
// or disabled, and prints the largest logit difference of each against f32 without flash
// attention, relative to the rms of those logits. With the vendored llama.cpp, f32 under
// flash attention differs from f32 without it as much as an f16 cache does: llama-graph.cpp
// (build_attn_mha) casts an f32 K and V to f16 before ggml_flash_attn_ext. Any GGUF model
// works; kvfuzz-llama-export writes one from a kvfuzz model fixture.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"

namespace {

void quiet(ggml_log_level, const char*, void*) {}

std::vector<float> run(llama_model* model, int tokens, ggml_type cache, llama_flash_attn_type fa) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_threads = cp.n_threads_batch = 1;
  cp.type_k = cp.type_v = cache;
  cp.flash_attn_type = fa;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "llama_init_from_model failed\n");
    std::exit(1);
  }
  llama_batch batch = llama_batch_init(tokens, 0, 1);
  for (int i = 0; i < tokens; ++i) {
    batch.token[i] = i % llama_vocab_n_tokens(llama_model_get_vocab(model));
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = tokens;
  if (llama_decode(ctx, batch) != 0) {
    std::fprintf(stderr, "llama_decode failed\n");
    std::exit(1);
  }
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  std::vector<float> logits;
  for (int i = 0; i < tokens; ++i) {
    const float* row = llama_get_logits_ith(ctx, i);
    logits.insert(logits.end(), row, row + vocab);
  }
  llama_batch_free(batch);
  llama_free(ctx);
  return logits;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& ref) {
  double sum = 0, worst = 0;
  for (const float x : ref) sum += double(x) * x;
  const double rms = std::sqrt(sum / double(ref.size()));
  for (size_t i = 0; i < a.size(); ++i) worst = std::fmax(worst, std::fabs(double(a[i]) - ref[i]));
  return worst / rms;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [TOKENS]\n", argv[0]);
    return 2;
  }
  const int tokens = argc > 2 ? std::atoi(argv[2]) : 8;
  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (!model) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 2;
  }
  const auto ref = run(model, tokens, GGML_TYPE_F32, LLAMA_FLASH_ATTN_TYPE_DISABLED);
  const struct {
    const char* name;
    ggml_type cache;
    llama_flash_attn_type fa;
  } runs[] = {{"f32 cache, flash attention auto", GGML_TYPE_F32, LLAMA_FLASH_ATTN_TYPE_AUTO},
              {"f16 cache, flash attention off ", GGML_TYPE_F16, LLAMA_FLASH_ATTN_TYPE_DISABLED},
              {"f16 cache, flash attention auto", GGML_TYPE_F16, LLAMA_FLASH_ATTN_TYPE_AUTO}};
  std::printf("largest logit difference from f32 cache, flash attention off (relative to rms):\n");
  std::vector<std::vector<float>> logits;
  for (const auto& r : runs) {
    logits.push_back(run(model, tokens, r.cache, r.fa));
    std::printf("  %s: %.3g\n", r.name, relative_difference(logits.back(), ref));
  }
  // The finding: under flash attention the f32 cache computes what the f16 cache does.
  std::printf("f32 cache vs f16 cache, both flash attention auto: %s\n",
              logits[0] == logits[2] ? "identical logits" : "different logits");
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
