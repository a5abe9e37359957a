// Judging at model level: the cached forward's logits against the reference's at the same
// (sequence, epoch, absolute position), under model_tolerance.cpp's bounds; then, to locate a
// failure, the first layer (in layer order, then program order) whose engine reported a
// wrong position or whose attention output or hidden state left its own bound.
//
// What fails the verdict: a logits row out of bound (or not finite), a wrong position in
// any layer, an engine error. A layer that leaves its bound while every logit stays within
// its own does NOT fail it: the contract is the logits (issue 6), and the layer bounds are
// per-value bounds of the same statistical kind, so with hundreds of thousands of layer
// values a rare honest excursion is more likely there than in the logits. Such a layer is
// still named in first_layer (describe_model_divergence says the logits agree), since a bug
// whose effect the later layers attenuate is worth a look.
#include "model/model_check.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <stdexcept>

#include "model/model_engine_run.h"
#include "model/reference_forward.h"
#include "model/transformer.h"
#include "model_tolerance.h"

namespace kvfuzz {

namespace {

// The worst value of a row against its bound: a non-finite value first, then the largest
// error. Nothing when every value is within the bound.
struct Worst {
  size_t index = 0;
  double got = 0, expected = 0, error = 0;
  FailureKind kind = FailureKind::mismatch;
  bool failed = false;
  double ratio = 0;
};

Worst judge(const std::vector<double>& got, const std::vector<double>& expected, double bound) {
  Worst worst;
  const size_t end = std::min(got.size(), expected.size());
  double largest = -1;
  for (size_t i = 0; i < end; ++i) {
    const double error = std::fabs(got[i] - expected[i]);
    const bool finite = std::isfinite(got[i]);
    const double ratio = !finite ? HUGE_VAL : bound > 0 ? error / bound : error > 0 ? HUGE_VAL : 0;
    worst.ratio = std::max(worst.ratio, ratio);
    if (!finite || error > bound) {
      const bool better = !worst.failed || (!finite && worst.kind != FailureKind::not_finite) ||
                          (finite == (worst.kind != FailureKind::not_finite) && error > largest);
      if (better) {
        worst.failed = true;
        worst.kind = finite ? FailureKind::mismatch : FailureKind::not_finite;
        worst.index = i;
        worst.got = got[i];
        worst.expected = expected[i];
        worst.error = finite ? error : HUGE_VAL;
        largest = error;
      }
    }
  }
  if (got.size() != expected.size()) {
    worst.failed = true;
    worst.kind = FailureKind::engine_error;
    worst.ratio = HUGE_VAL;
  }
  return worst;
}

std::vector<std::pair<int, double>> top5(const std::vector<double>& values) {
  std::vector<std::pair<int, double>> all;
  for (size_t i = 0; i < values.size(); ++i) all.emplace_back(static_cast<int>(i), values[i]);
  const auto rank = [](double x) { return std::isnan(x) ? -HUGE_VAL : x; };
  const size_t k = std::min<size_t>(5, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), all.end(),
                    [&](const auto& a, const auto& b) {
                      const double ra = rank(a.second), rb = rank(b.second);
                      return ra != rb ? ra > rb : a.first < b.first;
                    });
  all.resize(k);
  return all;
}

// A divergence at model level: no attention row, so no key range (hi < lo).
Divergence model_divergence(FailureKind kind, ModelSite site, int layer) {
  Divergence d;
  d.kind = kind;
  d.site = site;
  d.layer = layer;
  d.key_lo = 0;
  d.key_hi = -1;
  return d;
}

Divergence divergence(const TransformerRow& row, int layer, ModelSite site, const Worst& worst,
                      double bound) {
  Divergence d = model_divergence(worst.kind, site, layer);
  d.key = row.key;
  d.origin = row.origin;
  d.dim = static_cast<int>(worst.index);
  d.got = worst.got;
  d.expected = worst.expected;
  d.error = worst.error;
  d.bound = bound;
  return d;
}

// The token at `row` reported at `reported` instead of its own position (`layer` -1: a
// whole-model engine's one position per row).
Divergence wrong_position(const TransformerRow& row, int layer, int64_t reported) {
  Divergence d = model_divergence(FailureKind::wrong_position, ModelSite::position, layer);
  d.key = row.key;
  d.origin = row.origin;
  d.got = static_cast<double>(reported);
  d.expected = static_cast<double>(row.key.pos);
  d.error = std::fabs(d.got - d.expected);
  d.detail = "the engine reported this token at position " + std::to_string(reported);
  return d;
}

// How a report names an engine's error: "engine error", or a hazard's own kind ("race").
std::string error_name(FailureKind kind) {
  return kind == FailureKind::engine_error ? "engine error" : std::string(failure_kind_name(kind));
}

// The run's engine error, at its layer (or the model's set-up when no layer is known). It
// has no row: the key stays empty.
Divergence engine_error(const TransformerRun& run) {
  Divergence d =
      model_divergence(failure_kind_of(run.error_kind), ModelSite::engine, run.error_layer);
  d.origin = run.error_at;
  d.detail = run.error;
  return d;
}

// One model scenario run on the engine under test, beside its reference and bounds.
struct JudgedRun {
  std::map<RowKey, TransformerRow> reference;
  TransformerRun run;
  std::map<RowKey, model::RowBounds> bounds;
  size_t layers = 0;  // the layers kvfuzz's forward ran (0 for a whole-model engine)
};

// Phase 1: the reference, the engine's run (a whole-model engine runs the scenario itself;
// an attention engine runs in each layer of kvfuzz's cached forward) and the bounds of the
// numerics that run declared.
JudgedRun run_and_bound(const Scenario& scenario, const EngineInfo& engine, bool whole_model,
                        std::optional<std::pair<int, const EngineInfo*>> faulty) {
  const ModelConfig& model = *scenario.model;
  TransformerWeights weights = make_weights(model, scenario.layout);
  JudgedRun judged;
  EngineNumerics numerics;
  if (whole_model) {
    model::WholeModelRun whole = model::run_model_engine(scenario, engine);
    judged.run = std::move(whole.run);
    numerics = whole.numerics;
    // A model loaded in a narrower dtype holds its weights rounded: the reference too.
    weights = rounded_weights(std::move(weights), numerics.activations);
  } else {
    std::vector<const EngineInfo*> engines(static_cast<size_t>(std::max(0, model.layers)), &engine);
    if (faulty && faulty->first >= 0 && static_cast<size_t>(faulty->first) < engines.size()) {
      engines[static_cast<size_t>(faulty->first)] = faulty->second;
    }
    judged.run = run_transformer(scenario, weights, engines);
    numerics = judged.run.numerics;
    judged.layers = engines.size();
  }
  judged.reference = reference_transformer(scenario, weights);
  judged.bounds = model::model_bounds(scenario, weights, judged.reference, {numerics, whole_model});
  return judged;
}

// Phase 2: the logits, row by row in program order: rows compared, the worst ratio, the
// first row out of bound.
void judge_logits(const JudgedRun& judged, ModelVerdict& verdict) {
  for (const TransformerRow& row : judged.run.rows) {
    const auto ref = judged.reference.find(row.key);
    const auto bound = judged.bounds.find(row.key);
    if (ref == judged.reference.end() || bound == judged.bounds.end()) {
      // Only a wrong program key could do this (the run keys rows by the program itself).
      if (!verdict.first_logits) {
        Divergence d = model_divergence(FailureKind::engine_error, ModelSite::logits, -1);
        d.key = row.key;
        d.origin = row.origin;
        d.detail = "the reference has no row for this token";
        verdict.first_logits = d;
      }
      continue;
    }
    ++verdict.rows_compared;
    const Worst worst = judge(row.logits, ref->second.logits, bound->second.logits);
    verdict.worst_logits_ratio = std::max(verdict.worst_logits_ratio, worst.ratio);
    if (worst.failed && !verdict.first_logits) {
      Divergence d = divergence(row, -1, ModelSite::logits, worst, bound->second.logits);
      d.top_got = top5(row.logits);
      d.top_expected = top5(ref->second.logits);
      verdict.first_logits = d;
    }
  }
}

// Phase 3 for a whole-model engine: it reports one position per row, the model's.
std::optional<Divergence> first_whole_model_position(const TransformerRun& run) {
  for (const TransformerRow& row : run.rows) {
    if (row.reported_positions.size() == 1 && row.reported_positions[0] != row.key.pos) {
      return wrong_position(row, -1, row.reported_positions[0]);
    }
  }
  return std::nullopt;
}

// Phase 3 for kvfuzz's forward: the layers in layer order, then program order; within a
// row, the reported position first, then the attention output, then the hidden state. The
// first layer that went wrong is verdict.first_layer; the first wrong position (which fails
// the verdict) is returned.
std::optional<Divergence> locate_layer(const JudgedRun& judged, size_t value_dim,
                                       ModelVerdict& verdict) {
  std::optional<Divergence> first_position;
  for (size_t l = 0; l < judged.layers; ++l) {
    const int layer = static_cast<int>(l);
    for (const TransformerRow& row : judged.run.rows) {
      const auto ref = judged.reference.find(row.key);
      const auto bound = judged.bounds.find(row.key);
      if (ref == judged.reference.end() || bound == judged.bounds.end()) continue;
      if (l >= row.reported_positions.size() || l >= row.attention.size() ||
          l >= row.hidden.size()) {
        continue;
      }
      std::optional<Divergence> found;
      if (row.reported_positions[l] != row.key.pos) {
        found = wrong_position(row, layer, row.reported_positions[l]);
        if (!first_position) first_position = found;
      }
      const double attention_bound = bound->second.attention[l];
      const Worst a = judge(row.attention[l], ref->second.attention[l], attention_bound);
      const double hidden_bound = bound->second.hidden[l];
      const Worst h = judge(row.hidden[l], ref->second.hidden[l], hidden_bound);
      verdict.worst_layer_ratio = std::max({verdict.worst_layer_ratio, a.ratio, h.ratio});
      if (!found && a.failed) {
        found = divergence(row, layer, ModelSite::attention, a, attention_bound);
        found->q_head = static_cast<int>(a.index / value_dim);
        found->dim = static_cast<int>(a.index % value_dim);
      }
      if (!found && h.failed) found = divergence(row, layer, ModelSite::hidden, h, hidden_bound);
      if (found && !verdict.first_layer) verdict.first_layer = found;
    }
    if (judged.run.error_layer == layer && !verdict.first_layer) {
      verdict.first_layer = engine_error(judged.run);
    }
  }
  if (!judged.run.error.empty() && judged.run.error_layer < 0 && !verdict.first_layer) {
    verdict.first_layer = engine_error(judged.run);
  }
  return first_position;
}

}  // namespace

