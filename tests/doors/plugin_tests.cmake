# The C ABI plugin door (kvfuzz/engine_abi.h): the built-in engines through it, and small
# deliberately broken plugins that kvfuzz must refuse with one line or turn into engine
# errors. Included from tests/doors/CMakeLists.txt; kvfuzz_add_plugin_library comes from
# plugins/builtin/plugin.cmake.
if(NOT COMMAND kvfuzz_add_plugin_library)
  return()
endif()

set(KVFUZZ_TEST_PLUGIN_DEFINES "KVFUZZ_BUILTIN_PLUGIN=\"$<TARGET_FILE:kvfuzz_builtin_engines>\"")
set(KVFUZZ_TEST_PLUGINS kvfuzz_builtin_engines)

# One library per table defect, all from one source (tests/doors/plugins/bad_table.cpp).
foreach(defect abi_version_next null_table struct_size_too_small no_engines missing_name
               invalid_name duplicate_names null_step truncate_without_function
               fork_without_function too_many_engines null_engines entry_abi_version_1
               abi_1_table_of_abi_3_entries abi_2_table_of_abi_3_entries name_not_text
               description_not_utf8 description_with_newline bitwise_unknown_flag
               output_dtype_unknown p_dtype_zero p_dtype_unknown score_accumulation_bf16
               value_accumulation_unknown rotated_keys_two dtypes_unknown_bit
               head_dim_multiple_negative max_head_dim_negative max_q_heads_negative
               max_context_negative supports_unknown_flag reserved_not_zero)
  set(target kvfuzz_test_plugin_${defect})
  kvfuzz_add_plugin_library(${target} plugins/bad_table.cpp)
  target_compile_definitions(${target} PRIVATE TABLE_DEFECT=${defect})
  string(TOUPPER ${defect} upper)
  list(APPEND KVFUZZ_TEST_PLUGIN_DEFINES "KVFUZZ_PLUGIN_${upper}=\"$<TARGET_FILE:${target}>\"")
  list(APPEND KVFUZZ_TEST_PLUGINS ${target})
endforeach()

kvfuzz_add_plugin_library(kvfuzz_test_plugin_misbehaving plugins/misbehaving_engines.cpp)
list(APPEND KVFUZZ_TEST_PLUGIN_DEFINES
     "KVFUZZ_PLUGIN_MISBEHAVING=\"$<TARGET_FILE:kvfuzz_test_plugin_misbehaving>\"")
list(APPEND KVFUZZ_TEST_PLUGINS kvfuzz_test_plugin_misbehaving)

# Plugins built against ABI 1, 2, 3 and 4 (tests/doors/plugins/abi_vN_table.cpp): the built-in
# engines, forwarded to the builtin plugin with the declarations their version has, in a
# table of that version's entries.
foreach(version 1 2 3 4)
  set(target kvfuzz_test_plugin_abi_v${version})
  kvfuzz_add_plugin_library(${target} plugins/abi_v${version}_table.cpp)
  target_compile_definitions(${target} PRIVATE
                             "KVFUZZ_BUILTIN_PLUGIN=\"$<TARGET_FILE:kvfuzz_builtin_engines>\"")
  target_link_libraries(${target} PRIVATE ${CMAKE_DL_LIBS})
  add_dependencies(${target} kvfuzz_builtin_engines)
  list(APPEND KVFUZZ_TEST_PLUGIN_DEFINES "KVFUZZ_PLUGIN_ABI_V${version}=\"$<TARGET_FILE:${target}>\"")
  list(APPEND KVFUZZ_TEST_PLUGINS ${target})
endforeach()

# A plugin whose entries make every declaration of ABI 4
# (tests/doors/plugins/declaring_engines.cpp).
kvfuzz_add_plugin_library(kvfuzz_test_plugin_declaring plugins/declaring_engines.cpp)
list(APPEND KVFUZZ_TEST_PLUGIN_DEFINES
     "KVFUZZ_PLUGIN_DECLARING=\"$<TARGET_FILE:kvfuzz_test_plugin_declaring>\"")
list(APPEND KVFUZZ_TEST_PLUGINS kvfuzz_test_plugin_declaring)

# A C++ engine declaring every field away from its default, exported through the ABI
# (tests/doors/plugins/exported_declaring.cpp).
kvfuzz_add_plugin_library(kvfuzz_test_plugin_exported_declaring plugins/exported_declaring.cpp)
target_include_directories(kvfuzz_test_plugin_exported_declaring PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(kvfuzz_test_plugin_exported_declaring PRIVATE kvfuzz_doors kvfuzz_engines
                                                                     kvfuzz_scenario)
list(APPEND KVFUZZ_TEST_PLUGIN_DEFINES
     "KVFUZZ_PLUGIN_EXPORTED_DECLARING=\"$<TARGET_FILE:kvfuzz_test_plugin_exported_declaring>\"")
list(APPEND KVFUZZ_TEST_PLUGINS kvfuzz_test_plugin_exported_declaring)

# A plugin that changes its table after kvfuzz has read it (tests/doors/plugins/shifting_table.cpp).
kvfuzz_add_plugin_library(kvfuzz_test_plugin_shifting plugins/shifting_table.cpp)
list(APPEND KVFUZZ_TEST_PLUGIN_DEFINES
     "KVFUZZ_PLUGIN_SHIFTING=\"$<TARGET_FILE:kvfuzz_test_plugin_shifting>\"")
list(APPEND KVFUZZ_TEST_PLUGINS kvfuzz_test_plugin_shifting)

# Built as a user would build a shared library, without the plugin export map: it exports
# its one function, under the wrong name.
add_library(kvfuzz_test_plugin_no_symbol SHARED plugins/no_symbol.cpp)
target_include_directories(kvfuzz_test_plugin_no_symbol PRIVATE ${PROJECT_SOURCE_DIR}/harness/include)
list(APPEND KVFUZZ_TEST_PLUGIN_DEFINES
     "KVFUZZ_PLUGIN_NO_SYMBOL=\"$<TARGET_FILE:kvfuzz_test_plugin_no_symbol>\"")
list(APPEND KVFUZZ_TEST_PLUGINS kvfuzz_test_plugin_no_symbol)

kvfuzz_add_test(test_plugin kvfuzz_judge kvfuzz_generate kvfuzz_corpus kvfuzz_doors kvfuzz_engines
                ${CMAKE_DL_LIBS})
if(TARGET test_plugin)
  target_compile_definitions(test_plugin PRIVATE ${KVFUZZ_TEST_PLUGIN_DEFINES})
  kvfuzz_test_runs_cli(test_plugin)
  add_dependencies(test_plugin ${KVFUZZ_TEST_PLUGINS})
endif()
