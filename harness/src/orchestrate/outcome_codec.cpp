#include "orchestrate/outcome_codec.h"

#include <bit>
#include <cstdint>

namespace kvfuzz::orchestrate {

namespace {

using Json = nlohmann::json;

// NaN and infinities included: JSON numbers cannot hold them, their bits can.
uint64_t bits(double v) {
  return std::bit_cast<uint64_t>(v);
}
double from_bits(const Json& j) {
  return std::bit_cast<double>(j.get<uint64_t>());
}

// A logits row's five largest logits: [[id, value bits], ...].
Json top_to_json(const std::vector<std::pair<int, double>>& top) {
  Json j = Json::array();
  for (const auto& [id, value] : top) j.push_back({id, bits(value)});
  return j;
}
std::vector<std::pair<int, double>> top_from_json(const Json& j) {
  std::vector<std::pair<int, double>> top;
  for (const Json& entry : j) top.emplace_back(entry.at(0).get<int>(), from_bits(entry.at(1)));
  return top;
}

Json divergence_to_json(const Divergence& d) {
  return {{"kind", static_cast<int>(d.kind)},
          {"key", {d.key.seq, d.key.epoch, d.key.pos}},
          {"origin", {d.origin.op, d.origin.chunk, d.origin.token}},
          {"q_head", d.q_head},
          {"dim", d.dim},
          {"got", bits(d.got)},
          {"expected", bits(d.expected)},
          {"error", bits(d.error)},
          {"bound", bits(d.bound)},
          {"output", static_cast<int>(d.output)},
          {"keys", {d.key_lo, d.key_hi}},
          {"detail", d.detail},
          {"hypothesis", d.hypothesis},
          {"site", static_cast<int>(d.site)},
          {"layer", d.layer},
          {"top", {top_to_json(d.top_got), top_to_json(d.top_expected)}}};
}

Divergence divergence_from_json(const Json& j) {
  Divergence d;
  d.kind = static_cast<FailureKind>(j.at("kind").get<int>());
  d.key = RowKey{j.at("key").at(0).get<int>(), j.at("key").at(1).get<int>(),
                 j.at("key").at(2).get<int64_t>()};
  d.origin = RowOrigin{j.at("origin").at(0).get<int>(), j.at("origin").at(1).get<int>(),
                       j.at("origin").at(2).get<int>()};
  d.q_head = j.at("q_head").get<int>();
  d.dim = j.at("dim").get<int>();
  d.got = from_bits(j.at("got"));
  d.expected = from_bits(j.at("expected"));
  d.output = static_cast<DType>(j.at("output").get<int>());
  d.error = from_bits(j.at("error"));
  d.bound = from_bits(j.at("bound"));
  d.key_lo = j.at("keys").at(0).get<int64_t>();
  d.key_hi = j.at("keys").at(1).get<int64_t>();
  d.detail = j.at("detail").get<std::string>();
  d.hypothesis = j.at("hypothesis").get<std::string>();
  d.site = static_cast<ModelSite>(j.at("site").get<int>());
  d.layer = j.at("layer").get<int>();
  d.top_got = top_from_json(j.at("top").at(0));
  d.top_expected = top_from_json(j.at("top").at(1));
  return d;
}

}  // namespace

Json outcome_to_json(const PropertyOutcome& outcome) {
  Json j = {{"pass", outcome.pass},
            {"report", outcome.report},
            {"rows_compared", outcome.rows_compared},
            {"rows_unjudged", outcome.rows_unjudged},
            {"bound_used", outcome.bound_used}};
  if (outcome.signature) {
    j["signature"] = {static_cast<int>(outcome.signature->property),
                      static_cast<int>(outcome.signature->kind)};
  }
  if (outcome.first) j["first"] = divergence_to_json(*outcome.first);
  return j;
}

PropertyOutcome outcome_from_json(const Json& j) {
  PropertyOutcome outcome;
  outcome.pass = j.at("pass").get<bool>();
  outcome.report = j.at("report").get<std::string>();
  outcome.rows_compared = j.at("rows_compared").get<int>();
  outcome.rows_unjudged = j.at("rows_unjudged").get<int>();
  outcome.bound_used = j.at("bound_used").get<double>();
  if (j.contains("signature")) {
    outcome.signature = FailureSignature{static_cast<Property>(j["signature"].at(0).get<int>()),
                                         static_cast<FailureKind>(j["signature"].at(1).get<int>())};
  }
  if (j.contains("first")) outcome.first = divergence_from_json(j.at("first"));
  return outcome;
}

}  // namespace kvfuzz::orchestrate
