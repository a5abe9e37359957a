# transformers (adapters/transformers): its attention pieces (mask functions, rotary
# embedding, DynamicCache, the sdpa and eager interfaces) must pass kvfuzz check on all six
# properties at the default sizes, declared as they compute, in every dtype (sdpa) and in
# f32 (eager); a wrong window, rotary or no declarations must be caught on a row.
#
# They need transformers (and torch) in the project's .venv (scripts/setup.sh):
# transformers_venv (adapter_venv).
set(KVFUZZ_HF_ENGINE ${PROJECT_SOURCE_DIR}/adapters/transformers/hf_attention_engine.py)
adapter_venv(transformers_venv numpy torch transformers)
if(KVFUZZ_SANITIZE)
  return()  # kvfuzz's side of the exec door under ASan is the ORT and torch tests'
endif()

# kvfuzz_hf_test(NAME EXIT CASES ENGINE_FLAGS...): adapter_check of
# adapters/transformers/hf_attention_engine.py. Importing transformers and torch takes
# about 5 s on an idle core and more than the exec door's 10 s for hello when ctest runs
# other tests beside it: hello gets 60 s.
function(kvfuzz_hf_test name exit cases)
  adapter_check(${name} ${exit} ${cases} ${KVFUZZ_HF_ENGINE} transformers_venv ${ARGN}
                LONG_CASES 300 START_UP_SECONDS 60)
endfunction()
# flex attention compiles for each new shape: its first step took 67 s on a loaded 2-core
# machine (its window control then failed as an engine that hung), so its calls get 300 s.
function(kvfuzz_hf_flex_test name exit cases)
  adapter_check(${name} ${exit} ${cases} ${KVFUZZ_HF_ENGINE} transformers_venv
                --attention flex_attention ${ARGN} LONG_CASES 300 START_UP_SECONDS 300)
endfunction()

# sdpa in each case's dtype (f32, f16, bf16: numerics keyed by dtype), and eager in f32.
kvfuzz_hf_test(transformers_sdpa 0 ${KVFUZZ_HONEST_CASES} FORK)
kvfuzz_hf_test(transformers_eager_f32 0 ${KVFUZZ_HONEST_CASES} --attention eager)
# The negative controls: the config's sliding_window one wider (sdpa and eager), rope_theta
# doubled, no numerics declared (the half-precision cases' rounding fails): transformers_controls,
# with every other negative control here but the three that need their own process.
# flex attention (torch's flex_attention on the CPU, a block mask from the mask functions),
# f32: slow (10 to 50 s a case on a 2-core machine: it compiles for each new shape), so few
# cases: 2 (4 before 2026-12-08; 300 with --long). A wrong window is caught at case 3 of
# seed 1, and the control runs that case alone (its case seed): 55 s, not 160 s, for the
# same assertion (docs/BENCHMARKS.md, "The test command").
kvfuzz_hf_flex_test(transformers_flex_f32 0 2)
kvfuzz_hf_flex_test(transformers_flex_bug_window 1 1 --bug window CHECK --case-seed
                    7862637804313477842)
# StaticCache (sliding layers when the layout has a window; a truncate crops it, or rebuilds
# a sliding layer that went past its window): passes; a wrong window and a truncate that
# forgets to crop are caught.
kvfuzz_hf_test(transformers_static_sdpa 0 ${KVFUZZ_HONEST_CASES} --cache static)
# One DynamicCache whose batch rows are the sequences, every step padded to its longest
# chunk (pads masked in the 2D attention_mask, positions counted per row, fork by
# reorder_cache): passes in every dtype; pads left unmasked and a fork that leaves the
# cache's rows are caught.
kvfuzz_hf_test(transformers_padded_batch 0 ${KVFUZZ_HONEST_CASES} --batch padded)
# DynamicCache(config=...), whose sliding layers keep only the window, with fork moved as
# beam search moves a cache (batch_repeat_interleave, reorder_cache, batch_select_indices):
# at sliding_window = 1 its layer keeps every token (docs/findings, T7, seen at attention
# level through two properties), filed as two known fixtures; with them the run passes
# all 13 cases (300 with --long), without them it fails at case 12. Each case that meets
# the bug restarts the engine (its error ends the process) and is shrunk to be matched to a
# known fixture: 13 cases (30 before 2026-12-08, 60 before that) reach case 12 in about
# half the time.
set(KVFUZZ_HF_KNOWN_ATTENTION ${PROJECT_SOURCE_DIR}/adapters/transformers/known-attention)
kvfuzz_hf_test(transformers_dynamic_config 0 13 --cache dynamic-config --fork beam
               CHECK --known ${KVFUZZ_HF_KNOWN_ATTENTION} --shrink-seconds 300)
