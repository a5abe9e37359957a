# transformers (adapters/transformers): its attention pieces (mask functions, rotary
# embedding, DynamicCache, the sdpa and eager interfaces) must pass kvfuzz check on all six
# properties at the default sizes, declared as they compute, in every dtype (sdpa) and in
# f32 (eager); a wrong window, rotary or no declarations must be caught on a row.
#
# They need transformers (and torch) in the project's .venv (scripts/setup.sh), checked when
# the tests run, as for the other adapters.
set(KVFUZZ_HF_ENGINE ${PROJECT_SOURCE_DIR}/adapters/transformers/hf_attention_engine.py)
add_test(NAME transformers_venv
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/require_venv.sh ${KVFUZZ_VENV_PYTHON} numpy torch
                 transformers)
set_tests_properties(transformers_venv PROPERTIES FIXTURES_SETUP transformers_venv LABELS adapters)
if(KVFUZZ_SANITIZE)
  return()  # kvfuzz's side of the exec door under ASan is the ORT and torch tests'
endif()

# kvfuzz_hf_test(NAME EXIT CASES ENGINE_FLAGS...): as kvfuzz_torch_test.
function(kvfuzz_hf_test name exit cases)
  list(JOIN ARGN " " flags)
  set(long)
  if(exit EQUAL 0)
    set(long --long-cases 300)
  endif()
  add_test(NAME ${name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.sh ${long} ${exit} $<TARGET_FILE:kvfuzz> check
                   --engine "exec:${KVFUZZ_VENV_PYTHON} ${KVFUZZ_HF_ENGINE} ${flags}"
                   --cases ${cases} --seed 1 --jobs 2 --quiet
                   --out ${CMAKE_CURRENT_BINARY_DIR}/kvfuzz-out)
  # Importing transformers and torch takes about 5 s on an idle core and more than the
  # exec door's 10 s for hello when ctest runs other tests beside it: its start-up limit.
  set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED transformers_venv TIMEOUT 600
                                          LABELS adapters COST ${cases}
                                          ENVIRONMENT KVFUZZ_ENGINE_TIMEOUT=60)
endfunction()

# sdpa in each case's dtype (f32, f16, bf16: numerics keyed by dtype), and eager in f32.
kvfuzz_hf_test(transformers_sdpa 0 100)
kvfuzz_hf_test(transformers_eager_f32 0 100 --attention eager)
# The negative controls: the config's sliding_window one wider (sdpa and eager), rope_theta
# doubled, no numerics declared (the half-precision cases' rounding fails).
kvfuzz_hf_test(transformers_sdpa_bug_window 1 60 --bug window)
kvfuzz_hf_test(transformers_eager_bug_window 1 60 --attention eager --bug window)
kvfuzz_hf_test(transformers_sdpa_bug_rope 1 60 --bug rope)
kvfuzz_hf_test(transformers_sdpa_bug_numerics 1 60 --bug numerics)
