# torch (adapters/torch): scaled_dot_product_attention on the CPU, natively in bf16, f16 and
# f32 (one engine for each, and one for all three), must pass kvfuzz check on all six
# properties at the default sizes and (bf16, f16) at
# 2048-token contexts, declared as it computes (its fexp_u20 exp: numerics.exp_ulps); the
# same kernel with the exp left undeclared, or with a mapping broken on purpose (--bug),
# must be caught on a row.
#
# They need torch in the project's .venv (scripts/setup.sh): torch_venv (adapter_venv).
set(KVFUZZ_TORCH_ENGINE ${PROJECT_SOURCE_DIR}/adapters/torch/torch_sdpa_engine.py)
adapter_venv(torch_venv numpy torch)

# As for ORT: the sanitize preset runs one honest check, at fewer cases (kvfuzz's side of
# the exec door under ASan); the default build runs the rest.
if(KVFUZZ_SANITIZE)
  set(KVFUZZ_TORCH_CASES 20)
else()
  set(KVFUZZ_TORCH_CASES ${KVFUZZ_HONEST_CASES})
endif()

# kvfuzz_torch_test(NAME EXIT CASES ENGINE_FLAGS... [CHECK check flags...]): adapter_check
# of adapters/torch/torch_sdpa_engine.py. torch's import takes about 2 s, more beside other
# tests: hello gets 60 s.
function(kvfuzz_torch_test name exit cases)
  adapter_check(${name} ${exit} ${cases} ${KVFUZZ_TORCH_ENGINE} torch_venv ${ARGN}
                LONG_CASES 300 START_UP_SECONDS 60)
endfunction()

kvfuzz_torch_test(torch_sdpa_bf16 0 ${KVFUZZ_TORCH_CASES} --dtype bf16)
if(KVFUZZ_SANITIZE)
  return()
endif()
kvfuzz_torch_test(torch_sdpa_f16 0 ${KVFUZZ_TORCH_CASES} --dtype f16)
# One engine for every dtype (the default, --dtype layout): it computes in each case's
# layout dtype and declares that case's numerics (numerics keyed by dtype), so f32 cases
# are judged by f32 numerics and bf16 ones by bf16's (issue 26, item 1). Also the f32 kernel's
# test.
kvfuzz_torch_test(torch_sdpa_layout 0 ${KVFUZZ_TORCH_CASES} FORK)
# Long contexts: a first prefill of up to 2048 tokens, long decode runs (40 cases of each
# passed at seed 3, the largest share of the bound 0.368 and 0.215: docs/BENCHMARKS.md).
kvfuzz_torch_test(torch_sdpa_bf16_2048 0 8 --dtype bf16 CHECK --max-tokens 2048)
kvfuzz_torch_test(torch_sdpa_f16_2048 0 8 --dtype f16 CHECK --max-tokens 2048)

# Both ways: the exp's error undeclared fails (f16 at case 1, bf16 at case 3 of seed 1: a
# key at the max whose exp(0) = 0.99995 rounds to P = 1, and keys 1e-4 off); every wrong
# mapping is caught under the declared numerics.
kvfuzz_torch_test(torch_sdpa_bf16_bug_exp 1 60 --dtype bf16 --bug exp)
kvfuzz_torch_test(torch_sdpa_f16_bug_exp 1 60 --dtype f16 --bug exp)
kvfuzz_torch_test(torch_sdpa_bf16_bug_numerics 1 60 --dtype bf16 --bug numerics)
kvfuzz_torch_test(torch_sdpa_bf16_bug_window 1 60 --dtype bf16 --bug window)
kvfuzz_torch_test(torch_sdpa_bf16_bug_scale 1 60 --dtype bf16 --bug scale)
kvfuzz_torch_test(torch_sdpa_bf16_bug_rope 1 60 --dtype bf16 --bug rope)
