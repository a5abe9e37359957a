// Where each declaration field (kvfuzz/engine_fields.h) sits in the C ABI's entry
// (kvfuzz_engine_api, kvfuzz/engine_abi.h): one table, kAbiFields, with one row per field
// of the C++ declarations: the C++ member, its ABI slot and encoding, and the ABI version
// that added the slot. Both sides of the plugin door walk it: doors/plugin_export.cpp
// writes a C++ engine's declarations into its entry (write), doors/plugin_library.cpp reads
// and checks a plugin's entry (read), doors/plugin_adapter.cpp reads the capabilities.
//
// A field of engine_fields.h without a row here does not compile: the static_assert at the
// end names it ("In instantiation of 'struct AbiRowOf<FieldName<...>{"supports.windows"},
// 0>'"). A compile error rather than a failing test, because a kvfuzz whose plugin door
// silently drops a declaration must never be built; the round trip tests
// (tests/doors/test_plugin_abi_fields.cpp, test_plugin.cpp) check that each row's encoding
// carries its field and that each slot lies within its version's part of the struct.
//
// The layout is the C header's alone; nothing here changes it. Each encoding writes and
// reads its slot in one place below (put and take), and its refusal says the ABI's own
// name for the slot ("output_dtype"), the value and what is expected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvfuzz/dtype.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/engine_abi.h"
#include "kvfuzz/engine_fields.h"

