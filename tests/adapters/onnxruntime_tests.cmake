# ONNX Runtime (adapters/onnxruntime): every shipped variant of the GroupQueryAttention
# adapter and of the ONNX Attention adapter must pass kvfuzz check on all six properties at
# the default sizes, through the exec door (the README's command) and in-process (the
# Python package); each deliberately wrong mapping (--bug) must be caught on a row.
#
# They need the project's .venv with onnxruntime and numpy (scripts/setup.sh): ort_venv
# (adapter_venv, tests/adapters/CMakeLists.txt).
set(KVFUZZ_ORT_DIR ${PROJECT_SOURCE_DIR}/adapters/onnxruntime)
adapter_venv(ort_venv numpy onnxruntime)

# The sanitize preset runs only the honest legacy path, at fewer cases: what it adds is
# kvfuzz's exec door under ASan, not more of ORT. The negative controls check behaviour (a
# wrong mapping is caught on a row), which the default build does; a failing exec engine
# under ASan is test_exec's (tests/doors).
# The honest checks run 150 cases with scripts/test.sh --long (expect_exit.sh
# --long-cases), KVFUZZ_HONEST_CASES in CI.
if(KVFUZZ_SANITIZE)
  set(KVFUZZ_ORT_CASES 20)
else()
  set(KVFUZZ_ORT_CASES ${KVFUZZ_HONEST_CASES})
endif()

# kvfuzz_ort_test(NAME EXIT CASES SCRIPT ENGINE_FLAGS... [CHECK check flags...]):
# adapter_check of adapters/onnxruntime/SCRIPT with those flags.
function(kvfuzz_ort_test name exit cases script)
  adapter_check(${name} ${exit} ${cases} ${KVFUZZ_ORT_DIR}/${script} ort_venv ${ARGN}
                LONG_CASES 150)
endfunction()

set(gqa ort_gqa_engine.py)
set(attention ort_attention_engine.py)
kvfuzz_ort_test(ort_gqa_f32_legacy 0 ${KVFUZZ_ORT_CASES} ${gqa} --dtype f32 --path legacy FORK)
if(KVFUZZ_SANITIZE)
  return()
endif()

# The negative controls: a check stops at the first failure, so 60 cases cost little.
kvfuzz_ort_test(ort_gqa_bug_window 1 60 ${gqa} --dtype f32 --bug window)
kvfuzz_ort_test(ort_gqa_bug_scale 1 60 ${gqa} --dtype f32 --bug scale)
kvfuzz_ort_test(ort_gqa_bug_rope 1 60 ${gqa} --dtype f32 --bug rope)
kvfuzz_ort_test(ort_gqa_interleaved_bug_rope 1 60 ${gqa} --dtype f32 --path batched
                --rotary-style interleaved --bug rope)
# position_ids of a chunk after a past one late: the variants that pass them must be seen
# to use them.
kvfuzz_ort_test(ort_gqa_bug_position_ids 1 60 ${gqa} --dtype f32 --path batched --position-ids
                --bug positions CHECK --rope on)
kvfuzz_ort_test(ort_attention_bug_window 1 60 ${attention} --dtype f32 --bug window)
kvfuzz_ort_test(ort_attention_bug_scale 1 60 ${attention} --dtype f32 --bug scale)
kvfuzz_ort_test(ort_attention_bug_rope 1 60 ${attention} --dtype f32 --bug rope)
# The f16 kernel judged under its declared numerics still catches a wrong mapping, and the
# same kernel declaring nothing fails by its output rounding (half an f16 ulp).
kvfuzz_ort_test(ort_gqa_f16_bug_window 1 60 ${gqa} --dtype f16 --bug window)
kvfuzz_ort_test(ort_gqa_window_cache_bug_window 1 60 ${gqa} --dtype f32 --path window --rope adapter
                --bug window CHECK --window on)
kvfuzz_ort_test(ort_gqa_f16_undeclared 1 60 ${gqa} --dtype f16 --bug numerics)
# GQA's softcap attribute and head_sink input (issue 27): every case with both passes on
# the batched path in f32 and the legacy path in f16 (the other variants get them in about
# a third of their cases); a soft cap doubled and the q heads' sinks reversed are caught.
kvfuzz_ort_test(ort_gqa_f32_features 0 ${KVFUZZ_HONEST_CASES} ${gqa} --dtype f32 --path batched
                CHECK --feature softcap,sinks)
