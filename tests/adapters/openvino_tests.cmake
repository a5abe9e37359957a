# OpenVINO (adapters/openvino): the CPU plugin's PagedAttentionExtension op, with block
# tables kept by the adapter, must pass kvfuzz check on all six properties at the default
# sizes in f32 (windows, sinks), ALiBi without windows, and an f16 cache; a mapping broken
# on purpose (--bug) must be caught on a row; and the one finding (ALiBi dropped when a
# sliding window is set: docs/findings/openvino.md) must still reproduce from its fixture,
# so that a release that mends it shows here.
#
# They need openvino in the project's .venv (scripts/setup.sh): openvino_venv.
adapter_venv(openvino_venv numpy openvino)
if(KVFUZZ_SANITIZE)
  return()  # kvfuzz's side of the exec door under ASan is the ORT and torch tests'
endif()

# kvfuzz_openvino_test(NAME EXIT CASES ENGINE_FLAGS... [CHECK check flags...]): adapter_check
# of adapters/openvino/ov_paged_engine.py; importing openvino takes about a second.
function(kvfuzz_openvino_test name exit cases)
  adapter_check(${name} ${exit} ${cases} ${PROJECT_SOURCE_DIR}/adapters/openvino/ov_paged_engine.py
                openvino_venv ${ARGN} LONG_CASES 300 START_UP_SECONDS 60)
endfunction()

# --no-alibi: everything but ALiBi, which the op drops under a window (the finding below).
kvfuzz_openvino_test(openvino_paged 0 ${KVFUZZ_HONEST_CASES} --no-alibi FORK)
kvfuzz_openvino_test(openvino_paged_alibi 0 ${KVFUZZ_HONEST_CASES} CHECK --feature alibi --window off)
kvfuzz_openvino_test(openvino_paged_f16_cache 0 ${KVFUZZ_HONEST_CASES} --kv f16 --no-alibi CHECK --dtype f16)
# The controls, each caught within 20 cases of seed 1 (adapters/openvino/README.md): a
# window one key wider, the default scale, each q head given its neighbour's sink, the
# ALiBi slopes negated.
kvfuzz_openvino_test(openvino_paged_bug_window 1 60 --no-alibi --bug window)
kvfuzz_openvino_test(openvino_paged_bug_scale 1 60 --no-alibi --bug scale)
kvfuzz_openvino_test(openvino_paged_bug_sinks 1 60 --no-alibi --bug sinks)
kvfuzz_openvino_test(openvino_paged_bug_alibi 1 60 --bug alibi CHECK --feature alibi --window off)
# The kv heads handed to the op in reverse (the GQA mapping): caught at case 1.
kvfuzz_openvino_test(openvino_paged_bug_gqa 1 60 --no-alibi --bug gqa)

# The finding: 0.5 where ALiBi under a window of 2 gives 1 / (1 + e^-0.25) = 0.5622.
add_test(NAME openvino_alibi_with_window_finding
         COMMAND ${PROJECT_SOURCE_DIR}/tests/adapters/expect_exit.sh 1 $<TARGET_FILE:kvfuzz> replay
                 ${PROJECT_SOURCE_DIR}/tests/adapters/fixtures/openvino-alibi-with-window.json
                 --engine "exec:${KVFUZZ_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/adapters/openvino/ov_paged_engine.py")
set_tests_properties(openvino_alibi_with_window_finding PROPERTIES FIXTURES_REQUIRED openvino_venv
                                                                   TIMEOUT 300 LABELS adapters)
adapter_pytest(openvino_inprocess test_openvino_inprocess.py openvino_venv)

# The finding's standalone reproduction (openvino and numpy alone): still 0.5 under a window.
add_test(NAME openvino_repro_alibi_with_window
         COMMAND ${KVFUZZ_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/adapters/openvino/repro/alibi_with_window.py)
set_tests_properties(openvino_repro_alibi_with_window PROPERTIES
                     FIXTURES_REQUIRED openvino_venv TIMEOUT 120 LABELS adapters
                     PASS_REGULAR_EXPRESSION "sliding_window 2: row at position 1 = 0.5000")
