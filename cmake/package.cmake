# The installed package (docs/writing-an-engine.md): after
#   cmake --install build/default --prefix PREFIX
# a project with PREFIX in CMAKE_PREFIX_PATH writes
#   find_package(kvfuzz CONFIG REQUIRED)
#   kvfuzz_add_engine_plugin(TARGET ... ENGINE MyEngine HEADER my_engine.h ...)
#   kvfuzz_add_engine_tests(TARGET ... ENGINE MyEngine HEADER my_engine.h ...)
# and gets its engine as a plugin for the kvfuzz command (cmake/KvfuzzEnginePlugin.cmake)
# and GoogleTest tests for it (cmake/KvfuzzEngineTests.cmake), or links
# kvfuzz::harness to drive the library itself.
#
# Installed: the stage libraries (support, scenario, run, generate, judge with the model
# level, shrink, corpus, doors, check), the engines and the tiny transformer, engine_tests, the
# public headers of harness/include/kvfuzz and harness/engine_tests/include/kvfuzz (a
# stage's own headers stay in the source tree), the kvfuzz command, the built-in engines'
# plugin when it is built, kvfuzz's corpus and fixture dictionary, the fuzz targets when
# the build has them (libexec/kvfuzz, for `kvfuzz campaign`), and the CMake files:
# kvfuzzConfig.cmake, its version file, kvfuzzTargets.cmake (namespace kvfuzz::),
# KvfuzzEngineTests.cmake and KvfuzzEnginePlugin.cmake.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

add_subdirectory(${PROJECT_SOURCE_DIR}/harness/engine_tests ${PROJECT_BINARY_DIR}/harness/engine_tests)

# kvfuzz::harness: everything a program that drives kvfuzz itself links (scenarios, the
# generator, the judge and its properties, the shrinker, fixtures, the built-in engines and
# the doors for external ones).
set(KVFUZZ_STAGE_LIBRARIES kvfuzz_support kvfuzz_scenario kvfuzz_run kvfuzz_generate kvfuzz_attention kvfuzz_model kvfuzz_judge
    kvfuzz_shrink kvfuzz_corpus kvfuzz_doors kvfuzz_check kvfuzz_orchestrate)
add_library(kvfuzz_harness INTERFACE)
target_link_libraries(kvfuzz_harness INTERFACE ${KVFUZZ_STAGE_LIBRARIES} kvfuzz_transformer
                                               kvfuzz_engines)
add_library(kvfuzz::harness ALIAS kvfuzz_harness)

set(KVFUZZ_PACKAGE_TARGETS ${KVFUZZ_STAGE_LIBRARIES} kvfuzz_transformer kvfuzz_simt
    kvfuzz_engines kvfuzz_engine_tests kvfuzz_harness kvfuzz)
foreach(target ${KVFUZZ_STAGE_LIBRARIES} kvfuzz_transformer kvfuzz_simt kvfuzz_engines
               kvfuzz_harness)
  string(REPLACE "kvfuzz_" "" export_name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
endforeach()
# The built-in engines as a C ABI plugin (plugins/builtin), when this build makes it.
if(TARGET kvfuzz_builtin_engines)
  set_target_properties(kvfuzz_builtin_engines PROPERTIES EXPORT_NAME builtin_engines)
  list(APPEND KVFUZZ_PACKAGE_TARGETS kvfuzz_builtin_engines)
endif()

set(KVFUZZ_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvfuzz)
set(KVFUZZ_INSTALL_CORPUSDIR ${CMAKE_INSTALL_DATADIR}/kvfuzz/corpus)

install(TARGETS ${KVFUZZ_PACKAGE_TARGETS}
  EXPORT kvfuzzTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/kvfuzz
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/harness/include/kvfuzz
                  ${PROJECT_SOURCE_DIR}/harness/engine_tests/include/kvfuzz
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/corpus/ DESTINATION ${KVFUZZ_INSTALL_CORPUSDIR}
        FILES_MATCHING PATTERN "*.json")
# The campaign's defaults next to an installed kvfuzz (campaign/campaign_defaults.h): the
# corpus as seeds and the fixture dictionary; the fuzz targets, in a build that has them,
# go to libexec/kvfuzz (fuzzers/CMakeLists.txt).
install(FILES ${PROJECT_SOURCE_DIR}/fuzzers/fixture.dict DESTINATION ${CMAKE_INSTALL_DATADIR}/kvfuzz)

install(EXPORT kvfuzzTargets NAMESPACE kvfuzz:: DESTINATION ${KVFUZZ_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvfuzzConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/kvfuzzConfig.cmake
  INSTALL_DESTINATION ${KVFUZZ_INSTALL_CMAKEDIR}
  PATH_VARS KVFUZZ_INSTALL_CORPUSDIR)
# 0.x: a new minor version may change the interface.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/kvfuzzConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/kvfuzzConfig.cmake
              ${PROJECT_BINARY_DIR}/cmake/kvfuzzConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/KvfuzzEngineTests.cmake
              ${PROJECT_SOURCE_DIR}/cmake/KvfuzzEnginePlugin.cmake
        DESTINATION ${KVFUZZ_INSTALL_CMAKEDIR})