namespace kvfuzz::doors::abi {

using Api = kvfuzz_engine_api;

// The size of kvfuzz_engine_api in ABI `version` (0: nothing), the stride of a table of
// that version.
constexpr size_t entry_size(uint32_t version) {
  switch (version) {
    case 0:
      return 0;
    case 1:
      return KVFUZZ_ENGINE_API_V1_SIZE;
    case 2:
      return KVFUZZ_ENGINE_API_V2_SIZE;
    case 3:
      return KVFUZZ_ENGINE_API_V3_SIZE;
    case 4:
      return KVFUZZ_ENGINE_API_V4_SIZE;
    case 5:
      return KVFUZZ_ENGINE_API_V5_SIZE;
    default:
      return sizeof(kvfuzz_engine_api);
  }
}

// A member of kvfuzz_engine_api and its name in C; KVFUZZ_ABI_SLOT(bitwise) spells both
// once.
template <class T>
struct Slot {
  std::string_view name;
  T Api::*member;
};
template <class T>
Slot(std::string_view, T Api::*) -> Slot<T>;
#define KVFUZZ_ABI_SLOT(member)         \
  ::kvfuzz::doors::abi::Slot {          \
#member, &kvfuzz_engine_api::member \
  }

// ---------------------------------------------------------------------------------------
// The encodings: how a C++ value sits in its slot.

// bool: one bit of a flags word; `set_means_false`: the bit says the field is false
// (KVFUZZ_SUPPORTS_NO_WINDOWS, so that 0 keeps meaning the C++ default).
struct Flag {
  Slot<uint32_t> word;
  uint32_t bit;
  bool set_means_false = false;
};
// DType: a KVFUZZ_DTYPE_* code, one of the field's dtypes (engine_fields.h).
struct DTypeCode {
  Slot<int32_t> slot;
};
// std::optional<DType>: a code of the field's dtypes, or KVFUZZ_DTYPE_NONE for nothing.
struct DTypeOrNone {
  Slot<int32_t> slot;
};
// std::optional<bool>: 1 yes, 0 no, -1 not declared.
struct TriState {
  Slot<int32_t> slot;
};
// int: 0 or more; 0 reads as `none`, the C++ value for no limit (1 for a multiple, one ulp
// for exp_ulps); `expected` is what a refusal says.
struct Limit {
  Slot<int32_t> slot;
  int none = 0;
  std::string_view expected = "0 (no limit) or more";
};
// bool: 1 or 0.
struct Boolean {
  Slot<uint32_t> slot;
};
// std::vector<DType>: bits 1u << KVFUZZ_DTYPE_* of the field's dtypes; 0 reads as every
// one (the C++ default), and is read back in dtype order.
struct DTypeMask {
  Slot<uint32_t> slot;
};
// A field that does not cross in kvfuzz_engine_api at all, and how it crosses instead.
struct Elsewhere {
  std::string_view how;
};

// One row: a C++ field, its encoding (with the ABI slot), and the ABI version of the slot.
template <class Struct, class T, class Encoding>
struct AbiRow {
  T Struct::*member;
  Encoding encoding;
  uint32_t since;
};
template <class Struct, class T, class Encoding>
AbiRow(T Struct::*, Encoding, uint32_t) -> AbiRow<Struct, T, Encoding>;

// ---------------------------------------------------------------------------------------
// The table: every field of kvfuzz/engine_fields.h, in its order. Every declaration slot
// of kvfuzz_engine_api appears here; its other members (the version, size, name,
// description, mutant flag and functions, reserved) are kNotDeclarations.

using Can = EngineCapabilities;
using Bit = BitwiseClaims;
using Num = EngineNumerics;
using Sup = EngineSupports;

inline constexpr std::tuple kAbiFields{
    // ABI 1
    AbiRow{&Can::truncate, Flag{KVFUZZ_ABI_SLOT(capabilities), KVFUZZ_CAN_TRUNCATE}, 1},
    AbiRow{&Can::fork, Flag{KVFUZZ_ABI_SLOT(capabilities), KVFUZZ_CAN_FORK}, 1},
    // ABI 2
    AbiRow{&Bit::batch, Flag{KVFUZZ_ABI_SLOT(bitwise), KVFUZZ_BITWISE_BATCH}, 2},
    AbiRow{&Bit::schedule, Flag{KVFUZZ_ABI_SLOT(bitwise), KVFUZZ_BITWISE_SCHEDULE}, 2},
    AbiRow{&Bit::layout, Flag{KVFUZZ_ABI_SLOT(bitwise), KVFUZZ_BITWISE_LAYOUT}, 2},
    AbiRow{&Bit::poison, Flag{KVFUZZ_ABI_SLOT(bitwise), KVFUZZ_BITWISE_POISON}, 2},
    AbiRow{&Num::output, DTypeCode{KVFUZZ_ABI_SLOT(output_dtype)}, 2},
    AbiRow{&Num::p, DTypeOrNone{KVFUZZ_ABI_SLOT(p_dtype)}, 2},
    AbiRow{&Num::score_accumulation, DTypeCode{KVFUZZ_ABI_SLOT(score_accumulation)}, 2},
    AbiRow{&Num::value_accumulation, DTypeCode{KVFUZZ_ABI_SLOT(value_accumulation)}, 2},
    AbiRow{&Num::rotated_keys_in_storage, TriState{KVFUZZ_ABI_SLOT(rotated_keys_in_storage)}, 2},
    AbiRow{&Num::rotated_queries_in_storage, TriState{KVFUZZ_ABI_SLOT(rotated_queries_in_storage)},
           2},
    AbiRow{&Num::rope_angles_exact, TriState{KVFUZZ_ABI_SLOT(rope_angles_exact)}, 2},
    AbiRow{&Sup::dtypes, DTypeMask{KVFUZZ_ABI_SLOT(dtypes)}, 2},
    AbiRow{&Sup::head_dim_multiple, Limit{KVFUZZ_ABI_SLOT(head_dim_multiple), 1}, 2},
    AbiRow{&Sup::max_head_dim, Limit{KVFUZZ_ABI_SLOT(max_head_dim)}, 2},
    AbiRow{&Sup::max_q_heads, Limit{KVFUZZ_ABI_SLOT(max_q_heads)}, 2},
    AbiRow{&Sup::max_context, Limit{KVFUZZ_ABI_SLOT(max_context)}, 2},
    AbiRow{&Sup::value_dim_is_head_dim, Boolean{KVFUZZ_ABI_SLOT(value_dim_is_head_dim)}, 2},
    // ABI 3
    AbiRow{&Sup::rope_required, Flag{KVFUZZ_ABI_SLOT(supports), KVFUZZ_SUPPORTS_ROPE_REQUIRED}, 3},
    AbiRow{&Sup::windows,
           Flag{KVFUZZ_ABI_SLOT(supports), KVFUZZ_SUPPORTS_NO_WINDOWS, /*set_means_false=*/true},
           3},
    // ABI 4
    AbiRow{&Num::split_combine_lse,
           Flag{KVFUZZ_ABI_SLOT(numerics), KVFUZZ_NUMERICS_SPLIT_COMBINE_LSE}, 4},
    AbiRow{&Num::split_partials, DTypeCode{KVFUZZ_ABI_SLOT(split_partials_dtype)}, 4},
    AbiRow{&Num::p_normalised, Flag{KVFUZZ_ABI_SLOT(numerics), KVFUZZ_NUMERICS_P_NORMALISED}, 4},
    AbiRow{&Num::rope_tables, DTypeCode{KVFUZZ_ABI_SLOT(rope_tables_dtype)}, 4},
    AbiRow{&Num::exp_ulps, Limit{KVFUZZ_ABI_SLOT(exp_ulps), 1, "0 (one ulp) or more"}, 4},
    AbiRow{&Num::query_blocks, Flag{KVFUZZ_ABI_SLOT(numerics), KVFUZZ_NUMERICS_QUERY_BLOCKS}, 9},
    // ABI 6
    AbiRow{&Sup::softcap, Flag{KVFUZZ_ABI_SLOT(supports), KVFUZZ_SUPPORTS_SOFTCAP}, 6},
    AbiRow{&Sup::sinks, Flag{KVFUZZ_ABI_SLOT(supports), KVFUZZ_SUPPORTS_SINKS}, 6},
    AbiRow{&Sup::alibi, Flag{KVFUZZ_ABI_SLOT(supports), KVFUZZ_SUPPORTS_ALIBI}, 6},
    AbiRow{&Sup::chunked_local, Flag{KVFUZZ_ABI_SLOT(supports), KVFUZZ_SUPPORTS_CHUNKED_LOCAL}, 6},
    // ABI 7
    AbiRow{&Sup::kv_fp8, Flag{KVFUZZ_ABI_SLOT(supports), KVFUZZ_SUPPORTS_KV_FP8}, 7},
    AbiRow{&Sup::kv_ggml_blocks, Flag{KVFUZZ_ABI_SLOT(supports), KVFUZZ_SUPPORTS_KV_GGML_BLOCKS},
           7},
    // ABI 8
    AbiRow{&Sup::value_from_key, Flag{KVFUZZ_ABI_SLOT(supports), KVFUZZ_SUPPORTS_VALUE_FROM_KEY},
           8},
    // ABI 9
    AbiRow{&Sup::kv_affine, Flag{KVFUZZ_ABI_SLOT(supports), KVFUZZ_SUPPORTS_KV_AFFINE}, 9},
    AbiRow{&Sup::kv_one_format, Flag{KVFUZZ_ABI_SLOT(supports), KVFUZZ_SUPPORTS_KV_ONE_FORMAT}, 9},
    AbiRow{&Sup::kv_tensor_scales,
           Flag{KVFUZZ_ABI_SLOT(supports), KVFUZZ_SUPPORTS_KV_TENSOR_SCALES}, 9},
    // ABI 10
    AbiRow{&Sup::rope_interleaved,
           Flag{KVFUZZ_ABI_SLOT(supports), KVFUZZ_SUPPORTS_ROPE_INTERLEAVED}, 10},
    // ABI 11
    AbiRow{&Sup::rope_dims, Flag{KVFUZZ_ABI_SLOT(supports), KVFUZZ_SUPPORTS_ROPE_DIMS}, 11},
    AbiRow{&Sup::kv_channel, Flag{KVFUZZ_ABI_SLOT(supports), KVFUZZ_SUPPORTS_KV_CHANNEL}, 11},
    // Not in the entry: only a whole-model engine computes activations, and it crosses by
    // the model door (kvfuzz/engine_plugin.h).
    AbiRow{&Num::activations,
           Elsewhere{"the model door (kvfuzz/engine_plugin.h): only whole-model engines have it"},
           0},
    // Not in the entry: a whole-model engine crosses by the model door
    // (kvfuzz/engine_plugin.h), as an EngineInfo with make_model and no make.
    AbiRow{&EngineDeclarations::whole_model,
           Elsewhere{"the model door (kvfuzz/engine_plugin.h): make_model without make"}, 0},
};

// The flags words whose unknown bits refuse an entry, and the flags' names in the refusal;
// the known bits are the table's. (capabilities is not one: ABI 1 ignored unknown bits,
// and kvfuzz still does.)
struct CheckedWord {
  Slot<uint32_t> word;
  std::string_view flags;
};
inline constexpr CheckedWord kCheckedWords[] = {{KVFUZZ_ABI_SLOT(bitwise), "KVFUZZ_BITWISE_*"},
                                                {KVFUZZ_ABI_SLOT(supports), "KVFUZZ_SUPPORTS_*"},
                                                {KVFUZZ_ABI_SLOT(numerics), "KVFUZZ_NUMERICS_*"}};

// The members of kvfuzz_engine_api that hold no declaration (the tests count them with
// the table's slots against the struct's members).
inline constexpr std::tuple kNotDeclarations{
    &Api::abi_version, &Api::struct_size, &Api::name, &Api::description, &Api::mutant, &Api::create,
    &Api::destroy, &Api::step, &Api::reset, &Api::truncate, &Api::fork, &Api::reserved,
    // ABI 5: not a declaration but the call that
    // gives an engine's numerics for its layout
    &Api::numerics_of};

#undef KVFUZZ_ABI_SLOT

// ---------------------------------------------------------------------------------------
// Each encoding's write (put) and read (take). take returns "" or what is wrong, as
// "<slot> <value>; expected <what>"; it reads only values it accepts.

constexpr int32_t dtype_code(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return KVFUZZ_DTYPE_F16;
    case DType::bf16:
      return KVFUZZ_DTYPE_BF16;
    case DType::f32:
      break;
  }
  return KVFUZZ_DTYPE_F32;
}

