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
