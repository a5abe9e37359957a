// Declarations written and read field by field from their lists (kvfuzz/engine_fields.h).
// Each trip is taken with every field away from its default (tests/declarations_away.h),
// so a field added to a declaration is checked here without an edit: hello's writer
// (run/declarations_json.h) and the exec door's strict reader (doors/exec_protocol.cpp) give
// back what was written, new_case's reply may change no field, and the JSON that the probe's
// pipe carries and the Python module hands out reads back to the same declarations. And
// common_supports merges every boolean support by one rule.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "declarations_away.h"
#include "doors/exec_protocol.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/engine_fields.h"
#include "kvfuzz/orchestrate.h"
#include "run/declarations_json.h"

namespace {

using namespace kvfuzz;
using fieldwise::away_from_defaults;
using fieldwise::differing_fields;
using Json = nlohmann::json;

// A reply to hello (or new_case) of `protocol` declaring `declared` as an engine writes it.
std::string reply_line(const EngineDeclarations& declared, int protocol) {
  Json reply = declarations_json(declared, JsonForm::hello);
  reply["ok"] = true;
  reply["protocol"] = protocol;
  reply["name"] = "written";
  return reply.dump();
}

EngineDeclarations declarations_of(const doors::HelloReply& hello) {
  EngineDeclarations read;
  read.capabilities = hello.capabilities;
  read.bitwise = hello.bitwise;
  read.numerics = hello.numerics;
  read.supports = hello.supports;
  return read;
}

// Every field away from its default but whole_model, which hello does not carry (an exec
// engine runs attention), and the defaults themselves, which hello mostly leaves out.
std::vector<EngineDeclarations> declarations_to_send() {
  EngineDeclarations away = away_from_defaults<EngineDeclarations>();
  away.whole_model = false;
  EngineDeclarations some;
  some.numerics.p = DType::f16;
  some.numerics.rotated_keys_in_storage = false;
  some.supports.max_context = 100;
  return {away, EngineDeclarations{}, some};
}

TEST(ExecDeclarations, WrittenAsHelloTheyComeBackEqual) {
  for (const EngineDeclarations& declared : declarations_to_send()) {
    const std::string line = reply_line(declared, doors::kOldestProtocol);
    SCOPED_TRACE(line);
    const doors::HelloReply hello = doors::read_hello_reply(line, doors::kOldestProtocol);
    EXPECT_EQ(differing_fields(declarations_of(hello), declared), std::vector<std::string>{});
  }
}

TEST(ExecDeclarations, HelloWritesWhatOnlyAbsenceCanSayByLeavingItOut) {
  const Json defaults = declarations_json(EngineDeclarations{}, JsonForm::hello);
  EXPECT_FALSE(defaults.contains("whole_model"));
  EXPECT_FALSE(defaults.at("numerics").contains("rotated_keys_in_storage"));
  EXPECT_FALSE(defaults.at("supports").contains("max_context"));
  EXPECT_EQ(defaults.at("numerics").at("p"), "none");
  EXPECT_EQ(defaults.at("supports").at("dtypes"), Json::parse(R"(["f32", "f16", "bf16"])"));
}

// new_case must declare what hello did: changing any one field is refused, naming it.
// Every field but the numerics, which may follow the case's layout (an engine computing in
// the layout's dtype): a new_case that changes one of those is taken, and its numerics are
// the case's.
TEST(ExecDeclarations, ANewCaseThatChangesAnyFieldButNumericsIsRefusedNamingIt) {
  const doors::HelloReply hello =
      doors::read_hello_reply(reply_line(EngineDeclarations{}, 2), doors::kNewestProtocol);
  EXPECT_NO_THROW(doors::read_new_case_reply(reply_line(EngineDeclarations{}, 2), hello));
  int fields = 0;
  for_each_field<EngineDeclarations>([&](const auto& part) {
    using Part = std::remove_cvref_t<decltype(EngineDeclarations{}.*part.member)>;
    if constexpr (Declared<Part>) {
      for_each_field<Part>([&](const auto& field) {
        EngineDeclarations changed;
        auto& member = changed.*part.member.*field.member;
        member = fieldwise::away_from(member, field);
        const std::string path =
            "$." + std::string(Declaration<Part>::name) + "." + std::string(field.name);
        ++fields;
        if constexpr (std::is_same_v<Part, EngineNumerics>) {
          const doors::HelloReply again = doors::read_new_case_reply(reply_line(changed, 2), hello);
          EXPECT_EQ(again.numerics, changed.numerics) << path;
          return;
        }
        try {
          doors::read_new_case_reply(reply_line(changed, 2), hello);
          ADD_FAILURE() << path << " changed, and new_case's reply was taken";
        } catch (const EngineError& e) {
          EXPECT_NE(std::string(e.what()).find("declares " + path +
                                               " otherwise than its answer "
                                               "to hello"),
                    std::string::npos)
              << e.what();
        }
      });
    }
  });
  EXPECT_GE(fields, 21);
}

// numerics and supports refuse a field they do not know, naming every one they do.
TEST(ExecDeclarations, AnUnknownFieldIsRefusedNamingTheListedOnes) {
  std::string known;
  for_each_field<EngineSupports>(
      [&](const auto& field) { known += (known.empty() ? "" : ", ") + std::string(field.name); });
  try {
    doors::read_hello_reply(
        R"({"ok": true, "protocol": 1, "name": "x", "supports": {"window": false}})",
        doors::kOldestProtocol);
    FAIL() << "an unknown field was taken";
  } catch (const EngineError& e) {
    EXPECT_NE(
        std::string(e.what()).find("$.supports.window: unknown field; expected one of " + known),
        std::string::npos)
        << e.what();
  }
}

// The probe's pipe and the Python dicts: every field, even those only absence says in hello.
TEST(DeclarationsJson, EveryFieldComesBackEqual) {
  EngineDeclarations away = away_from_defaults<EngineDeclarations>();
  for (const EngineDeclarations& declared : {away, EngineDeclarations{}}) {
    const Json written = declarations_json(declared);
    SCOPED_TRACE(written.dump());
    EXPECT_EQ(differing_fields(declarations_from_json(Json::parse(written.dump())), declared),
              std::vector<std::string>{});
  }
  const Json defaults = declarations_json(EngineDeclarations{});
  EXPECT_TRUE(defaults.at("numerics").at("rotated_keys_in_storage").is_null());
  EXPECT_EQ(defaults.at("supports").at("max_context"), 0);
  EXPECT_EQ(defaults.at("whole_model"), false);
}

TEST(DeclarationsJson, AMissingFieldOrAnUnknownDtypeDoesNotDecode) {
  Json written = declarations_json(EngineDeclarations{});
  written.at("supports").erase("windows");
  EXPECT_THROW(declarations_from_json(written), Json::exception);
  written = declarations_json(EngineDeclarations{});
  written["numerics"]["output"] = "fp8";
  EXPECT_THROW(declarations_from_json(written), std::invalid_argument);
}

// Several engines' common supports: a boolean support narrows the layouts away from its
// default (every layout), and the common one narrows when any engine's does.
TEST(CommonSupports, EveryBooleanNarrowsWhenAnyEngineNarrowsIt) {
  int booleans = 0;
  for_each_field<EngineSupports>([&](const auto& field) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(EngineSupports{}.*field.member)>,
                                 bool>) {
      ++booleans;
      const bool every = EngineSupports{}.*field.member;
      NamedDeclarations narrow{"narrow", {}};
      narrow.declared.supports.*field.member = !every;
      const NamedDeclarations wide{"wide", {}};
      for (const auto& engines : {std::vector{wide, narrow}, std::vector{narrow, wide}}) {
        EXPECT_EQ(common_supports(engines).*field.member, !every) << field.name;
      }
      EXPECT_EQ(common_supports(std::vector{wide, wide}).*field.member, every) << field.name;
    }
  });
  EXPECT_GE(booleans, 3);
  // As each reads: value_dim = head_dim or RoPE when any engine needs it, windows only
  // when every engine takes them.
  NamedDeclarations needs{"needs", {}};
  needs.declared.supports.value_dim_is_head_dim = true;
  needs.declared.supports.rope_required = true;
  needs.declared.supports.windows = false;
  const EngineSupports common = common_supports(std::vector{NamedDeclarations{}, needs});
  EXPECT_TRUE(common.value_dim_is_head_dim && common.rope_required && !common.windows);
}

}  // namespace
