// Every field of an engine's declarations (kvfuzz/engine.h: EngineCapabilities,
// BitwiseClaims, EngineNumerics, EngineSupports, and EngineDeclarations, which holds them),
// listed once: its name and its member. What reads, writes or shows declarations walks these
// lists instead of naming each field: the exec protocol's hello reader
// (doors/exec_protocol.cpp) and writer (run/declarations_json.h), the probe's pipe
// (check/probe.cpp), the Python module's dicts, `kvfuzz list --engine` and common_supports
// (kvfuzz/orchestrate.h). So a field added to a struct is added to its list below (the
// static_asserts at the end count the members) and travels through every door; the C ABI
// (kvfuzz/engine_abi.h), whose layout changes only with its version, maps each field to its
// slot in one table (doors/abi_fields.h), and a field without a row there fails to compile.
// What a field means to the generator or the judge is written where that meaning lives.
//
//   for_each_field<EngineSupports>([&](const auto& field) {
//     use(field.name, supports.*field.member);
//   });
#pragma once

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include "kvfuzz/dtype.h"
#include "kvfuzz/engine.h"

namespace kvfuzz {

// The dtypes a DType field may hold: a door refuses any other.
class DTypeSet {
 public:
  constexpr DTypeSet(std::initializer_list<DType> dtypes) {
    for (const DType dtype : dtypes) bits_ |= 1u << static_cast<unsigned>(dtype);
  }
  constexpr bool has(DType dtype) const { return (bits_ >> static_cast<unsigned>(dtype)) & 1u; }
  // In dtype order: f32, f16, bf16.
  std::vector<DType> list() const {
    std::vector<DType> out;
    for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      if (has(dtype)) out.push_back(dtype);
    }
    return out;
  }

 private:
  unsigned bits_ = 0;
};

// One field: its name (in hello's objects, the probe's pipe and the Python dicts) and its
// member. `dtypes` matters only to fields of DType, std::optional<DType> (nullopt is
// "none") and std::vector<DType>.
template <class Struct, class T>
struct DeclarationField {
  std::string_view name;
  T Struct::*member;
  DTypeSet dtypes = {DType::f32, DType::f16, DType::bf16};
};
template <class Struct, class T>
DeclarationField(std::string_view, T Struct::*) -> DeclarationField<Struct, T>;
template <class Struct, class T>
DeclarationField(std::string_view, T Struct::*, DTypeSet) -> DeclarationField<Struct, T>;

// Declaration<S>::name is the object's name in hello and in the Python dict;
// Declaration<S>::fields its fields, in the order doors write them and messages list them.
template <class Struct>
struct Declaration;

template <>
struct Declaration<EngineCapabilities> {
  using S = EngineCapabilities;
  static constexpr std::string_view name = "capabilities";
  static constexpr std::tuple fields{DeclarationField{"truncate", &S::truncate},
                                     DeclarationField{"fork", &S::fork}};
};

template <>
struct Declaration<BitwiseClaims> {
  using S = BitwiseClaims;
  static constexpr std::string_view name = "bitwise";
  static constexpr std::tuple fields{
      DeclarationField{"batch", &S::batch}, DeclarationField{"schedule", &S::schedule},
      DeclarationField{"layout", &S::layout}, DeclarationField{"poison", &S::poison}};
};

template <>
struct Declaration<EngineNumerics> {
  using S = EngineNumerics;
  static constexpr std::string_view name = "numerics";
  static constexpr std::tuple fields{
      DeclarationField{"output", &S::output},
      DeclarationField{"p", &S::p, {DType::f16, DType::bf16}},
      DeclarationField{"score_accumulation", &S::score_accumulation, {DType::f32, DType::f16}},
      DeclarationField{"value_accumulation", &S::value_accumulation, {DType::f32, DType::f16}},
      DeclarationField{"rotated_keys_in_storage", &S::rotated_keys_in_storage},
      DeclarationField{"rotated_queries_in_storage", &S::rotated_queries_in_storage},
      DeclarationField{"rope_angles_exact", &S::rope_angles_exact},
      DeclarationField{"split_combine_lse", &S::split_combine_lse},
      DeclarationField{"split_partials", &S::split_partials},
      DeclarationField{"p_normalised", &S::p_normalised},
      DeclarationField{"rope_tables", &S::rope_tables},
      DeclarationField{"exp_ulps", &S::exp_ulps},
      DeclarationField{"query_blocks", &S::query_blocks},
      DeclarationField{"activations", &S::activations}};
};

