# package:cpp-engine-example: the CMake package door end to end (docs/writing-an-engine.md).
# It installs this build into a temporary prefix, builds examples/cpp-engine against it
# with the same compiler, and runs the example's tests: the honest engine's must pass, the
# buggy engine's must fail and leave shrunk fixtures that the installed `kvfuzz replay`
# accepts. Not in the sanitizer or fuzzer builds: the example would link uninstrumented
# against instrumented libraries.
#
# It installs every installed target, so it needs the whole build done first (as
# scripts/test.sh and `cmake --build` before ctest have it); the script says so if not.
if(NOT KVFUZZ_SANITIZE AND NOT KVFUZZ_FUZZERS)
  add_test(NAME package:cpp-engine-example
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/package_example.sh ${PROJECT_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR} ${CMAKE_CXX_COMPILER} "${CMAKE_CXX_COMPILER_LAUNCHER}")
  set_tests_properties(package:cpp-engine-example PROPERTIES TIMEOUT 600 LABELS package)
endif()