ModelVerdict judge_model(const Scenario& scenario, const EngineInfo& engine,
                         std::optional<std::pair<int, const EngineInfo*>> faulty) {
  if (!scenario.model) {
    throw std::invalid_argument("judge_model: scenario '" + scenario.name + "' has no model");
  }
  ModelVerdict verdict;
  verdict.whole_model = static_cast<bool>(engine.make_model);
  const JudgedRun judged = run_and_bound(scenario, engine, verdict.whole_model, faulty);
  judge_logits(judged, verdict);
  std::optional<Divergence> first_position;
  if (verdict.whole_model) {
    first_position = first_whole_model_position(judged.run);
    verdict.first_position = first_position;
  } else {
    first_position =
        locate_layer(judged, static_cast<size_t>(std::max(1, scenario.layout.value_dim)), verdict);
  }
  // Phase 4: what fails the verdict.
  if (verdict.first_logits) {
    verdict.failure = verdict.first_logits;
  } else if (first_position) {
    verdict.failure = first_position;
  } else if (!judged.run.error.empty()) {
    verdict.failure = engine_error(judged.run);
  }
  verdict.pass = !verdict.failure;
  return verdict;
}

namespace {

std::string number(double x) {
  std::ostringstream out;
  out.precision(9);
  out << x;
  return out.str();
}

std::string top_text(const std::vector<std::pair<int, double>>& top) {
  std::string text;
  for (const auto& [id, value] : top) {
    if (!text.empty()) text += ", ";
    text += std::to_string(id) + " (" + number(value) + ")";
  }
  return text;
}

}  // namespace