inline std::optional<DType> dtype_of(int32_t code) {
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    if (dtype_code(dtype) == code) return dtype;
  }
  return std::nullopt;
}

// "0x1f": a flags word or mask in a refusal.
inline std::string hex(uint32_t value) {
  constexpr char kDigits[] = "0123456789abcdef";
  std::string digits;
  do {
    digits.insert(digits.begin(), kDigits[value % 16]);
    value /= 16;
  } while (value != 0);
  return "0x" + digits;
}

namespace detail {

// "a", "a or b", "a, b or c".
inline std::string one_of(const std::vector<std::string>& items) {
  std::string text;
  for (size_t i = 0; i < items.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + items[i];
  }
  return text;
}

// "KVFUZZ_DTYPE_F32, _F16 or _BF16 (0, 1 or 2": the codes of `dtypes`, NONE first when
// `none`; the caller closes the parenthesis.
inline std::string dtype_codes(DTypeSet dtypes, bool none) {
  std::vector<std::string> names;
  std::vector<std::string> codes;
  if (none) {
    names.emplace_back("NONE");
    codes.push_back(std::to_string(KVFUZZ_DTYPE_NONE));
  }
  for (const DType dtype : dtypes.list()) {
    std::string name(dtype_name(dtype));
    for (char& c : name) {
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    }
    names.push_back(name);
    codes.push_back(std::to_string(dtype_code(dtype)));
  }
  names.front() = "KVFUZZ_DTYPE_" + names.front();
  for (size_t i = 1; i < names.size(); ++i) names[i] = "_" + names[i];
  return one_of(names) + " (" + one_of(codes);
}

inline uint32_t dtype_bits(DTypeSet dtypes) {
  uint32_t bits = 0;
  for (const DType dtype : dtypes.list()) bits |= 1u << dtype_code(dtype);
  return bits;
}

inline std::string refusal(std::string_view slot, const std::string& value,
                           const std::string& expected) {
  return std::string(slot) + " " + value + "; expected " + expected;
}

}  // namespace detail

