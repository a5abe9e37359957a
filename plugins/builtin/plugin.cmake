# kvfuzz_add_engine_plugin(TARGET SOURCES...): a shared library speaking the engine plugin
# ABI (kvfuzz/engine_abi.h) that exports kvfuzz_engine_plugin and nothing else. Used for the
# built-in engines below and for the deliberately broken plugins of tests/plugin_tests.cmake.
#
# Why only one symbol: a plugin that links kvfuzz's static libraries carries its own copy
# of them. Were those symbols exported, the copy in the plugin and the one in the kvfuzz
# that loads it could bind to each other, and ASan would see each global registered twice.
# -fvisibility=hidden covers the plugin's own code; the version script also hides what
# comes from the static libraries and from inline library code instantiated in it.
#
# Under the sanitize preset the plugin is compiled like everything else: ASan, UBSan and
# libFuzzer's coverage instrumentation (-fsanitize=fuzzer-no-link). A shared library is
# linked without the sanitizer runtimes, so its __asan_*, __ubsan_* and __sanitizer_cov_*
# references stay undefined here and are resolved by dlopen from the process that loads
# it: every sanitized executable of the build (kvfuzz, the tests, the fuzz targets) has the
# runtime linked in and exports those symbols to shared libraries. RTLD_NOW resolves them
# at load time, so a plugin loaded into an unsanitized process is refused with one line
# naming the missing symbol instead of failing later. In a fuzz target, libFuzzer then
# also counts the plugin's edges: its counters register when it is loaded.
file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/plugins/kvfuzz_plugin_exports.map
     CONTENT "{\n  global: kvfuzz_engine_plugin;\n  local: *;\n};\n")

function(kvfuzz_add_engine_plugin target)
  # Here, not outside: a function sees its caller's variables, and callers live elsewhere.
  set(KVFUZZ_PLUGIN_EXPORTS ${CMAKE_BINARY_DIR}/plugins/kvfuzz_plugin_exports.map)
  add_library(${target} SHARED ${ARGN})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/harness/include)
  set_target_properties(${target} PROPERTIES
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS ${KVFUZZ_PLUGIN_EXPORTS})
  target_link_options(${target} PRIVATE -Wl,--version-script=${KVFUZZ_PLUGIN_EXPORTS})
endfunction()

# libkvfuzz_builtin_engines.so: every engine of `kvfuzz list` through the plugin door.
kvfuzz_add_engine_plugin(kvfuzz_builtin_engines ${CMAKE_CURRENT_LIST_DIR}/builtin_plugin.cpp)
target_link_libraries(kvfuzz_builtin_engines PRIVATE kvfuzz_engines kvfuzz_scenario)
set_target_properties(kvfuzz_builtin_engines PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/plugins)
