# llama.cpp as a model engine (adapters/llama.cpp), tested directly (test_llama_cpp.cpp):
# built when the default preset builds the adapter (KVFUZZ_LLAMA_CPP and the vendored
# source, scripts/fetch-llama-cpp.sh).
if(TARGET kvfuzz_llama_cpp)
  add_executable(test_llama_cpp test_llama_cpp.cpp llama_cpp_run.cpp)
  target_include_directories(test_llama_cpp PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(test_llama_cpp PRIVATE kvfuzz_llama_cpp kvfuzz_corpus kvfuzz_generate kvfuzz_engines
                                               GTest::gtest GTest::gtest_main)
  target_compile_definitions(test_llama_cpp PRIVATE KVFUZZ_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  gtest_discover_tests(test_llama_cpp DISCOVERY_TIMEOUT 60
                       PROPERTIES TIMEOUT 600 LABELS llama.cpp)
endif()

# The judge's model of the query ggml hands a block-quantized K, against ggml's quantizers.
if(TARGET kvfuzz_llama_cpp)
  add_executable(test_ggml_query_blocks test_ggml_query_blocks.cpp)
  target_link_libraries(test_ggml_query_blocks PRIVATE kvfuzz_judge ggml GTest::gtest
                                                       GTest::gtest_main)
  gtest_discover_tests(test_ggml_query_blocks DISCOVERY_TIMEOUT 60
                       PROPERTIES TIMEOUT 120 LABELS llama.cpp)
endif()

# kvfuzz-llama-export: a fixture llama can run becomes a GGUF file; one it cannot (the older
# model fixtures have no RoPE) is refused with exit 2 and one line naming $.layout.
if(TARGET kvfuzz-llama-export)
  add_test(NAME llama_export_writes_gguf
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.sh 0 $<TARGET_FILE:kvfuzz-llama-export>
                   ${PROJECT_SOURCE_DIR}/corpus/model/model-rope-gqa-history.json
                   ${CMAKE_CURRENT_BINARY_DIR}/model-rope-gqa-history.gguf)
  add_test(NAME llama_export_refuses_without_rope
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.sh 2 $<TARGET_FILE:kvfuzz-llama-export>
                   ${PROJECT_SOURCE_DIR}/corpus/model/model-reset-two-requests.json
                   ${CMAKE_CURRENT_BINARY_DIR}/refused.gguf)
  set_tests_properties(llama_export_refuses_without_rope PROPERTIES
                       PASS_REGULAR_EXPRESSION "\\$\\.layout: the llama architecture cannot express no RoPE"
                       FAIL_REGULAR_EXPRESSION "expect_exit:")
  set_tests_properties(llama_export_writes_gguf llama_export_refuses_without_rope PROPERTIES
                       LABELS llama.cpp)
endif()

# Through kvfuzz's own door, as a user runs it: `kvfuzz check` with all six properties on
# the plugin's engines (model scenarios, judged by the model level's tolerance with the
# engines' declared numerics). The honest three pass 100 cases; each mutant (one mapping
# broken on purpose) is rejected on a row, not by an engine error (expect_exit.sh). The
# mutants die within a few cases (rope-unpermuted at case 2, truncate-keeps-one at 4,
# fork-without-copy at 17 with the default seed); 100 cases is the margin.
if(TARGET kvfuzz_llama_cpp_plugin)
  set(plugin plugin:$<TARGET_FILE:kvfuzz_llama_cpp_plugin>)
  foreach(engine llama-cpp llama-cpp-unfused llama-cpp-f32 llama-cpp-rope-unpermuted
                 llama-cpp-scale-unfolded llama-cpp-truncate-keeps-one llama-cpp-fork-without-copy)
    add_test(NAME llama_cpp:check-${engine}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.sh 0 $<TARGET_FILE:kvfuzz> check
                     --engine ${plugin}:${engine} --cases 100 --jobs 2 --quiet
                     --out ${CMAKE_CURRENT_BINARY_DIR}/llama-check-${engine})
    set_tests_properties(llama_cpp:check-${engine} PROPERTIES TIMEOUT 600 LABELS llama.cpp)
    if(engine MATCHES "rope-unpermuted|scale-unfolded|truncate-keeps-one|fork-without-copy")
      set_tests_properties(llama_cpp:check-${engine} PROPERTIES
                           PASS_REGULAR_EXPRESSION "mutant +[0-9]+ .* rejected at case")
    else()
      set_tests_properties(llama_cpp:check-${engine} PROPERTIES
                           PASS_REGULAR_EXPRESSION "honest +100 .* pass")
    endif()
  endforeach()
endif()

# The cache in ggml's blocks (--cache-type-k / -v), judged by the model tolerance's block
# noise (model_tolerance.cpp): llama-cpp passes 100 cases over the five formats, K and V
# drawn from them; llama-cpp-k-as-q4_0 (K made as q4_0 whatever the format: the mapping
# broken) is rejected over q8_0 keys (at case 2, default seed). Over q5_1 keys it is not
# (q4_0's error is within twice q5_1's: the model level cannot tell them apart).
if(TARGET kvfuzz_llama_cpp_plugin)
  add_test(NAME llama_cpp:check-llama-cpp-kv-blocks
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.sh 0 $<TARGET_FILE:kvfuzz> check
                   --engine ${plugin}:llama-cpp --kv-format q8_0,q4_0,q4_1,q5_0,q5_1
                   --cases 100 --seed 2 --jobs 2 --quiet
                   --out ${CMAKE_CURRENT_BINARY_DIR}/llama-check-kv-blocks)
  set_tests_properties(llama_cpp:check-llama-cpp-kv-blocks PROPERTIES
                       PASS_REGULAR_EXPRESSION "honest +100 .* pass" TIMEOUT 600 LABELS llama.cpp)
  add_test(NAME llama_cpp:check-llama-cpp-k-as-q4_0
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.sh 0 $<TARGET_FILE:kvfuzz> check
                   --engine ${plugin}:llama-cpp-k-as-q4_0 --kv-format q8_0 --cases 100
                   --jobs 2 --quiet --out ${CMAKE_CURRENT_BINARY_DIR}/llama-check-k-as-q4_0)
  set_tests_properties(llama_cpp:check-llama-cpp-k-as-q4_0 PROPERTIES
                       PASS_REGULAR_EXPRESSION "mutant +[0-9]+ .* rejected at case"
                       TIMEOUT 600 LABELS llama.cpp)
endif()

# The corpus's model fixtures replayed on llama.cpp, as a user replays them: those its
# engines can be given (RoPE; the cache's storage dtype) reproduce kvfuzz's own full-prefix
# logits within the model tolerance of the engine's declared numerics; the rest are skipped
# with the reason. At least one fixture per engine must be judged ("[1-9] passed").
if(TARGET kvfuzz_llama_cpp_plugin)
  foreach(engine llama-cpp llama-cpp-unfused llama-cpp-f32)
    add_test(NAME llama_cpp:replay-corpus-model-${engine}
             COMMAND $<TARGET_FILE:kvfuzz> replay ${PROJECT_SOURCE_DIR}/corpus/model
                     --engine ${plugin}:${engine})
    set_tests_properties(llama_cpp:replay-corpus-model-${engine} PROPERTIES
                         PASS_REGULAR_EXPRESSION " [1-9][0-9]* passed, 0 failed, 0 bad"
                         TIMEOUT 300 LABELS llama.cpp)
  endforeach()
endif()

# ggml's attention as an attention engine (adapters/llama.cpp/src/ggml_attention.h), through
# kvfuzz's plugin door: all six properties, 300 cases of each honest engine (windows, the
# soft cap, sinks, ALiBi, chunked local attention, RoPE, GQA; f32, f16, bf16 caches; the flash
# and the matmul path), and each negative control rejected on a row. ggml-flash-f16 has a
# known bug (docs/findings/llama.cpp.md, G1: P.V summed in f16 overflows), filed in
# known-ggml/: a finding that shrinks to it is set aside, any other fails the run.
if(TARGET kvfuzz_ggml_attention_plugin)
  set(ggml plugin:$<TARGET_FILE:kvfuzz_ggml_attention_plugin>)
  set(ggml_known --known ${PROJECT_SOURCE_DIR}/adapters/llama.cpp/known-ggml --shrink-seconds 120)
  # ggml_check(TEST ENGINE CASES FLAGS...): kvfuzz check of one engine; an honest one must pass
  # all CASES, a control ("-bug-") be rejected on a row.
  function(ggml_check test engine cases)
    add_test(NAME ggml:${test}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.sh 0 $<TARGET_FILE:kvfuzz> check
                     --engine ${ggml}:${engine} --cases ${cases} --quiet ${ARGN}
                     --out ${CMAKE_CURRENT_BINARY_DIR}/ggml-${test})
    set(expected "honest +${cases} .* pass")
    if(engine MATCHES "-bug-")
      set(expected "mutant +[0-9]+ .* rejected at case")
    endif()
    set_tests_properties(ggml:${test} PROPERTIES TIMEOUT 600 LABELS llama.cpp
                         PASS_REGULAR_EXPRESSION "${expected}")
  endfunction()

  foreach(engine ggml-flash-f32 ggml-flash-f16 ggml-flash-bf16 ggml-matmul-f32 ggml-matmul-f16
                 ggml-matmul-bf16 ggml-flash-bug-window ggml-flash-bug-softcap ggml-flash-bug-sinks
                 ggml-flash-bug-alibi ggml-flash-bug-gqa ggml-matmul-bug-window)
    set(known)
    if(engine STREQUAL "ggml-flash-f16")
      set(known ${ggml_known})
    endif()
    ggml_check(check-${engine} ${engine} 300 --jobs 2 ${known})
  endforeach()

  # MLA as llama.cpp's DeepSeek graph caches it (no V cache; V a view of each K row's first
  # value_dim elements), with its RoPE part, on the flash path in each dtype; the control
  # views V at the key row's end.
  foreach(engine ggml-flash-f32 ggml-flash-f16 ggml-flash-bf16)
    ggml_check(check-mla-${engine} ${engine} 100 --jobs 2 --feature value_from_key --rope on
               ${ggml_known})
  endforeach()
  ggml_check(check-ggml-flash-bug-mla-value ggml-flash-bug-mla-value 100 --jobs 2
             --feature value_from_key)
  # The same over a block-quantized latent cache (DeepSeek with -ctk q8_0 and the like): V
  # a view of whole blocks of each K row.
  ggml_check(check-mla-blocks-ggml-flash-f32 ggml-flash-f32 100 --jobs 2 --feature value_from_key
             --rope on --kv-format q8_0,q4_0,q5_1)
  ggml_check(check-mla-blocks-ggml-flash-f16 ggml-flash-f16 60 --jobs 2 --feature value_from_key
             --kv-format q8_0,q4_1 ${ggml_known})
  ggml_check(check-ggml-flash-bug-mla-value-blocks ggml-flash-bug-mla-value 60 --jobs 2
             --feature value_from_key --kv-format q8_0)

  # Two threads (rows shared out in chunks; the split-KV decode's partials from two threads
  # from 512 keys on): ggml's threads spin at their barriers, so these run alone
  # (RUN_SERIAL), one worker, 60 cases. The f32 engine with --max-tokens 600, so that decodes
  # reach the split path; the f16 one at default sizes with its known bug (G1, which long
  # contexts show in many shapes, each shrinking to a minimum of its own).
  ggml_check(check-ggml-flash-f32-t2 ggml-flash-f32-t2 60 --jobs 1 --max-tokens 600)
  ggml_check(check-ggml-flash-f16-t2 ggml-flash-f16-t2 60 --jobs 1 ${ggml_known})
  set_tests_properties(ggml:check-ggml-flash-f32-t2 ggml:check-ggml-flash-f16-t2 PROPERTIES
                       RUN_SERIAL TRUE)

  # The K/V block formats (q8_0, q4_0, q4_1, q5_0, q5_1, K and V each) on the flash path,
  # whose numerics then declare query_blocks (ggml quantizes q to K's q8_0 / q8_1 blocks);
  # the controls: every K block format stored as q4_0, and an honest engine that does not
  # declare query_blocks.
  foreach(engine ggml-flash-f32 ggml-flash-f16 ggml-flash-bf16 ggml-flash-bug-k-format
                 ggml-flash-bug-query-blocks)
    ggml_check(check-blocks-${engine} ${engine} 300 --jobs 2
               --kv-format q8_0,q4_0,q4_1,q5_0,q5_1 ${ggml_known})
  endforeach()

  # G1 as filed: the hand-made fixture fails on the flash path (the row is inf) and passes on
  # the matmul path, which sums P.V in f32; the standalone program (ggml only) reproduces it
  # and the stagnation before it (4096 keys of value 1 give 0.5).
  set(g1 ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/ggml-flash-f16-accumulator-overflow.json)
  add_test(NAME ggml:finding-g1-flash COMMAND $<TARGET_FILE:kvfuzz> replay ${g1}
           --engine ${ggml}:ggml-flash-f16)
  set_tests_properties(ggml:finding-g1-flash PROPERTIES LABELS llama.cpp
                       PASS_REGULAR_EXPRESSION "got inf, expected 7999.99.*0 passed, 1 failed")
  add_test(NAME ggml:finding-g1-matmul COMMAND $<TARGET_FILE:kvfuzz> replay ${g1}
           --engine ${ggml}:ggml-matmul-f16)
  set_tests_properties(ggml:finding-g1-matmul PROPERTIES LABELS llama.cpp
                       PASS_REGULAR_EXPRESSION "1 passed, 0 failed")
  foreach(args "9;8000" "4096;1")
    string(REPLACE ";" "-" name "${args}")
    add_test(NAME ggml:repro-g1-${name}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.sh 1
                     $<TARGET_FILE:ggml-flash-f16-accumulator> ${args})
    set_tests_properties(ggml:repro-g1-${name} PROPERTIES LABELS llama.cpp
                         PASS_REGULAR_EXPRESSION "f32 K/V: [0-9]+\n.*reproduced")
  endforeach()
endif()
