// Standalone reproduction of docs/findings/llama.cpp.md, G1, using ggml.h and ggml-cpu.h only:
//
//   ggml-flash-f16-accumulator [KEYS] [VALUE]
//
// attends one query over KEYS keys (default 9) that all score 0 and all hold VALUE (default
// 8000) with ggml_flash_attn_ext on the CPU backend, once with K and V in f16 and once in
// f32, and prints both rows. The exact row is VALUE. With an f16 V, the CPU kernel
// (ggml_compute_forward_flash_attn_ext_f16_one_chunk) sums the unnormalised P.V in an f16
// vector (VKQ16) and divides by the sum only at the end, so KEYS * VALUE above 65504 (f16's
// largest) gives inf; f32 V sums in f32. Long before that the f16 sum stagnates: once it
// reaches 2048 VALUE (f16's spacing there is 2 VALUE for VALUE a power of two) every further
// term rounds away, so 4096 keys of value 1 give 0.5. Exit status 1 when the f16 row is not
// finite or off by more than 1% (the finding reproduced), 0 otherwise.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"

namespace {

float attend(ggml_type type, int keys, float value) {
  ggml_init_params params{.mem_size = 16 << 20, .mem_buffer = nullptr, .no_alloc = false};
  ggml_context* ctx = ggml_init(params);
  ggml_tensor* q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 1, 1, 1);  // [head_dim, tokens, heads]
  ggml_tensor* k = ggml_new_tensor_3d(ctx, type, 1, keys, 1);
  ggml_tensor* v = ggml_new_tensor_3d(ctx, type, 1, keys, 1);
  static_cast<float*>(q->data)[0] = 0.0f;
  for (int j = 0; j < keys; ++j) {
    if (type == GGML_TYPE_F16) {
      static_cast<ggml_fp16_t*>(k->data)[j] = ggml_fp32_to_fp16(0.0f);
      static_cast<ggml_fp16_t*>(v->data)[j] = ggml_fp32_to_fp16(value);
    } else {
      static_cast<float*>(k->data)[j] = 0.0f;
      static_cast<float*>(v->data)[j] = value;
    }
  }
  ggml_tensor* out = ggml_flash_attn_ext(ctx, q, k, v, nullptr, 1.0f, 0.0f, 0.0f);
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, out);
  ggml_graph_compute_with_ctx(ctx, graph, 1);
  const float row = static_cast<float*>(out->data)[0];
  ggml_free(ctx);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const int keys = argc > 1 ? std::atoi(argv[1]) : 9;
  const float value = argc > 2 ? static_cast<float>(std::atof(argv[2])) : 8000.0f;
  const float f16 = attend(GGML_TYPE_F16, keys, value);
  const float f32 = attend(GGML_TYPE_F32, keys, value);
  std::printf("%d keys of value %g at equal scores (the exact row: %g)\n", keys, value, value);
  std::printf("  f16 K/V: %g\n  f32 K/V: %g\n", f16, f32);
  if (!std::isfinite(f16)) {
    std::printf("reproduced: the f16 row is not finite (P.V summed unnormalised in f16)\n");
    return 1;
  }
  if (std::fabs(f16 - value) > 0.01f * std::fabs(value)) {
    std::printf("reproduced: the f16 row is off by %.1f%% (the f16 sum of P.V stagnates)\n",
                100.0 * std::fabs(f16 - value) / std::fabs(value));
    return 1;
  }
  return 0;
}
