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
                 llama-cpp-truncate-keeps-one llama-cpp-fork-without-copy)
    add_test(NAME llama_cpp:check-${engine}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.sh 0 $<TARGET_FILE:kvfuzz> check
                     --engine ${plugin}:${engine} --cases 100 --jobs 2 --quiet
                     --out ${CMAKE_CURRENT_BINARY_DIR}/llama-check-${engine})
    set_tests_properties(llama_cpp:check-${engine} PROPERTIES TIMEOUT 600 LABELS llama.cpp)
    if(engine MATCHES "rope-unpermuted|truncate-keeps-one|fork-without-copy")
      set_tests_properties(llama_cpp:check-${engine} PROPERTIES
                           PASS_REGULAR_EXPRESSION "mutant +[0-9]+ .* rejected at case")
    else()
      set_tests_properties(llama_cpp:check-${engine} PROPERTIES
                           PASS_REGULAR_EXPRESSION "honest +100 .* pass")
    endif()
  endforeach()
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
