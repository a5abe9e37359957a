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
