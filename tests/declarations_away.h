// Declarations with every field away from its default, made from the field lists
// (kvfuzz/engine_fields.h): a field added to a declaration is away from its default here
// without an edit, so every trip a test sends these on (the probe's pipe, hello and its
// reader) must carry it to come back equal. And the names of the fields that two
// declarations disagree on, for a readable failure.
#pragma once

#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/engine_fields.h"

namespace kvfuzz::fieldwise {

// A value other than `fallback` that a door accepts for this field: another allowed dtype,
// a positive limit, the other boolean.
template <class T, class Field>
T away_from(const T& fallback, const Field& field) {
  const std::vector<DType> dtypes = field.dtypes.list();
  if constexpr (std::is_same_v<T, bool>) {
    return !fallback;
  } else if constexpr (std::is_same_v<T, std::optional<bool>>) {
    return !fallback.value_or(false);
  } else if constexpr (std::is_same_v<T, DType>) {
    return dtypes.back() != fallback ? dtypes.back() : dtypes.front();
  } else if constexpr (std::is_same_v<T, std::optional<DType>>) {
    return fallback ? std::nullopt : std::optional(dtypes.back());
  } else if constexpr (std::is_same_v<T, int>) {
    return 2 * fallback + 8;
  } else if constexpr (std::is_same_v<T, std::vector<DType>>) {
    // All but the first, in dtype order (the order the C ABI's mask gives back).
    return {dtypes.begin() + 1, dtypes.end()};
  } else {
    static_assert(Declared<T>, "a declaration field of a type tests/declarations_away.h lacks");
    T declared;
    for_each_field<T>([&](const auto& inner) {
      auto& member = declared.*inner.member;
      member = away_from(member, inner);
    });
    return declared;
  }
}

template <Declared Struct>
Struct away_from_defaults() {
  Struct declared;
  for_each_field<Struct>([&](const auto& field) {
    auto& member = declared.*field.member;
    member = away_from(member, field);
  });
  return declared;
}

// "supports.windows" for each field where `a` and `b` differ (whole objects compared field
// by field).
template <Declared Struct>
std::vector<std::string> differing_fields(const Struct& a, const Struct& b,
                                          const std::string& prefix = "") {
  std::vector<std::string> names;
  for_each_field<Struct>([&](const auto& field) {
    const auto& x = a.*field.member;
    const auto& y = b.*field.member;
    const std::string name = prefix + std::string(field.name);
    if constexpr (Declared<std::remove_cvref_t<decltype(x)>>) {
      for (std::string& inner : differing_fields(x, y, name + ".")) names.push_back(inner);
    } else if (!(x == y)) {
      names.push_back(name);
    }
  });
  return names;
}

// The fields of `declared` that hold their default.
template <Declared Struct>
std::vector<std::string> fields_at_default(const Struct& declared) {
  std::vector<std::string> names;
  const Struct fallback;
  for_each_field<Struct>([&](const auto& field) {
    const auto& value = declared.*field.member;
    if constexpr (Declared<std::remove_cvref_t<decltype(value)>>) {
      for (const std::string& inner : fields_at_default(value)) {
        names.push_back(std::string(field.name) + "." + inner);
      }
    } else if (value == fallback.*field.member) {
      names.push_back(std::string(field.name));
    }
  });
  return names;
}

}  // namespace kvfuzz::fieldwise