inline void put(bool value, const Flag& e, DTypeSet, Api& api) {
  uint32_t& word = api.*e.word.member;
  word = value != e.set_means_false ? (word | e.bit) : (word & ~e.bit);
}
inline std::string take(const Api& api, const Flag& e, DTypeSet, bool& value) {
  // Unknown bits are the word's concern (kCheckedWords).
  value = ((api.*e.word.member & e.bit) != 0) != e.set_means_false;
  return "";
}

inline void put(DType value, const DTypeCode& e, DTypeSet, Api& api) {
  api.*e.slot.member = dtype_code(value);
}
inline std::string take(const Api& api, const DTypeCode& e, DTypeSet dtypes, DType& value) {
  const int32_t code = api.*e.slot.member;
  const std::optional<DType> dtype = dtype_of(code);
  if (!dtype || !dtypes.has(*dtype)) {
    return detail::refusal(e.slot.name, std::to_string(code),
                           detail::dtype_codes(dtypes, false) + ")");
  }
  value = *dtype;
  return "";
}

inline void put(const std::optional<DType>& value, const DTypeOrNone& e, DTypeSet, Api& api) {
  api.*e.slot.member = value ? dtype_code(*value) : KVFUZZ_DTYPE_NONE;
}
inline std::string take(const Api& api, const DTypeOrNone& e, DTypeSet dtypes,
                        std::optional<DType>& value) {
  const int32_t code = api.*e.slot.member;
  if (code == KVFUZZ_DTYPE_NONE) {
    value = std::nullopt;
    return "";
  }
  const std::optional<DType> dtype = dtype_of(code);
  if (!dtype || !dtypes.has(*dtype)) {
    // f32 is also what a zero-filled entry holds: it must say NONE (from
    // kvfuzz_engine_api_defaults()) to be read as nothing.
    return detail::refusal(
        e.slot.name, std::to_string(code),
        detail::dtype_codes(dtypes, true) + "; kvfuzz_engine_api_defaults() sets NONE)");
  }
  value = dtype;
  return "";
}

