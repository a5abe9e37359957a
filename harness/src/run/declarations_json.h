// An engine's declarations as JSON, written and read field by field from their lists
// (kvfuzz/engine_fields.h), in the shape of the exec protocol's hello reply
// (docs/engine-protocol.md): {"capabilities": {"truncate": true, ...}, "bitwise": {...},
// "numerics": {"output": "bf16", "p": "none", ...}, "supports": {"dtypes": ["f16"], ...}}.
// Header-only: its users (check/probe.cpp, the Python module, the tests) bring nlohmann.
//
// The exec door's own reader of hello, strict and with one-line errors, is
// doors/exec_protocol.cpp; declarations_from_json() below is the lenient inverse of
// JsonForm::every_field, for a document kvfuzz wrote itself (the probe's pipe).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kvfuzz/dtype.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/engine_fields.h"

namespace kvfuzz {

enum class JsonForm {
  // Every field, "whole_model" too: a dtype by name, P not rounded as "none", a limit as
  // its integer (0: none), an optional boolean not declared as null. What the probe's pipe
  // carries and the Python module's declarations() returns.
  every_field,
  // hello's objects as an engine answers them: what only absence can say (an optional
  // boolean not declared, a limit of 0) left out, and no "whole_model". Hello's reader
  // reads it back to the same declarations.
  hello,
};

namespace declarations_json_detail {

inline std::string dtype_text(DType dtype) {
  return std::string(dtype_name(dtype));
}

inline DType dtype_of(const nlohmann::json& value) {
  const std::optional<DType> dtype = parse_dtype(value.get<std::string>());
  if (!dtype) throw std::invalid_argument("unknown dtype " + value.dump());
  return *dtype;
}

template <class T>
bool left_out(const T& value, JsonForm form) {
  if (form != JsonForm::hello) return false;
  if constexpr (std::is_same_v<T, int>) return value == 0;
  if constexpr (std::is_same_v<T, std::optional<bool>>) return !value.has_value();
  return false;
}

using Ordered = nlohmann::ordered_json;

template <Declared Struct>
Ordered write(const Struct& declared, JsonForm form);

template <class T>
Ordered value_json(const T& value, JsonForm form) {
  if constexpr (Declared<T>) {
    return write(value, form);
  } else if constexpr (std::is_same_v<T, DType>) {
    return dtype_text(value);
  } else if constexpr (std::is_same_v<T, std::optional<DType>>) {
    return value ? dtype_text(*value) : std::string("none");
  } else if constexpr (std::is_same_v<T, std::optional<bool>>) {
    return value ? Ordered(*value) : Ordered(nullptr);
  } else if constexpr (std::is_same_v<T, std::vector<DType>>) {
    Ordered list = Ordered::array();
    for (const DType dtype : value) list.push_back(dtype_text(dtype));
    return list;
  } else {
    static_assert(std::is_same_v<T, bool> || std::is_same_v<T, int>,
                  "a declaration field of a type run/declarations_json.h does not write");
    return value;
  }
}

template <Declared Struct>
Ordered write(const Struct& declared, JsonForm form) {
  Ordered object = Ordered::object();
  for_each_field<Struct>([&](const auto& field) {
    const auto& value = declared.*field.member;
    if (form == JsonForm::hello && field.name == "whole_model") return;
    if (!left_out(value, form)) object[std::string(field.name)] = value_json(value, form);
  });
  return object;
}

template <Declared Struct>
Struct read(const nlohmann::json& object);

template <class T>
T value_of(const nlohmann::json& value) {
  if constexpr (Declared<T>) {
    return read<T>(value);
  } else if constexpr (std::is_same_v<T, DType>) {
    return dtype_of(value);
  } else if constexpr (std::is_same_v<T, std::optional<DType>>) {
    return value.get<std::string>() == "none" ? std::nullopt : std::optional(dtype_of(value));
  } else if constexpr (std::is_same_v<T, std::optional<bool>>) {
    return value.is_null() ? std::nullopt : std::optional(value.get<bool>());
  } else if constexpr (std::is_same_v<T, std::vector<DType>>) {
    std::vector<DType> list;
    for (const nlohmann::json& dtype : value) list.push_back(dtype_of(dtype));
    return list;
  } else {
    return value.get<T>();
  }
}

template <Declared Struct>
Struct read(const nlohmann::json& object) {
  Struct declared;
  for_each_field<Struct>([&](const auto& field) {
    auto& member = declared.*field.member;
    member = value_of<std::remove_cvref_t<decltype(member)>>(object.at(std::string(field.name)));
  });
  return declared;
}

}  // namespace declarations_json_detail

// In the fields' order (kvfuzz/engine_fields.h).
inline nlohmann::ordered_json declarations_json(const EngineDeclarations& declared,
                                                JsonForm form = JsonForm::every_field) {
  return declarations_json_detail::write(declared, form);
}

// The inverse of declarations_json(JsonForm::every_field), parsed: every field must be there.
// Throws nlohmann::json::exception for a field missing or of the wrong type,
// std::invalid_argument for a dtype kvfuzz does not know.
inline EngineDeclarations declarations_from_json(const nlohmann::json& object) {
  return declarations_json_detail::read<EngineDeclarations>(object);
}

}  // namespace kvfuzz