std::string describe_model_divergence(const ModelVerdict& verdict) {
  std::string text;
  if (verdict.pass && !verdict.first_layer) {
    return "model: every logits row within tolerance (" + std::to_string(verdict.rows_compared) +
           " rows)\n";
  }
  if (const auto& d = verdict.first_logits) {
    text += "logits: first diverging row " + to_string(d->key) + " (" + to_string(d->origin) +
            "): " + std::string(failure_kind_name(d->kind)) + " at token id " +
            std::to_string(d->dim) + ": got " + number(d->got) + ", expected " +
            number(d->expected) + ", error " + number(d->error) + " > bound " + number(d->bound) +
            "\n";
    if (!d->detail.empty()) text += "  " + d->detail + "\n";
    text += "  top-5 got:      " + top_text(d->top_got) + "\n";
    text += "  top-5 expected: " + top_text(d->top_expected) + "\n";
  } else {
    text +=
        "logits: every row within tolerance (" + std::to_string(verdict.rows_compared) + " rows)\n";
  }
  if (const auto& d = verdict.first_layer) {
    const std::string layer = d->layer >= 0 ? "layer " + std::to_string(d->layer) : "model";
    if (is_engine_error(d->kind)) {
      text += layer + ": " + error_name(d->kind) + " at " + to_string(d->origin) + ": " +
              d->detail + "\n";
    } else if (d->kind == FailureKind::wrong_position) {
      text += layer + ": first divergence at " + to_string(d->key) + " (" + to_string(d->origin) +
              "): wrong-position: " + d->detail + "\n";
    } else {
      text += layer + ": first divergence at " + to_string(d->key) + " (" + to_string(d->origin) +
              "): " + std::string(failure_kind_name(d->kind)) + " in the " +
              std::string(model_site_name(d->site)) +
              (d->site == ModelSite::attention ? " of q head " + std::to_string(d->q_head) : "") +
              ", value " + std::to_string(d->dim) + ": got " + number(d->got) + ", expected " +
              number(d->expected) + ", error " + number(d->error) + " > bound " + number(d->bound) +
              "\n";
    }
    if (verdict.pass) {
      text += "  (the logits stay within tolerance, so this does not fail the check)\n";
    }
  } else if (verdict.whole_model && !verdict.pass) {
    text += "layers: not located (the engine runs the whole model and returns only logits)\n";
    if (const auto& p = verdict.first_position) {
      text += "position: first wrong at " + to_string(p->key) + " (" + to_string(p->origin) +
              "): " + p->detail + "\n";
    }
  }
  // The logits agree and the first layer found is an excursion that fails nothing: name
  // what does fail (a wrong position later on, or the engine error).
  const auto& f = verdict.failure;
  const auto& l = verdict.first_layer;
  if (f && !verdict.first_logits &&
      !(l && l->layer == f->layer && l->site == f->site && l->key == f->key)) {
    const std::string layer = f->layer >= 0 ? "layer " + std::to_string(f->layer) : "model";
    text += "fails on: " + layer + ", " +
            (is_engine_error(f->kind)
                 ? error_name(f->kind) + " at " + to_string(f->origin) + ": " + f->detail
                 : "wrong-position at " + to_string(f->key) + " (" + to_string(f->origin) +
                       "): " + f->detail) +
            "\n";
  }
  return text;
}

}  // namespace kvfuzz
