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
  # Each `cmake --install` of this build rewrites its install_manifest.txt: tests that
  # install it take turns (RESOURCE_LOCK), or two at once under ctest -j can collide.
  set_tests_properties(package:cpp-engine-example PROPERTIES TIMEOUT 600 LABELS package
                                                             RESOURCE_LOCK kvfuzz_install)

  # package:c-plugin-example: a user's engine in plain C as a plugin (examples/c-plugin),
  # built with the system C compiler ($CC, else cc) against its own install of this build:
  # the honest engine passes check, kvfuzz's corpus and all six properties on it; the buggy
  # one fails check, shrinks to a few tokens, and replays and explains as its README says.
  add_test(NAME package:c-plugin-example
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/c_plugin_example.sh ${PROJECT_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR} "${CMAKE_CXX_COMPILER_LAUNCHER}")
  set_tests_properties(package:c-plugin-example PROPERTIES TIMEOUT 300 LABELS package
                                                           RESOURCE_LOCK kvfuzz_install)
endif()