template <>
struct Declaration<EngineSupports> {
  using S = EngineSupports;
  static constexpr std::string_view name = "supports";
  static constexpr std::tuple fields{
      DeclarationField{"dtypes", &S::dtypes},
      DeclarationField{"head_dim_multiple", &S::head_dim_multiple},
      DeclarationField{"max_head_dim", &S::max_head_dim},
      DeclarationField{"max_q_heads", &S::max_q_heads},
      DeclarationField{"max_context", &S::max_context},
      DeclarationField{"value_dim_is_head_dim", &S::value_dim_is_head_dim},
      DeclarationField{"rope_required", &S::rope_required},
      DeclarationField{"windows", &S::windows},
      DeclarationField{"softcap", &S::softcap},
      DeclarationField{"sinks", &S::sinks},
      DeclarationField{"alibi", &S::alibi},
      DeclarationField{"chunked_local", &S::chunked_local},
      DeclarationField{"kv_fp8", &S::kv_fp8},
      DeclarationField{"kv_ggml_blocks", &S::kv_ggml_blocks},
      DeclarationField{"kv_affine", &S::kv_affine},
      DeclarationField{"kv_channel", &S::kv_channel},
      DeclarationField{"kv_one_format", &S::kv_one_format},
      DeclarationField{"kv_tensor_scales", &S::kv_tensor_scales},
      DeclarationField{"value_from_key", &S::value_from_key},
      DeclarationField{"rope_interleaved", &S::rope_interleaved},
      DeclarationField{"rope_dims", &S::rope_dims}};
};

// The whole: the four objects (in hello's order) and whole_model, which only the probe and
// the Python dict carry (an exec engine never runs whole models).
template <>
struct Declaration<EngineDeclarations> {
  using S = EngineDeclarations;
  static constexpr std::string_view name = "declarations";
  static constexpr std::tuple fields{
      DeclarationField{"capabilities", &S::capabilities}, DeclarationField{"bitwise", &S::bitwise},
      DeclarationField{"numerics", &S::numerics}, DeclarationField{"supports", &S::supports},
      DeclarationField{"whole_model", &S::whole_model}};
};

// A struct that has a field list.
template <class T>
concept Declared = requires {
  Declaration<T>::fields;
};

// Calls visit(field) for each field of Struct, in order.
template <Declared Struct, class Visit>
constexpr void for_each_field(Visit&& visit) {
  std::apply([&](const auto&... field) { (visit(field), ...); }, Declaration<Struct>::fields);
}

// How many fields Struct's list has.
template <Declared Struct>
inline constexpr std::size_t kFieldCount = std::tuple_size_v<decltype(Declaration<Struct>::fields)>;

namespace fields_detail {

// Converts to anything: an aggregate takes as many of these as it has members.
struct AnyMember {
  template <class T>
  operator T() const;  // NOLINT(google-explicit-constructor): never called, only counted
};

template <class T, class... Taken>
constexpr std::size_t member_count() {
  if constexpr (requires { T{Taken{}..., AnyMember{}}; }) {
    return member_count<T, Taken..., AnyMember>();
  } else {
    return sizeof...(Taken);
  }
}

}  // namespace fields_detail

// A member without a field in its list (or a field listed twice) fails to compile here.
static_assert(kFieldCount<EngineCapabilities> == fields_detail::member_count<EngineCapabilities>());
static_assert(kFieldCount<BitwiseClaims> == fields_detail::member_count<BitwiseClaims>());
static_assert(kFieldCount<EngineNumerics> == fields_detail::member_count<EngineNumerics>());
static_assert(kFieldCount<EngineSupports> == fields_detail::member_count<EngineSupports>());
static_assert(kFieldCount<EngineDeclarations> == fields_detail::member_count<EngineDeclarations>());

}  // namespace kvfuzz