inline void put(const std::optional<bool>& value, const TriState& e, DTypeSet, Api& api) {
  api.*e.slot.member = value ? (*value ? 1 : 0) : -1;
}
inline std::string take(const Api& api, const TriState& e, DTypeSet, std::optional<bool>& value) {
  const int32_t code = api.*e.slot.member;
  if (code < -1 || code > 1) {
    return detail::refusal(e.slot.name, std::to_string(code),
                           "1 (yes), 0 (no) or -1 (not declared)");
  }
  value = code < 0 ? std::nullopt : std::optional(code == 1);
  return "";
}

inline void put(int value, const Limit& e, DTypeSet, Api& api) {
  api.*e.slot.member = value;
}
inline std::string take(const Api& api, const Limit& e, DTypeSet, int& value) {
  const int32_t limit = api.*e.slot.member;
  if (limit < 0) {
    return detail::refusal(e.slot.name, std::to_string(limit), std::string(e.expected));
  }
  value = limit == 0 ? e.none : limit;
  return "";
}

inline void put(bool value, const Boolean& e, DTypeSet, Api& api) {
  api.*e.slot.member = value ? 1 : 0;
}
inline std::string take(const Api& api, const Boolean& e, DTypeSet, bool& value) {
  const uint32_t code = api.*e.slot.member;
  if (code > 1) return detail::refusal(e.slot.name, std::to_string(code), "0 or 1");
  value = code == 1;
  return "";
}

inline void put(const std::vector<DType>& value, const DTypeMask& e, DTypeSet, Api& api) {
  uint32_t bits = 0;
  for (const DType dtype : value) bits |= 1u << dtype_code(dtype);
  api.*e.slot.member = bits;
}
inline std::string take(const Api& api, const DTypeMask& e, DTypeSet dtypes,
                        std::vector<DType>& value) {
  const uint32_t bits = api.*e.slot.member;
  const uint32_t known = detail::dtype_bits(dtypes);
  if ((bits & ~known) != 0) {
    return detail::refusal(
        e.slot.name, hex(bits),
        "bits 1u << KVFUZZ_DTYPE_* (of " + hex(known) + "), or 0 for every storage dtype");
  }
  value = dtypes.list();
  if (bits != 0) std::erase_if(value, [&](DType d) { return (bits & (1u << dtype_code(d))) == 0; });
  return "";
}

template <class T>
void put(const T&, const Elsewhere&, DTypeSet, Api&) {}
template <class T>
std::string take(const Api&, const Elsewhere&, DTypeSet, T&) {
  return "";
}

// ---------------------------------------------------------------------------------------
// Finding a field's row, and the check that every field has exactly one.

