# kvfuzz_add_plugin_library() and kvfuzz_add_engine_plugin() (cmake/KvfuzzEnginePlugin.cmake,
# installed with the package): the built-in engines below, the deliberately broken plugins
# of tests/doors/plugin_tests.cmake and users' engine classes.
include(${PROJECT_SOURCE_DIR}/cmake/KvfuzzEnginePlugin.cmake)

# libkvfuzz_builtin_engines.so: every engine of `kvfuzz list` through the plugin door.
kvfuzz_add_plugin_library(kvfuzz_builtin_engines ${CMAKE_CURRENT_LIST_DIR}/builtin_plugin.cpp)
target_link_libraries(kvfuzz_builtin_engines PRIVATE kvfuzz_doors kvfuzz_engines kvfuzz_scenario)
set_target_properties(kvfuzz_builtin_engines PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/plugins)
