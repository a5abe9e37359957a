#include "cpu/numerics_profiles.h"

#include <stdexcept>
#include <string>

#include "cpu/cpu_engine.h"

namespace kvfuzz::cpu {

const std::vector<NumericsProfile>& numerics_profiles() {
  static const std::vector<NumericsProfile> profiles = {
      {"bf16",
       "bf16 K/V, P rounded to bf16 before P.V, f32 sums, rows rounded to bf16 "
       "(FlashAttention-2 with bf16 inputs)",
       {.output = DType::bf16,
        .p = DType::bf16,
        .rotated_keys_in_storage = true,
        .rope_angles_exact = true},
       {.dtypes = {DType::bf16}}},
      {"f16",
       "f16 K/V, P rounded to f16 before P.V, f32 sums, rows rounded to f16 "
       "(FlashAttention-2 with f16 inputs)",
       {.output = DType::f16,
        .p = DType::f16,
        .rotated_keys_in_storage = true,
        .rope_angles_exact = true},
       {.dtypes = {DType::f16}}},
      {"f16acc",
       "f16 K/V, P.V summed in f16 over runs of 4 keys and merged in f32, rows rounded to "
       "f16 (a decode kernel accumulating in half precision)",
       {.output = DType::f16,
        .value_accumulation = DType::f16,
        .rotated_keys_in_storage = true,
        .rope_angles_exact = true},
       {.dtypes = {DType::f16}}},
      {"f32-lse",
       "f32 K/V, P and rows, split partials normalised and combined by their f32 "
       "log-sum-exps (FlashAttention-2's combine with f32 inputs; FlashInfer's and vLLM's "
       "merges of f32 partials)",
       {.rotated_keys_in_storage = true, .rope_angles_exact = true, .split_combine_lse = true},
       {}},
      {"bf16-rope-tables",
       "bf16 K/V, RoPE's cos/sin tables cast to bf16 and the rotation computed in bf16, P "
       "rounded to bf16, rows rounded to bf16 (HF transformers' rotary embedding in a bf16 "
       "model, then FlashAttention-2)",
       {.output = DType::bf16,
        .p = DType::bf16,
        .rotated_keys_in_storage = true,
        .rotated_queries_in_storage = true,
        .rope_angles_exact = true,
        .rope_tables = DType::bf16},
       {.dtypes = {DType::bf16}}},
      {"bf16-lse",
       "bf16 K/V, P rounded to bf16, split partials normalised in f32 and combined by their "
       "f32 log-sum-exps, rows rounded to bf16 (FlashAttention-2's split-KV forward with "
       "num_splits > 1 and combine_attn_seqk_parallel)",
       {.output = DType::bf16,
        .p = DType::bf16,
        .rotated_keys_in_storage = true,
        .rope_angles_exact = true,
        .split_combine_lse = true},
       {.dtypes = {DType::bf16}}},
      {"f16-merge",
       "f16 K/V, P rounded to f16, split partials normalised and stored in f16, combined by "
       "their f32 log-sum-exps, rows rounded to f16 (FlashInfer's merge_states, vLLM's "
       "merge_attn_states)",
       {.output = DType::f16,
        .p = DType::f16,
        .rotated_keys_in_storage = true,
        .rope_angles_exact = true,
        .split_combine_lse = true,
        .split_partials = DType::f16},
       {.dtypes = {DType::f16}}},
      {"f16-normalised",
       "f16 K/V, P = exp(s - m) / (sum + 1e-6) rounded to f16 before P.V, f32 sums, rows "
       "rounded to f16 (vLLM's paged attention kernel normalises so; ONNX Runtime's Attention "
       "in f16 rounds its normalised softmax so)",
       {.output = DType::f16,
        .p = DType::f16,
        .rotated_keys_in_storage = true,
        .rope_angles_exact = true,
        .p_normalised = true},
       {.dtypes = {DType::f16}}},
  };
  return profiles;
}

const NumericsProfile& numerics_profile(std::string_view name) {
  for (const NumericsProfile& profile : numerics_profiles()) {
    if (profile.name == name) return profile;
  }
  throw std::invalid_argument("no numerics profile '" + std::string(name) + "'");
}

std::unique_ptr<Engine> with_numerics(std::unique_ptr<Engine> engine,
                                      const NumericsProfile& profile) {
  auto* cpu = dynamic_cast<CpuEngine*>(engine.get());
  if (cpu == nullptr) {
    throw std::invalid_argument("with_numerics: only the built-in CPU engines take a profile");
  }
  cpu->declare(profile.numerics, profile.supports);
  return engine;
}

}  // namespace kvfuzz::cpu