namespace detail {

inline constexpr size_t kRows = std::tuple_size_v<decltype(kAbiFields)>;
inline constexpr size_t kNoRow = kRows;

template <class Row, class Struct, class T>
constexpr bool same_member(const Row& row, T Struct::*member) {
  if constexpr (std::is_same_v<decltype(row.member), T Struct::*>) {
    return row.member == member;
  } else {
    return false;
  }
}

// How many rows map `member`, and the index of the last of them (kNoRow: none).
template <class Struct, class T>
constexpr std::pair<size_t, size_t> rows_of(T Struct::*member) {
  size_t count = 0;
  size_t index = kNoRow;
  [&]<size_t... I>(std::index_sequence<I...>) {
    ((same_member(std::get<I>(kAbiFields), member) ? (++count, index = I) : 0), ...);
  }
  (std::make_index_sequence<kRows>{});
  return {count, index};
}

// A field's name, "supports.windows", as a template argument: a compiler error shows it.
template <size_t N>
struct FieldName {
  char text[N]{};
  constexpr FieldName(std::string_view object, std::string_view field) {
    size_t at = 0;
    for (const char c : object) text[at++] = c;
    text[at++] = '.';
    for (const char c : field) text[at++] = c;
  }
};

template <FieldName Name, size_t Rows>
struct AbiRowOf {
  static_assert(Rows != 0,
                "this field of kvfuzz/engine_fields.h has no row in kAbiFields "
                "(doors/abi_fields.h): give it its slot in kvfuzz_engine_api, or Elsewhere");
  static_assert(Rows <= 1, "this field of kvfuzz/engine_fields.h has several rows in kAbiFields");
  static constexpr bool ok = Rows == 1;
};

template <Declared Struct, size_t I>
constexpr bool row_checked() {
  constexpr auto& field = std::get<I>(Declaration<Struct>::fields);
  using T = std::remove_cvref_t<decltype(std::declval<Struct&>().*field.member)>;
  if constexpr (Declared<T>) {
    return true;  // its own fields are checked
  } else {
    constexpr std::string_view object = Declaration<Struct>::name;
    constexpr FieldName<object.size() + field.name.size() + 2> name(object, field.name);
    return AbiRowOf<name, rows_of(field.member).first>::ok;
  }
}

template <Declared Struct>
constexpr bool every_field_has_one_row() {
  return []<size_t... I>(std::index_sequence<I...>) {
    return (row_checked<Struct, I>() && ...);
  }
  (std::make_index_sequence<kFieldCount<Struct>>{});
}

}  // namespace detail

static_assert(detail::every_field_has_one_row<EngineCapabilities>());
static_assert(detail::every_field_has_one_row<BitwiseClaims>());
static_assert(detail::every_field_has_one_row<EngineNumerics>());
static_assert(detail::every_field_has_one_row<EngineSupports>());
static_assert(detail::every_field_has_one_row<EngineDeclarations>());

// Calls visit(value, field, row) for each field of `object` (a declaration struct, or its
// const), nested declarations walked: value the member of `object`, field its
// DeclarationField (engine_fields.h), row its AbiRow.
template <Declared Struct, class Object, class Visit>
void for_each_row(Object& object, Visit&& visit) {
  [&]<size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          constexpr auto& field = std::get<I>(Declaration<Struct>::fields);
          auto& value = object.*field.member;
          using T = std::remove_cvref_t<decltype(value)>;
          if constexpr (Declared<T>) {
            for_each_row<T>(value, visit);
          } else if constexpr (detail::rows_of(field.member).first == 1) {
            visit(value, field, std::get<detail::rows_of(field.member).second>(kAbiFields));
          }  // else: the static_asserts above have said which field lacks its row
        }(),
        ...);
  }
  (std::make_index_sequence<kFieldCount<Struct>>{});
}

// Writes `declared` into its slots of `api`.
template <Declared Struct>
void write(const Struct& declared, Api& api) {
  for_each_row<Struct>(declared, [&](const auto& value, const auto& field, const auto& row) {
    put(value, row.encoding, field.dtypes, api);
  });
}

// Reads `declared` from an entry of ABI `version`: a field whose slot that version lacks
// keeps its C++ default (so an ABI 1 entry declares nothing and an ABI 2 entry none of
// ABI 3's flags), and a flags word's unknown bits are refused. The first value out of
// range ("output_dtype 3; expected ..."), or "" when every one is read.
template <Declared Struct>
std::string read(const Api& api, uint32_t version, Struct& declared) {
  for (const CheckedWord& checked : kCheckedWords) {
    uint32_t known = 0;
    for_each_row<Struct>(declared, [&](const auto&, const auto&, const auto& row) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(row.encoding)>, Flag>) {
        if (row.encoding.word.member == checked.word.member) known |= row.encoding.bit;
      }
    });
    const uint32_t bits = api.*checked.word.member;
    if (known != 0 && (bits & ~known) != 0) {
      return detail::refusal(checked.word.name, hex(bits),
                             std::string(checked.flags) + " flags (bits of " + hex(known) + ")");
    }
  }
  std::string problem;
  for_each_row<Struct>(declared, [&](auto& value, const auto& field, const auto& row) {
    if (problem.empty() && row.since != 0 && row.since <= version) {
      problem = take(api, row.encoding, field.dtypes, value);
    }
  });
  return problem;
}

}  // namespace kvfuzz::doors::abi
