// A plugin whose table is wrong in one way, chosen at build time: tests/doors/plugin_tests.cmake
// builds this file once per TABLE_DEFECT, each a library that kvfuzz must refuse at load
// with one line naming the defect. The engine behind the table never runs.
#include <cstdlib>

#include "kvfuzz/engine_abi.h"

namespace {

enum class Defect {
  abi_version_next,              // built for an ABI this kvfuzz does not know
  null_table,                    // kvfuzz_engine_plugin() returns NULL
  struct_size_too_small,         // an entry shorter than kvfuzz_engine_api
  no_engines,                    // engine_count 0
  missing_name,                  // name NULL
  invalid_name,                  // a space in the name
  duplicate_names,               // two entries named alike
  null_step,                     // a required function missing
  truncate_without_function,     // KVFUZZ_CAN_TRUNCATE announced, truncate NULL
  fork_without_function,         // KVFUZZ_CAN_FORK announced, fork NULL
  too_many_engines,              // engine_count past what any plugin needs
  null_engines,                  // engine_count 2, engines NULL
  entry_abi_version_1,           // an ABI 1 entry in an ABI 3 table
  abi_1_table_of_abi_3_entries,  // entries that say ABI 1 but have ABI 3's size
  abi_2_table_of_abi_3_entries,  // entries that say ABI 2 but have ABI 3's size
  name_not_text,                 // a name with a byte that is no UTF-8 and a newline
  description_not_utf8,          // a description in Latin-1
  description_with_newline,      // a description of two lines
  // ABI 2's declarations, each out of range in one way
  bitwise_unknown_flag,     // a bit no KVFUZZ_BITWISE_* has
  output_dtype_unknown,     // a dtype code past KVFUZZ_DTYPE_BF16
  p_dtype_zero,             // 0 (f32), what a zero-filled entry holds, instead of NONE
  p_dtype_unknown,          // a dtype code below NONE
  score_accumulation_bf16,  // accumulation in a dtype kvfuzz does not model
  value_accumulation_unknown,
  rotated_keys_two,    // neither 1, 0 nor -1
  dtypes_unknown_bit,  // a storage dtype past KVFUZZ_DTYPE_BF16
  head_dim_multiple_negative,
  max_head_dim_negative,
  max_q_heads_negative,
  max_context_negative,
  // ABI 3's
  supports_unknown_flag,  // a bit no KVFUZZ_SUPPORTS_* has
  reserved_not_zero,
};

constexpr Defect kDefect = Defect::TABLE_DEFECT;

const char kNeverRuns[] = "this test plugin's table is refused before any engine runs";

kvfuzz_engine* create(const kvfuzz_engine_config*, const char** error) {
  *error = kNeverRuns;
  return nullptr;
}
void destroy(kvfuzz_engine*) {}
int step(kvfuzz_engine*, const kvfuzz_chunk_in*, kvfuzz_chunk_out*, int32_t, const char** error) {
  *error = kNeverRuns;
  return 1;
}
int reset(kvfuzz_engine*, int32_t, const char** error) {
  *error = kNeverRuns;
  return 1;
}

kvfuzz_engine_api entry(const char* name) {
  kvfuzz_engine_api api = kvfuzz_engine_api_defaults();
  api.name = name;
  api.description = "A table with one deliberate defect.";
  api.create = create;
  api.destroy = destroy;
  api.step = step;
  api.reset = reset;
  return api;
}

struct Table {
  kvfuzz_engine_api engines[2];
  kvfuzz_engine_plugin_table table;

  Table() : engines{entry("first"), entry("second")}, table{KVFUZZ_ENGINE_ABI_VERSION, 2, engines} {
    switch (kDefect) {
      case Defect::abi_version_next:
        table.abi_version = KVFUZZ_ENGINE_ABI_VERSION + 1;
        break;
      case Defect::struct_size_too_small:
        engines[1].struct_size = 16;
        break;
      case Defect::no_engines:
        table.engine_count = 0;
        break;
      case Defect::missing_name:
        engines[1].name = nullptr;
        break;
      case Defect::invalid_name:
        engines[1].name = "two words";
        break;
      case Defect::duplicate_names:
        engines[1].name = "first";
        break;
      case Defect::null_step:
        engines[1].step = nullptr;
        break;
      case Defect::truncate_without_function:
        engines[1].capabilities = KVFUZZ_CAN_TRUNCATE;
        break;
      case Defect::fork_without_function:
        engines[1].capabilities = KVFUZZ_CAN_FORK;
        break;
      case Defect::too_many_engines:
        table.engine_count = 1025;  // kvfuzz must refuse it before reading any entry
        break;
      case Defect::null_engines:
        table.engines = nullptr;
        break;
      case Defect::entry_abi_version_1:
        engines[1].abi_version = 1;
        break;
      case Defect::abi_1_table_of_abi_3_entries:
        table.abi_version = 1;
        engines[0].abi_version = engines[1].abi_version = 1;
        break;
      case Defect::abi_2_table_of_abi_3_entries:
        table.abi_version = 2;
        engines[0].abi_version = engines[1].abi_version = 2;
        break;
      case Defect::name_not_text:
        engines[1].name = "caf\xe9\nlatte";
        break;
      case Defect::description_not_utf8:
        engines[1].description = "Serves caf\xe9 au lait.";
        break;
      case Defect::description_with_newline:
        engines[1].description = "Two lines.\nThe second.";
        break;
      case Defect::bitwise_unknown_flag:
        engines[1].bitwise = KVFUZZ_BITWISE_LAYOUT | 16u;
        break;
      case Defect::output_dtype_unknown:
        engines[1].output_dtype = 3;
        break;
      case Defect::p_dtype_zero:
        engines[1].p_dtype = 0;
        break;
      case Defect::p_dtype_unknown:
        engines[1].p_dtype = -2;
        break;
      case Defect::score_accumulation_bf16:
        engines[1].score_accumulation = KVFUZZ_DTYPE_BF16;
        break;
      case Defect::value_accumulation_unknown:
        engines[1].value_accumulation = 9;
        break;
      case Defect::rotated_keys_two:
        engines[1].rotated_keys_in_storage = 2;
        break;
      case Defect::dtypes_unknown_bit:
        engines[1].dtypes = (1u << KVFUZZ_DTYPE_F16) | (1u << 3);
        break;
      case Defect::head_dim_multiple_negative:
        engines[1].head_dim_multiple = -8;
        break;
      case Defect::max_head_dim_negative:
        engines[1].max_head_dim = -1;
        break;
      case Defect::max_q_heads_negative:
        engines[1].max_q_heads = -4;
        break;
      case Defect::max_context_negative:
        engines[1].max_context = -100;
        break;
      case Defect::supports_unknown_flag:
        engines[1].supports = KVFUZZ_SUPPORTS_NO_WINDOWS | 0x8000u;
        break;
      case Defect::reserved_not_zero:
        engines[1].reserved = 1;
        break;
      case Defect::null_table:
        break;
    }
  }
};

}  // namespace

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  static const Table table;
  return kDefect == Defect::null_table ? nullptr : &table.table;
}