kvfuzz_ort_test(ort_gqa_f16_features 0 ${KVFUZZ_HONEST_CASES} ${gqa} --dtype f16 CHECK --feature softcap,sinks)
kvfuzz_ort_test(ort_gqa_bug_softcap 1 60 ${gqa} --dtype f32 --bug softcap CHECK --feature softcap)
kvfuzz_ort_test(ort_gqa_bug_sinks 1 60 ${gqa} --dtype f32 --bug sinks CHECK --feature sinks)
# smooth_softmax (a sink of 0 on every head): the generator's sinks are seldom all 0, so a
# hand fixture with two zero sinks and its expected rows (with the sink: sum / (n + 1))
# replays through --sinks smooth, which passes smooth_softmax = 1 and no head_sink; set on
# layouts without sinks (--bug smooth), it is caught at case 1.
add_test(NAME ort_gqa_smooth_softmax
         COMMAND ${PROJECT_SOURCE_DIR}/tests/adapters/expect_exit.sh 0 $<TARGET_FILE:kvfuzz> replay
                 ${PROJECT_SOURCE_DIR}/tests/adapters/fixtures/ort-smooth-softmax.json --engine
                 "exec:${KVFUZZ_VENV_PYTHON} ${KVFUZZ_ORT_DIR}/${gqa} --dtype f32 --sinks smooth")
set_tests_properties(ort_gqa_smooth_softmax PROPERTIES FIXTURES_REQUIRED ort_venv TIMEOUT 300
                                                       LABELS adapters)
kvfuzz_ort_test(ort_gqa_bug_smooth 1 60 ${gqa} --dtype f32 --bug smooth)
# Attention's f16 kernel normalises P before rounding it: declared so it passes (below);
# declaring FlashAttention's rounding instead, it fails (three equal weights at case 1),
# and a wrong window is still caught under its declared numerics.
kvfuzz_ort_test(ort_attention_f16_bug_normalisation 1 60 ${attention} --dtype f16
                --bug normalisation)
kvfuzz_ort_test(ort_attention_f16_bug_window 1 60 ${attention} --dtype f16 --bug window)

# Every shipped variant, all six properties, default sizes.
kvfuzz_ort_test(ort_gqa_f32_batched 0 ${KVFUZZ_ORT_CASES} ${gqa} --dtype f32 --path batched)
kvfuzz_ort_test(ort_gqa_f32_shared 0 ${KVFUZZ_ORT_CASES} ${gqa} --dtype f32 --path shared)
kvfuzz_ort_test(ort_gqa_f16_legacy 0 ${KVFUZZ_ORT_CASES} ${gqa} --dtype f16 --path legacy)
kvfuzz_ort_test(ort_gqa_f16_batched 0 ${KVFUZZ_ORT_CASES} ${gqa} --dtype f16 --path batched)
kvfuzz_ort_test(ort_gqa_f16_shared 0 ${KVFUZZ_ORT_CASES} ${gqa} --dtype f16 --path shared)
kvfuzz_ort_test(ort_attention_f32 0 ${KVFUZZ_ORT_CASES} ${attention} --dtype f32 FORK)
kvfuzz_ort_test(ort_attention_f16 0 ${KVFUZZ_ORT_CASES} ${attention} --dtype f16)
# ORT's own sliding-window cache (sliding_window_cache = 1): windowed cases only.
kvfuzz_ort_test(ort_gqa_f32_window_cache 0 ${KVFUZZ_ORT_CASES} ${gqa} --dtype f32 --path window
                --rope adapter CHECK --window on)
kvfuzz_ort_test(ort_gqa_f16_window_cache 0 ${KVFUZZ_ORT_CASES} ${gqa} --dtype f16 --path window
                CHECK --window on)
# ORT's rotary in its other style and with explicit positions: RoPE cases only (a fifth
# of the generator's otherwise), on the batched and the shared path.
kvfuzz_ort_test(ort_gqa_f32_batched_interleaved_position_ids 0 ${KVFUZZ_ORT_CASES} ${gqa}
                --dtype f32 --path batched --rotary-style interleaved --position-ids CHECK --rope on)
kvfuzz_ort_test(ort_gqa_f32_shared_position_ids 0 ${KVFUZZ_ORT_CASES} ${gqa} --dtype f32
                --path shared --position-ids CHECK --rope on)

# In-process: the same classes through kvfuzz.check (the package python_install puts in
# .venv; tests/python).
adapter_pytest(ort_inprocess test_ort_inprocess.py ort_venv)
