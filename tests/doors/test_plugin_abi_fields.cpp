// The C ABI's field table (doors/abi_fields.h), on its own: each field of
// kvfuzz/engine_fields.h crosses kvfuzz_engine_api alone, in its own slot (or bit), and
// comes back as it went; each slot lies in the part of the struct its ABI version added;
// every member of the struct is a slot of the table or named as no declaration; an entry
// of an older version is read as what that version meant. (A field without a row does
// not compile: abi_fields.h's static_assert names it.) The plugins that cross the door for
// real are test_plugin.cpp's.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "declarations_away.h"
#include "doors/abi_fields.h"

namespace kvfuzz::doors {
namespace {

// Where a row's slot lies in kvfuzz_engine_api, in bytes; size 0 for Elsewhere.
struct Span {
  size_t offset = 0;
  size_t size = 0;
};

template <class T>
Span span_of(T abi::Api::*member) {
  const abi::Api api{};
  return {static_cast<size_t>(reinterpret_cast<const char*>(&(api.*member)) -
                              reinterpret_cast<const char*>(&api)),
          sizeof(T)};
}

template <class Encoding>
Span span_of_encoding(const Encoding& encoding) {
  if constexpr (std::is_same_v<Encoding, abi::Elsewhere>) {
    return {};
  } else if constexpr (std::is_same_v<Encoding, abi::Flag>) {
    return span_of(encoding.word.member);
  } else {
    return span_of(encoding.slot.member);
  }
}

abi::Api written(const EngineDeclarations& declared) {
  abi::Api api = kvfuzz_engine_api_defaults();
  abi::write(declared, api);
  return api;
}

EngineDeclarations read_back(const abi::Api& api, uint32_t version) {
  EngineDeclarations declared;
  EXPECT_EQ(abi::read(api, version, declared), "");
  return declared;
}

// "supports.windows" for a field's own name ("windows").
std::string qualified(std::string_view name) {
  for (const std::string& full : fieldwise::fields_at_default(EngineDeclarations{})) {
    if (full == name || full.ends_with("." + std::string(name))) return full;
  }
  return "(no field " + std::string(name) + ")";
}

// One field at a time away from its default: only its slot changes (a flag: only its bit),
// and reading the entry back gives exactly that field away. A row that shares a slot or a
// bit with another, or an encoding that loses the value, names the field here.
TEST(AbiFields, EachFieldCrossesAloneInItsOwnSlot) {
  const abi::Api base = written(EngineDeclarations{});
  EngineDeclarations one;
  size_t rows = 0;
  abi::for_each_row<EngineDeclarations>(one, [&](auto& value, const auto& field, const auto& row) {
    const std::string name = qualified(field.name);
    SCOPED_TRACE(name);
    ++rows;
    const auto fallback = value;
    value = fieldwise::away_from(fallback, field);
    const abi::Api api = written(one);
    const Span slot = span_of_encoding(row.encoding);
    const auto* a = reinterpret_cast<const unsigned char*>(&base);
    const auto* b = reinterpret_cast<const unsigned char*>(&api);
    for (size_t i = 0; i < sizeof(abi::Api); ++i) {
      const bool inside = i >= slot.offset && i < slot.offset + slot.size;
      if (!inside) {
        EXPECT_EQ(a[i], b[i]) << name << " changed byte " << i << ", outside its slot";
      }
    }
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(row.encoding)>, abi::Flag>) {
      EXPECT_EQ(base.*row.encoding.word.member ^ api.*row.encoding.word.member, row.encoding.bit)
          << name << " changed other bits of " << row.encoding.word.name;
    }
    const std::vector<std::string> away = fieldwise::differing_fields(
        read_back(api, KVFUZZ_ENGINE_ABI_VERSION), EngineDeclarations{});
    if (row.since == 0) {  // Elsewhere: nothing crosses here
      EXPECT_EQ(slot.size, 0u);
      EXPECT_EQ(away, std::vector<std::string>{});
    } else {
      EXPECT_NE(slot.size, 0u);
      EXPECT_EQ(away, std::vector<std::string>{name});
      EXPECT_EQ(fieldwise::differing_fields(read_back(api, KVFUZZ_ENGINE_ABI_VERSION), one),
                std::vector<std::string>{});
    }
    value = fallback;
  });
  // Every field of engine_fields.h was visited: the four objects' fields, and whole_model.
  EXPECT_EQ(rows, kFieldCount<EngineCapabilities> + kFieldCount<BitwiseClaims> +
                      kFieldCount<EngineNumerics> + kFieldCount<EngineSupports> +
                      kFieldCount<EngineDeclarations> - 4);
}

// The slot of a row of ABI v lies between the ends of ABI v-1's struct and ABI v's, so an
// entry of an older version never holds a slot it did not have. A new flag may take a bit
// of a flags word an older version added (ABI 6's features in `supports`): its word lies
// within its version's struct.
TEST(AbiFields, EverySlotLiesInThePartOfTheEntryItsVersionAdded) {
  EngineDeclarations declared;
  abi::for_each_row<EngineDeclarations>(
      declared, [&](const auto&, const auto& field, const auto& row) {
        if (row.since == 0) return;
        const Span slot = span_of_encoding(row.encoding);
        const bool flag = std::is_same_v<std::remove_cvref_t<decltype(row.encoding)>, abi::Flag>;
        if (!flag || abi::entry_size(row.since - 1) < abi::entry_size(row.since)) {
          EXPECT_GE(slot.offset, abi::entry_size(row.since - 1)) << field.name;
        }
        EXPECT_LE(slot.offset + slot.size, abi::entry_size(row.since)) << field.name;
      });
}

// Every member of kvfuzz_engine_api is a slot of the table or one of kNotDeclarations: a
// member added to the struct without a row (or a note) fails here.
TEST(AbiFields, EveryMemberOfTheEntryIsASlotOrNoDeclaration) {
  std::set<size_t> offsets;
  EngineDeclarations declared;
  abi::for_each_row<EngineDeclarations>(declared, [&](const auto&, const auto&, const auto& row) {
    const Span slot = span_of_encoding(row.encoding);
    if (slot.size != 0) offsets.insert(slot.offset);
  });
  std::apply([&](auto... member) { (offsets.insert(span_of(member).offset), ...); },
             abi::kNotDeclarations);
  EXPECT_EQ(offsets.size(), fields_detail::member_count<kvfuzz_engine_api>());
}

// Every field away from its default, read as each version: a version's entry declares only
// the fields whose slots it has; the others keep what that version meant, the default.
TEST(AbiFields, AnOlderVersionReadsOnlyItsOwnSlots) {
  const EngineDeclarations away = fieldwise::away_from_defaults<EngineDeclarations>();
  const abi::Api api = written(away);
  for (uint32_t version = 1; version <= KVFUZZ_ENGINE_ABI_VERSION; ++version) {
    SCOPED_TRACE("ABI " + std::to_string(version));
    std::vector<std::string> unread;
    EngineDeclarations walked;
    abi::for_each_row<EngineDeclarations>(walked,
                                          [&](const auto&, const auto& field, const auto& row) {
                                            if (row.since == 0 || row.since > version)
                                              unread.push_back(qualified(field.name));
                                          });
    EXPECT_EQ(fieldwise::differing_fields(read_back(api, version), away), unread);
  }
}

// kvfuzz_engine_api_defaults() means the C++ defaults in every version, and the C++
// defaults come back as themselves.
TEST(AbiFields, TheDefaultsMeanTheCppDefaults) {
  for (uint32_t version = 1; version <= KVFUZZ_ENGINE_ABI_VERSION; ++version) {
    EXPECT_EQ(fieldwise::differing_fields(read_back(kvfuzz_engine_api_defaults(), version),
                                          EngineDeclarations{}),
              std::vector<std::string>{})
        << "ABI " << version;
  }
  EXPECT_EQ(fieldwise::differing_fields(
                read_back(written(EngineDeclarations{}), KVFUZZ_ENGINE_ABI_VERSION),
                EngineDeclarations{}),
            std::vector<std::string>{});
}

// The refusals name the slot as C does and say what the table allows (test_plugin.cpp
// refuses each through a plugin).
TEST(AbiFields, ARefusalNamesTheSlotAndWhatTheFieldsDtypesAllow) {
  abi::Api api = kvfuzz_engine_api_defaults();
  api.p_dtype = KVFUZZ_DTYPE_F32;
  EngineDeclarations declared;
  EXPECT_EQ(abi::read(api, 3, declared),
            "p_dtype 0; expected KVFUZZ_DTYPE_NONE, _F16 or _BF16 (-1, 1 or 2; "
            "kvfuzz_engine_api_defaults() sets NONE)");
  api = kvfuzz_engine_api_defaults();
  api.value_accumulation = KVFUZZ_DTYPE_BF16;
  EXPECT_EQ(abi::read(api, 3, declared),
            "value_accumulation 2; expected KVFUZZ_DTYPE_F32 or _F16 (0 or 1)");
  api = kvfuzz_engine_api_defaults();
  api.output_dtype = 3;
  EXPECT_EQ(abi::read(api, 3, declared),
            "output_dtype 3; expected KVFUZZ_DTYPE_F32, _F16 or _BF16 (0, 1 or 2)");
  api = kvfuzz_engine_api_defaults();
  api.supports = 0x8000;
  EXPECT_EQ(abi::read(api, 3, declared),
            "supports 0x8000; expected KVFUZZ_SUPPORTS_* flags (bits of 0x7fff)");
  // capabilities never refused unknown bits (ABI 1), and still does not.
  api = kvfuzz_engine_api_defaults();
  api.capabilities = 0x80 | KVFUZZ_CAN_FORK;
  EXPECT_EQ(abi::read(api, 3, declared), "");
  EXPECT_TRUE(declared.capabilities.fork);
  EXPECT_FALSE(declared.capabilities.truncate);
}

}  // namespace
}  // namespace kvfuzz::doors