# The run must meet the bug and set it aside, not only pass (expect_exit.sh's own message
# still fails it on a wrong exit status).
set_tests_properties(transformers_dynamic_config PROPERTIES
                     PASS_REGULAR_EXPRESSION "shrinks to the known bug [^ ]*: set aside"
                     FAIL_REGULAR_EXPRESSION "expect_exit:")
kvfuzz_hf_test(transformers_dynamic_config_unfiled 1 20 --cache dynamic-config)

# The model level (adapters/transformers/hf_model_engine.py): kvfuzz's tiny transformer as a
# MistralForCausalLM checkpoint, its cached decode through the model's own forward and
# DynamicCache, judged as a whole model (ids in, logits out) against the double full-prefix
# logits; f32, sdpa and eager. The negative controls: sliding_window one wider, rope_theta
# doubled.
set(KVFUZZ_HF_MODEL ${PROJECT_SOURCE_DIR}/adapters/transformers/hf_model_engine.py)
function(kvfuzz_hf_model_test name exit cases)
  adapter_check(${name} ${exit} ${cases} ${KVFUZZ_HF_MODEL} transformers_venv ${ARGN}
                LONG_CASES 200 START_UP_SECONDS 60)
endfunction()
kvfuzz_hf_model_test(transformers_model_sdpa 0 ${KVFUZZ_HONEST_MODEL_CASES} FORK)
kvfuzz_hf_model_test(transformers_model_eager 0 ${KVFUZZ_HONEST_MODEL_CASES} --attention eager)
# The same model loaded in bf16 and in f16 (model.to: weights, activations and cache in the
# dtype, declared as numerics.activations), and the rotary control in bf16.
kvfuzz_hf_model_test(transformers_model_bf16 0 ${KVFUZZ_HONEST_MODEL_CASES} --dtype bf16)
kvfuzz_hf_model_test(transformers_model_f16 0 ${KVFUZZ_HONEST_MODEL_CASES} --dtype f16)
# The same model over a StaticCache (sliding layers when the layout has a window; a truncate
# crops it, or forwards the kept ids again into a new one where a sliding layer went past
# its window), and its window control.
kvfuzz_hf_model_test(transformers_model_static 0 ${KVFUZZ_HONEST_MODEL_CASES} --cache static)
# The same model with every sequence a row of one DynamicCache, each step one forward padded
# to its longest chunk (2D attention_mask, each row's position_ids, fork by reorder_cache),
# and its controls: pads left unmasked, a fork that leaves the cache's rows.
kvfuzz_hf_model_test(transformers_model_shared_cache 0 ${KVFUZZ_HONEST_MODEL_CASES} --shared-cache)
# The same model through model.generate() (its prefill and decode loop, kvfuzz's ids forced,
# the logits from output_logits), and its window control.
kvfuzz_hf_model_test(transformers_model_generate 0 ${KVFUZZ_HONEST_MODEL_CASES} --generate)
# Each step as one left-padded batch through generate(), with generate()'s own cache: its
# sliding layers keep every token at sliding_window = 1 (docs/findings, T7), filed as a known
# bug; with it the run passes while it looks for others, without it the run fails.
kvfuzz_hf_model_test(transformers_model_padded_batch 0 ${KVFUZZ_HONEST_MODEL_CASES} --padded-batch
                     CHECK --known ${PROJECT_SOURCE_DIR}/adapters/transformers/known
                     --shrink-seconds 300)
kvfuzz_hf_model_test(transformers_model_padded_batch_unfiled 1 30 --padded-batch)

# The negative controls above (a wrong window, rotary, numerics, crop, pads or fork rows, at
# attention and model level) in one pytest process: each must be caught on a row within its
# cases of seed 1, as each exec check asserted before 2026-12-08 (test_transformers_controls.py
# names each former test; torch and transformers imported once, not fifteen times).
adapter_pytest(transformers_controls test_transformers_controls.py transformers_venv)
set_tests_properties(transformers_controls PROPERTIES COST 90)
