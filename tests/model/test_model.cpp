// Model level (issue 6): the tiny transformer's weights, its double-precision reference
// against a computation written here independently, honest engines passing in every dtype
// (hand-built and generated scenarios), every attention mutant failing at the logits with
// the faulty layer located, the top-5 lists, an engine error's layer, and a bug that
// greedy decoding would not notice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "corpus/provenance.h"
#include "cpu/flash_constants.h"
#include "forwarding_engine.h"
#include "generated_cases.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/orchestrate.h"
#include "kvfuzz/prng.h"
#include "model/model_check.h"
#include "model/reference_forward.h"
#include "model/transformer.h"
#include "test_scenarios.h"

namespace kvfuzz {
namespace {

// ---------------------------------------------------------------------------------------
// Helpers

// A scenario made a model scenario: token ids folded into [0, vocab), the token source the
// model level uses, no hand-derived attention rows.
Scenario with_model(Scenario s, const ModelConfig& model) {
  s.model = model;
  // A scale raised for a score spread (generate/score_spreads.h) is sized for token data;
  // on a model's q and k it would make every layer's softmax an argmax. The generator's
  // own scales are at most 2.
  if (s.layout.scale && *s.layout.scale > 2) s.layout.scale.reset();
  s.tokens = GeneratedTokens{0, model.vocab};
  s.expect.clear();
  for (Op& op : s.program) {
    for (int& id : op.tokens) id %= model.vocab;
    for (Chunk& chunk : op.chunks) {
      for (int& id : chunk.tokens) id %= model.vocab;
    }
  }
  return s;
}

ModelConfig small_model(int layers, uint64_t seed) {
  return ModelConfig{.vocab = 32, .width = 16, .layers = layers, .ffn = 24, .seed = seed};
}

// Generated scenarios of modest size (the suite runs under ASan too).
GeneratorOptions modest() {
  GeneratorOptions o;
  o.max_ops = 8;
  o.max_epoch_tokens = 80;
  o.typical_epoch_tokens = 40;
  o.max_head_dim = 32;
  o.typical_head_dim = 16;
  o.max_q_heads = 8;
  o.typical_q_heads = 4;
  return o;
}

Scenario generated(uint64_t seed) {
  PrngChoiceSource choices(seed);
  return generate_scenario(choices, modest());
}

std::vector<const EngineInfo*> registry(bool mutant) {
  std::vector<const EngineInfo*> out;
  for (const EngineInfo& e : engine_registry()) {
    // The model level judges only engines with the default numerics (unjudgeable()).
    const bool f32 = computes_in_f32(probe_declarations(e).numerics);
    // split-merge-first-max is wrong only on scores past f32's exp range, which a model's
    // q and k (weights of variance 1/fan_in) never reach.
    if (e.name == "split-merge-first-max") continue;
    if (e.mutant == mutant && f32) out.push_back(&e);
  }
  return out;
}

constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};

std::vector<int> iota_tokens(int first, int count, int vocab) {
  std::vector<int> ids;
  for (int i = 0; i < count; ++i) ids.push_back((first + 7 * i) % vocab);
  return ids;
}

// Every seed the mutant tests look at: generated scenarios on which the mutant fails the
// attention-level check (so the program exercises its bug).
struct MutantCase {
  Scenario attention;  // as generated
  uint64_t seed = 0;
};

std::vector<MutantCase> mutant_cases(const EngineInfo& mutant, int wanted, uint64_t seeds) {
  std::vector<MutantCase> found;
  for (uint64_t seed = 0; seed < seeds && static_cast<int>(found.size()) < wanted; ++seed) {
    const Scenario s = generated(seed);
    if (!judge_engine(s, prepare(s), mutant).verdict.pass) found.push_back({s, seed});
  }
  return found;
}

// ---------------------------------------------------------------------------------------
// Weights

Layout golden_layout() {
  return test::make_layout({.q_heads = 2, .kv_heads = 1, .head_dim = 4, .value_dim = 3});
}

TEST(ModelWeights, AreDeterministicAndScaled) {
  const ModelConfig model{.vocab = 16, .width = 8, .layers = 2, .ffn = 12, .seed = 42};
  const TransformerWeights w = make_weights(model, golden_layout());
  // Golden values: the draw order and the mappings are part of the model's definition.
  EXPECT_EQ(w.embedding[0], -0x1.7108d4p+0f);
  EXPECT_EQ(w.embedding[127], -0x1.c2bfaap-1f);
  EXPECT_EQ(w.layers[0].attention_norm[3], 0x1.eb2708p-1f);
  EXPECT_EQ(w.layers[0].wq[5], 0x1.03781ep-1f);
  EXPECT_EQ(w.layers[1].w_down[95], -0x1.5d8dc8p-2f);
  EXPECT_EQ(w.final_norm[7], 0x1.18d3cep+0f);
  EXPECT_EQ(w.lm_head[127], 0x1.fd668cp-5f);

  // Shapes.
  ASSERT_EQ(w.layers.size(), 2u);
  EXPECT_EQ(w.embedding.size(), 16u * 8);
  EXPECT_EQ(w.layers[1].wq.size(), 8u * 2 * 4);
  EXPECT_EQ(w.layers[1].wk.size(), 8u * 1 * 4);
  EXPECT_EQ(w.layers[1].wv.size(), 8u * 1 * 3);
  EXPECT_EQ(w.layers[1].wo.size(), 2u * 3 * 8);
  EXPECT_EQ(w.layers[1].w_gate.size(), 8u * 12);
  EXPECT_EQ(w.layers[1].w_down.size(), 12u * 8);
  EXPECT_EQ(w.lm_head.size(), 8u * 16);

  // Same seed, same weights; another seed, others.
  const TransformerWeights again = make_weights(model, golden_layout());
  EXPECT_EQ(again.layers[1].w_up, w.layers[1].w_up);
  ModelConfig other = model;
  other.seed = 43;
  EXPECT_NE(make_weights(other, golden_layout()).layers[1].w_up, w.layers[1].w_up);

  // Scale: variance 1 / fan_in (uniform init), gains within [0.875, 1.125).
  const TransformerWeights big = make_weights(
      ModelConfig{.vocab = 8, .width = 64, .layers = 1, .ffn = 256, .seed = 1}, golden_layout());
  double sum = 0;
  for (float x : big.layers[0].w_down) sum += static_cast<double>(x) * x;
  const double variance = sum / static_cast<double>(big.layers[0].w_down.size());
  EXPECT_NEAR(variance * 256, 1.0, 0.05);
  for (float g : big.layers[0].mlp_norm) {
    EXPECT_GE(g, 0.875f);
    EXPECT_LT(g, 1.125f);
  }
}

// ---------------------------------------------------------------------------------------
// The reference against an independent computation

// The model written the most direct way: matrices as nested vectors, RoPE as a complex
// rotation of the pair (x_i, x_{i+d/2}), softmax over the window. Returns the logits of
// the last position of `tokens` after one pass over the whole prefix.
std::vector<double> direct_logits(const Scenario& s, const TransformerWeights& w,
                                  const std::vector<int>& tokens) {
  const ModelConfig& m = *s.model;
  const Layout& L = s.layout;
  const auto W = static_cast<size_t>(m.width);
  const auto at = [](const std::vector<float>& matrix, size_t cols, size_t r, size_t c) {
    return static_cast<double>(matrix[r * cols + c]);
  };
  const auto norm = [&](const std::vector<double>& x, const std::vector<float>& g) {
    double ms = 0;
    for (double v : x) ms += v * v;
    ms /= static_cast<double>(x.size());
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = g[i] * x[i] / std::sqrt(ms + 1e-5);
    return y;
  };
  const auto project = [&](const std::vector<double>& x, const std::vector<float>& matrix,
                           size_t cols) {
    std::vector<double> y(cols, 0.0);
    for (size_t c = 0; c < cols; ++c) {
      for (size_t r = 0; r < x.size(); ++r) y[c] += x[r] * at(matrix, cols, r, c);
    }
    return y;
  };
  const auto hd = static_cast<size_t>(L.head_dim), vd = static_cast<size_t>(L.value_dim);
  const auto rotate = [&](std::vector<double>& x, size_t head, size_t pos) {
    if (!L.rope_theta) return;
    for (size_t i = 0; i < hd / 2; ++i) {
      const double angle =
          static_cast<double>(pos) *
          std::pow(*L.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
      const std::complex<double> z =
          std::complex<double>(x[head * hd + i], x[head * hd + i + hd / 2]) *
          std::polar(1.0, angle);
      x[head * hd + i] = z.real();
      x[head * hd + i + hd / 2] = z.imag();
    }
  };
  std::vector<std::vector<double>> h;
  for (int t : tokens) {
    std::vector<double> e(W);
    for (size_t i = 0; i < W; ++i) e[i] = at(w.embedding, W, static_cast<size_t>(t), i);
    h.push_back(e);
  }
  const size_t n = tokens.size();
  for (const auto& layer : w.layers) {
    std::vector<std::vector<double>> q(n), k(n), v(n);
    for (size_t p = 0; p < n; ++p) {
      const auto x = norm(h[p], layer.attention_norm);
      q[p] = project(x, layer.wq, static_cast<size_t>(L.q_heads) * hd);
      k[p] = project(x, layer.wk, static_cast<size_t>(L.kv_heads) * hd);
      v[p] = project(x, layer.wv, static_cast<size_t>(L.kv_heads) * vd);
      for (size_t g = 0; g < static_cast<size_t>(L.q_heads); ++g) rotate(q[p], g, p);
      for (size_t g = 0; g < static_cast<size_t>(L.kv_heads); ++g) rotate(k[p], g, p);
    }
    std::vector<std::vector<double>> next = h;
    for (size_t p = 0; p < n; ++p) {
      std::vector<double> attn(static_cast<size_t>(L.q_heads) * vd, 0.0);
      for (size_t qh = 0; qh < static_cast<size_t>(L.q_heads); ++qh) {
        const size_t g = qh / static_cast<size_t>(L.q_heads / L.kv_heads);
        std::vector<double> weight;
        std::vector<size_t> keys;
        for (size_t j = 0; j <= p; ++j) {
          if (L.window && p - j >= static_cast<size_t>(*L.window)) continue;
          double dot = 0;
          for (size_t d = 0; d < hd; ++d) dot += q[p][qh * hd + d] * k[j][g * hd + d];
          weight.push_back(std::exp(L.softmax_scale() * dot));
          keys.push_back(j);
        }
        double total = 0;
        for (double x : weight) total += x;
        for (size_t i = 0; i < keys.size(); ++i) {
          for (size_t d = 0; d < vd; ++d) {
            attn[qh * vd + d] += weight[i] / total * v[keys[i]][g * vd + d];
          }
        }
      }
      const auto o = project(attn, layer.wo, W);
      for (size_t i = 0; i < W; ++i) next[p][i] += o[i];
      const auto y = norm(next[p], layer.mlp_norm);
      const auto gate = project(y, layer.w_gate, static_cast<size_t>(m.ffn));
      const auto up = project(y, layer.w_up, static_cast<size_t>(m.ffn));
      std::vector<double> a(gate.size());
      for (size_t i = 0; i < a.size(); ++i) a[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
      const auto down = project(a, layer.w_down, W);
      for (size_t i = 0; i < W; ++i) next[p][i] += down[i];
    }
    h = next;
  }
  return project(norm(h.back(), w.final_norm), w.lm_head, static_cast<size_t>(m.vocab));
}

Scenario hand_checkable() {
  Scenario s;
  s.name = "model-hand";
  s.layout = test::make_layout({.q_heads = 2,
                                .kv_heads = 1,
                                .head_dim = 2,
                                .value_dim = 2,
                                .page_size = 2,
                                .rope_theta = 100.0,
                                .window = 2});
  s.model = ModelConfig{.vocab = 5, .width = 4, .layers = 1, .ffn = 3, .seed = 3};
  s.tokens = GeneratedTokens{0, 5};
  s.sequences = 2;
  s.program = {Op::append(0, {1, 3}), Op::append(0, {2}), Op::truncate(0, 1),
               Op::append(0, {4}),    Op::fork(0, 1),     Op::append(1, {0, 2})};
  return s;
}

TEST(ModelReference, MatchesADirectComputation) {
  const Scenario s = hand_checkable();
  const TransformerWeights w = make_weights(*s.model, s.layout);
  const auto ref = reference_transformer(s, w);
  // (key, the tokens the stream holds up to and including the row)
  const std::vector<std::pair<RowKey, std::vector<int>>> rows = {
      {{0, 0, 0}, {1}},    {{0, 0, 1}, {1, 3}},    {{0, 0, 2}, {1, 3, 2}},
      {{0, 1, 1}, {1, 4}}, {{1, 1, 2}, {1, 4, 0}}, {{1, 1, 3}, {1, 4, 0, 2}},
  };
  ASSERT_EQ(ref.size(), rows.size());
  for (const auto& [key, tokens] : rows) {
    SCOPED_TRACE(to_string(key));
    ASSERT_TRUE(ref.contains(key));
    const TransformerRow& row = ref.at(key);
    const auto expected = direct_logits(s, w, tokens);
    ASSERT_EQ(row.logits.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(row.logits[i], expected[i], 1e-12);
    EXPECT_EQ(row.reported_positions, std::vector<int64_t>{key.pos});
    EXPECT_EQ(row.attention.size(), 1u);
    EXPECT_EQ(row.attention[0].size(), 4u);
    EXPECT_EQ(row.hidden[0].size(), 4u);
  }
  EXPECT_EQ(ref.at(RowKey{1, 1, 3}).origin.op, 5);
  EXPECT_EQ(ref.at(RowKey{1, 1, 3}).origin.token, 1);

  // The cached forward agrees, and every honest engine passes the check.
  const EngineInfo* contiguous = find_engine("contiguous");
  const TransformerRun run = run_transformer(s, w, std::vector<const EngineInfo*>{contiguous});
  ASSERT_TRUE(run.error.empty()) << run.error;
  ASSERT_EQ(run.rows.size(), rows.size());
  for (const TransformerRow& row : run.rows) {
    for (size_t i = 0; i < row.logits.size(); ++i) {
      EXPECT_NEAR(row.logits[i], ref.at(row.key).logits[i], 1e-5);
    }
  }
  for (const EngineInfo* e : registry(false)) {
    const ModelVerdict v = judge_model(s, *e);
    EXPECT_TRUE(v.pass) << e->name << "\n" << describe_model_divergence(v);
    EXPECT_EQ(v.rows_compared, 6);
  }
}

// ---------------------------------------------------------------------------------------
// Honest engines pass

// Hand-built programs over every cache feature: batched steps of sequences with different
// cached lengths, decode runs past the flash split threshold, resets, truncates, forks,
// GQA, RoPE, a window, pages of 3 handed out in reverse.
std::vector<Scenario> hand_built(DType dtype) {
  std::vector<Scenario> out;
  const ModelConfig model{.vocab = 48, .width = 24, .layers = 3, .ffn = 40, .seed = 11};
  for (int variant = 0; variant < 3; ++variant) {
    Scenario s;
    s.name = "hand-" + std::to_string(variant);
    s.layout.q_heads = variant == 0 ? 4 : variant == 1 ? 6 : 2;
    s.layout.kv_heads = variant == 0 ? 2 : variant == 1 ? 1 : 2;
    s.layout.head_dim = variant == 2 ? 6 : 8;
    s.layout.value_dim = variant == 1 ? 5 : 8;
    s.layout.page_size = variant == 0 ? 3 : 16;
    s.layout.dtype = dtype;
    if (variant != 2) s.layout.rope_theta = 10000.0;
    if (variant == 1) s.layout.window = 5;
    if (variant == 2) s.layout.scale = 0.5;
    s.placement.order = variant == 0 ? PageOrder::reversed : PageOrder::identity;
    s.sequences = 3;
    s.program = {Op::append(0, iota_tokens(1, 7, 48)),
                 Op::step({Chunk{0, {5}}, Chunk{1, iota_tokens(3, 4, 48)}}),
                 Op::fork(0, 2),
                 Op::step({Chunk{2, iota_tokens(9, 3, 48)}, Chunk{0, {8}}, Chunk{1, {2}}}),
                 Op::truncate(0, 4),
                 Op::append(0, iota_tokens(2, 2, 48)),
                 Op::reset(1),
                 Op::append(1, iota_tokens(5, 3, 48))};
    for (int t = 0; t < cpu::kFlashSplitThreshold + 4; ++t) {
      s.program.push_back(Op::step({Chunk{0, {(t * 5) % 48}}, Chunk{2, {(t * 3 + 1) % 48}}}));
    }
    s.program.push_back(Op::truncate(2, 20));
    s.program.push_back(Op::append(2, iota_tokens(4, 5, 48)));
    s.model = model;
    s.tokens = GeneratedTokens{0, model.vocab};
    out.push_back(s);
  }
  return out;
}

TEST(ModelHonest, PassHandBuiltScenariosInEveryDtype) {
  double worst = 0, worst_layer = 0;
  for (DType dtype : kDTypes) {
    for (const Scenario& s : hand_built(dtype)) {
      for (const EngineInfo* e : registry(false)) {
        SCOPED_TRACE(s.name + " " + std::string(dtype_name(dtype)) + " " + e->name);
        const ModelVerdict v = judge_model(s, *e);
        EXPECT_TRUE(v.pass) << describe_model_divergence(v);
        EXPECT_FALSE(v.first_layer) << describe_model_divergence(v);
        EXPECT_GT(v.rows_compared, 80);
        worst = std::max(worst, v.worst_logits_ratio);
        worst_layer = std::max(worst_layer, v.worst_layer_ratio);
      }
    }
  }
  std::printf("hand-built: honest worst logits error/bound %.3g, layers %.3g\n", worst,
              worst_layer);
  EXPECT_LT(worst, 0.5);  // a margin, not just a pass
  EXPECT_GT(worst, 0);    // the engines do round: the comparison is not vacuous
}

TEST(ModelHonest, PassGeneratedScenariosInEveryDtype) {
  double worst = 0, worst_layer = 0;
  int checks = 0;
  for (uint64_t seed = 0; seed < test::generated_cases(18); ++seed) {
    Scenario base = generated(seed);
    for (DType dtype : kDTypes) {
      base.layout.dtype = dtype;
      const Scenario s = with_model(base, small_model(2, seed + 1));
      for (const EngineInfo* e : registry(false)) {
        SCOPED_TRACE("seed " + std::to_string(seed) + " " + std::string(dtype_name(dtype)) + " " +
                     e->name);
        const ModelVerdict v = judge_model(s, *e);
        EXPECT_TRUE(v.pass) << describe_model_divergence(v);
        EXPECT_FALSE(v.first_layer) << describe_model_divergence(v);
        worst = std::max(worst, v.worst_logits_ratio);
        worst_layer = std::max(worst_layer, v.worst_layer_ratio);
        ++checks;
      }
    }
  }
  std::printf("generated: %d checks, honest worst logits error/bound %.3g, layers %.3g\n", checks,
              worst, worst_layer);
  EXPECT_LT(worst, 0.5);
}

// ---------------------------------------------------------------------------------------
// Mutants fail, and the faulty layer is found

// The attention features' and quantized KV caches' mutants need a feature or a format,
// which model scenarios do not have (validate() refuses them there): their seeds and
// attention-level checks reject them.
bool needs_attention_feature(const EngineInfo& mutant) {
  static const std::set<std::string> kNames = {
      "softcap-twice-split",        "sink-prefill-only",    "alibi-kv-head-slope",
      "chunked-local-from-request", "fp8-v-scale-dropped",  "q4_0-nibbles-swapped",
      "affine-pack-high-first",     "mla-value-at-key-end", "rope-interleaved-as-half-split",
      "rope-part-at-front"};
  return kNames.count(mutant.name) != 0;
}

TEST(ModelMutants, EveryMutantFailsWhereItsBugIsExercised) {
  double least = HUGE_VAL;
  for (const EngineInfo* mutant : registry(true)) {
    if (needs_attention_feature(*mutant)) continue;
    const auto cases = mutant_cases(*mutant, 3, 300);
    ASSERT_FALSE(cases.empty()) << mutant->name << ": no generated scenario exercises it";
    for (const MutantCase& c : cases) {
      for (DType dtype : kDTypes) {
        Scenario base = c.attention;
        base.layout.dtype = dtype;
        const Scenario s = with_model(base, small_model(2, c.seed + 5));
        SCOPED_TRACE(mutant->name + " seed " + std::to_string(c.seed) + " " +
                     std::string(dtype_name(dtype)));
        const ModelVerdict v = judge_model(s, *mutant);
        EXPECT_FALSE(v.pass);
        ASSERT_TRUE(v.first_layer);
        if (v.first_logits) least = std::min(least, v.worst_logits_ratio);
      }
    }
  }
  std::printf("mutants: least worst logits error/bound among logits failures %.3g\n", least);
  // By a wide margin: honest engines stay under 0.5 of the bound (above). The least is
  // reset-keeps-block-table's, 4.37 in bf16 at seed 20 (one key of a long context
  // overwritten); the others' least is 11.6.
  EXPECT_GT(least, 4);
}

// What check --model generates finds the mutants whose bugs need score spreads (a split
// merge that rescales by the first partition's max) or wide pools (page and slot indices
// narrowed to 8 or 16 bits): model scenarios get both (score_spreads.cpp, the generator's
// wide pool drawn last), as attention scenarios do.
TEST(ModelMutants, GeneratedModelScenariosRejectTheSpreadAndWidePoolMutants) {
  for (const char* name :
       {"split-merge-first-max", "block-table-u8", "slot-offset-u16", "slot-mapping-i16"}) {
    const EngineInfo& mutant = test::engine(name);
    const NamedDeclarations declared{mutant.name, probe_declarations(mutant)};
    const GeneratorOptions options =
        generator_options_from_declarations(std::span(&declared, 1), SizeCaps{.model = true});
    int rejected_at = -1;
    for (int i = 0; i < 150 && rejected_at < 0; ++i) {
      PrngChoiceSource choices(case_seed(3, i));
      const Scenario s = generate_scenario(choices, options);
      ASSERT_TRUE(s.model.has_value());
      if (!judge_model(s, mutant).pass) rejected_at = i;
    }
    std::printf("%-24s rejected at model case %d\n", name, rejected_at);
    EXPECT_GE(rejected_at, 0) << name << " passed 150 generated model scenarios";
  }
}

// A kernel hazard the SIMT launcher reports in a layer's engine keeps its kind at model
// level (a race is a race, not an engine error), and the report names it at its layer.
TEST(ModelMutants, TheHazardMutantsAreNamedByTheirKindAtModelLevel) {
  for (const auto& [name, kind] :
       {std::pair{"cuda-race-unsynced-pages", FailureKind::race},
        std::pair{"cuda-barrier-per-branch", FailureKind::barrier_divergence},
        std::pair{"cuda-race-merge-no-syncwarp", FailureKind::race}}) {
    const EngineInfo& mutant = test::engine(name);
    const NamedDeclarations declared{mutant.name, probe_declarations(mutant)};
    const GeneratorOptions options =
        generator_options_from_declarations(std::span(&declared, 1), SizeCaps{.model = true});
    std::optional<ModelVerdict> rejected;
    for (int i = 0; i < 20 && !rejected; ++i) {
      PrngChoiceSource choices(case_seed(3, i));
      ModelVerdict verdict = judge_model(generate_scenario(choices, options), mutant);
      if (!verdict.pass) rejected = std::move(verdict);
    }
    ASSERT_TRUE(rejected.has_value()) << name << " passed 20 generated model scenarios";
    ASSERT_TRUE(rejected->failure.has_value()) << name;
    EXPECT_EQ(rejected->failure->kind, kind) << name;
    const std::string report = describe_model_divergence(*rejected);
    EXPECT_NE(report.find(": " + std::string(failure_kind_name(kind)) + " at op "),
              std::string::npos)
        << report;
  }
}

TEST(ModelMutants, TheFaultyLayerIsTheFirstDivergingLayer) {
  const EngineInfo* honest = find_engine("flash");
  for (const EngineInfo* mutant : registry(true)) {
    if (needs_attention_feature(*mutant)) continue;
    const auto cases = mutant_cases(*mutant, 1, 300);
    ASSERT_FALSE(cases.empty()) << mutant->name;
    for (DType dtype : {DType::f32, DType::bf16}) {
      Scenario base = cases[0].attention;
      base.layout.dtype = dtype;
      const Scenario s = with_model(base, small_model(3, cases[0].seed + 9));
      for (int layer : {0, 2}) {
        SCOPED_TRACE(mutant->name + " in layer " + std::to_string(layer) + " " +
                     std::string(dtype_name(dtype)));
        const ModelVerdict v = judge_model(s, *honest, std::pair{layer, mutant});
        EXPECT_FALSE(v.pass) << describe_model_divergence(v);
        ASSERT_TRUE(v.first_layer);
        EXPECT_EQ(v.first_layer->layer, layer) << describe_model_divergence(v);
      }
    }
  }
}

// An engine that works for `good_steps` steps and then throws.
class FailingEngine final : public test::ForwardingEngine {
 public:
  FailingEngine(const EngineConfig& config, int good_steps)
      : ForwardingEngine(find_engine("contiguous")->make(config)), left_(good_steps) {}
  void step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) override {
    if (left_-- <= 0) throw EngineError("out of memory (test)");
    ForwardingEngine::step(chunks, outs);
  }

 private:
  int left_;
};

TEST(ModelMutants, AnEngineErrorNamesItsLayer) {
  const EngineInfo failing{"failing", "throws on its third step", false,
                           [](const EngineConfig& config) -> std::unique_ptr<Engine> {
                             return std::make_unique<FailingEngine>(config, 2);
                           }};
  const Scenario s = hand_built(DType::f32)[0];
  const ModelVerdict v = judge_model(s, *find_engine("paged"), std::pair{1, &failing});
  EXPECT_FALSE(v.pass);
  ASSERT_TRUE(v.first_layer);
  EXPECT_EQ(v.first_layer->kind, FailureKind::engine_error);
  EXPECT_EQ(v.first_layer->layer, 1);
  EXPECT_EQ(v.first_layer->origin.op, 3);
  EXPECT_NE(v.first_layer->detail.find("out of memory (test)"), std::string::npos);
  EXPECT_FALSE(v.first_logits);  // the rows before the error are right
  EXPECT_EQ(v.rows_compared, 12);
  EXPECT_NE(describe_model_divergence(v).find("layer 1: engine error at op 3"), std::string::npos);
}

// The property's divergence is the model level's own, with its site and layer: a layer's
// engine error is named by layer in the one-line summary, not flattened into text.
TEST(ModelMutants, AnEngineErrorsDivergenceCarriesItsLayer) {
  const EngineInfo failing{"failing", "throws on its third step", false,
                           [](const EngineConfig& config) -> std::unique_ptr<Engine> {
                             return std::make_unique<FailingEngine>(config, 2);
                           }};
  const PropertyOutcome outcome =
      judge_model_property(Property::prefix, hand_built(DType::f32)[0], failing);
  ASSERT_FALSE(outcome.pass);
  ASSERT_TRUE(outcome.first);
  EXPECT_EQ(outcome.first->kind, FailureKind::engine_error);
  EXPECT_EQ(outcome.first->site, ModelSite::engine);
  EXPECT_EQ(outcome.first->layer, 0);  // every layer is the failing engine: the first throws
  EXPECT_EQ(outcome.first->detail.find("engine threw: out of memory (test)"), 0u)
      << outcome.first->detail;
  const std::string line = failure_line(outcome);
  EXPECT_NE(line.find("engine-error at op 3, chunk 0, token 0, layer 0"), std::string::npos)
      << line;
}

// ---------------------------------------------------------------------------------------
// Reports

std::vector<std::pair<int, double>> top5(const std::vector<double>& logits) {
  std::vector<std::pair<int, double>> all;
  for (size_t i = 0; i < logits.size(); ++i) all.emplace_back(static_cast<int>(i), logits[i]);
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  all.resize(5);
  return all;
}

TEST(ModelReport, FirstDivergingLogitsRowAndItsTopFive) {
  const EngineInfo* mutant = find_engine("stale-kv");
  const auto cases = mutant_cases(*mutant, 1, 300);
  ASSERT_FALSE(cases.empty());
  const Scenario s = with_model(cases[0].attention, small_model(2, 21));
  const ModelVerdict v = judge_model(s, *mutant);
  ASSERT_FALSE(v.pass);
  ASSERT_TRUE(v.first_logits);
  const Divergence& d = *v.first_logits;
  EXPECT_EQ(d.layer, -1);
  EXPECT_EQ(d.site, ModelSite::logits);
  EXPECT_GT(d.error, d.bound);

  // The same row, recomputed here: the first (program order) row out of bound, its largest
  // error, and the five largest logits on each side.
  const TransformerWeights w = make_weights(*s.model, s.layout);
  const auto ref = reference_transformer(s, w);
  const TransformerRun run = run_transformer(s, w, std::vector<const EngineInfo*>{mutant, mutant});
  const TransformerRow* row = nullptr;
  for (const TransformerRow& r : run.rows) {
    if (r.key == d.key) row = &r;
  }
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->origin.op, d.origin.op);
  EXPECT_EQ(d.top_got, top5(row->logits));
  EXPECT_EQ(d.top_expected, top5(ref.at(row->key).logits));
  EXPECT_DOUBLE_EQ(d.got, row->logits[static_cast<size_t>(d.dim)]);
  EXPECT_DOUBLE_EQ(d.expected, ref.at(row->key).logits[static_cast<size_t>(d.dim)]);
  for (size_t i = 0; i < row->logits.size(); ++i) {
    EXPECT_LE(std::fabs(row->logits[i] - ref.at(row->key).logits[i]), d.error);
  }
  const std::string text = describe_model_divergence(v);
  EXPECT_NE(text.find("logits: first diverging row " + to_string(d.key)), std::string::npos)
      << text;
  EXPECT_NE(text.find("top-5 got:"), std::string::npos);
  EXPECT_NE(text.find("top-5 expected:"), std::string::npos);
  EXPECT_NE(text.find("layer "), std::string::npos);

  // The prefix property passes the same divergence on: a logits row, no attention keys, and
  // a one-line summary that says so (not "q head 0, dim 5").
  const PropertyOutcome outcome = judge_model_property(Property::prefix, s, *mutant);
  ASSERT_TRUE(outcome.first);
  EXPECT_EQ(outcome.first->site, ModelSite::logits);
  EXPECT_EQ(outcome.first->key, d.key);
  EXPECT_EQ(outcome.first->dim, d.dim);
  EXPECT_EQ(outcome.first->top_got, d.top_got);
  EXPECT_LT(outcome.first->key_hi, outcome.first->key_lo);
  const std::string line = failure_line(outcome);
  EXPECT_NE(line.find(", logits, token id " + std::to_string(d.dim)), std::string::npos) << line;
  EXPECT_EQ(line.find("q head"), std::string::npos) << line;
}

// A bug that greedy decoding would not notice: on every row the honest and the buggy run
// pick the same argmax token, yet the logits already differ beyond tolerance, and
// judge_model fails the run.
TEST(ModelReport, LogitsCatchWhatGreedyTokensMiss) {
  const auto argmax = [](const std::vector<double>& x) {
    return std::max_element(x.begin(), x.end()) - x.begin();
  };
  const EngineInfo* honest = find_engine("paged");
  bool found = false;
  for (const EngineInfo* mutant : registry(true)) {
    for (const MutantCase& c : mutant_cases(*mutant, 3, 300)) {
      for (uint64_t model_seed = 1; model_seed <= 3 && !found; ++model_seed) {
        const Scenario s = with_model(c.attention, small_model(2, model_seed));
        const TransformerWeights w = make_weights(*s.model, s.layout);
        const std::vector<const EngineInfo*> good{honest, honest}, bad{honest, mutant};
        const TransformerRun a = run_transformer(s, w, good);
        const TransformerRun b = run_transformer(s, w, bad);
        if (!a.error.empty() || !b.error.empty() || a.rows.size() != b.rows.size()) continue;
        bool same = true;
        for (size_t r = 0; r < a.rows.size() && same; ++r) {
          same = argmax(a.rows[r].logits) == argmax(b.rows[r].logits);
        }
        if (!same) continue;
        const ModelVerdict v = judge_model(s, *honest, std::pair{1, mutant});
        if (!v.first_logits) continue;
        found = true;
        EXPECT_FALSE(v.pass);
        EXPECT_EQ(v.first_layer->layer, 1);
        EXPECT_EQ(v.first_logits->top_got[0].first, v.first_logits->top_expected[0].first);
        std::printf("greedy-blind bug: %s, generator seed %llu, model seed %llu\n",
                    mutant->name.c_str(), static_cast<unsigned long long>(c.seed),
                    static_cast<unsigned long long>(model_seed));
      }
      if (found) break;
    }
    if (found) break;
  }
  EXPECT_TRUE(found) << "no case where argmax agrees on every row but the logits diverge";
}

}  // namespace
}  // namespace kvfuzz
