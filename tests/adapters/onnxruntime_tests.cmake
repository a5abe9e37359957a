# ONNX Runtime's CPU GroupQueryAttention (adapters/onnxruntime): the f32 and f16 kernels
# must pass kvfuzz check, and each deliberately wrong mapping (--bug) must be caught.
#
# They need the project's .venv with onnxruntime and numpy (scripts/setup.sh). That is
# checked when the tests run, not when CMake configures (a configure-time answer would go
# stale once setup has run): ort_venv fails naming what is missing, and the tests that
# require it are then not run, which ctest counts as failures too. Never a silent skip.
set(KVFUZZ_VENV_PYTHON ${PROJECT_SOURCE_DIR}/.venv/bin/python)
add_test(NAME ort_venv COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/require_venv.sh ${KVFUZZ_VENV_PYTHON}
                               numpy onnxruntime)
set_tests_properties(ort_venv PROPERTIES FIXTURES_SETUP ort_venv)

set(KVFUZZ_ORT_ENGINE "exec:${KVFUZZ_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/adapters/onnxruntime/ort_gqa_engine.py")
# Two workers: check judges all six properties, several runs of the engine per case (a
# process each, until the exec door keeps one per worker).
set(KVFUZZ_ORT_CHECK --cases 60 --seed 1 --jobs 2 --quiet --out ${CMAKE_CURRENT_BINARY_DIR}/kvfuzz-out)

# kvfuzz_ort_test(NAME EXIT ENGINE_FLAGS...): kvfuzz check of the adapter with those flags,
# expecting exit status EXIT (expect_exit.sh).
function(kvfuzz_ort_test name exit)
  list(JOIN ARGN " " flags)
  add_test(NAME ${name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.sh ${exit} $<TARGET_FILE:kvfuzz> check
                   --engine "${KVFUZZ_ORT_ENGINE} ${flags}" ${KVFUZZ_ORT_CHECK})
  set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED ort_venv TIMEOUT 600)
endfunction()

kvfuzz_ort_test(ort_gqa_f32 0 --dtype f32)
kvfuzz_ort_test(ort_gqa_f16 0 --dtype f16)
kvfuzz_ort_test(ort_gqa_bug_window 1 --dtype f32 --bug window)
kvfuzz_ort_test(ort_gqa_bug_scale 1 --dtype f32 --bug scale)
kvfuzz_ort_test(ort_gqa_bug_rope 1 --dtype f32 --bug rope)
# The f16 kernel judged under its declared numerics still catches a wrong mapping, and the
# same kernel declaring nothing fails by its output rounding (half an f16 ulp).
kvfuzz_ort_test(ort_gqa_f16_bug_window 1 --dtype f16 --bug window)
kvfuzz_ort_test(ort_gqa_f16_undeclared 1 --dtype f16 --bug numerics)
