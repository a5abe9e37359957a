// The model-level bounds cache (model/model_tolerance.h): the K perturbed reference passes are
// computed once per (model, layout less page size, streams, numerics) and shared by the
// engines and the variants that have them; a hit gives exactly the bounds a fresh computation
// gives, and verdicts are the same with the cache as without.
#include <gtest/gtest.h>

#include "judge/property_variants.h"
#include "kvfuzz/generator.h"
#include "model/model_check.h"
#include "model/model_tolerance.h"
#include "model/reference_forward.h"
#include "model/transformer.h"

namespace kvfuzz {
namespace {

Scenario model_scenario(uint64_t seed) {
  GeneratorOptions options;
  options.model = ModelOptions{};
  options.typical_head_dim = 8;
  options.max_head_dim = 16;
  PrngChoiceSource choices(seed);
  return generate_scenario(choices, options);
}

std::map<RowKey, model::RowBounds> bounds_of(const Scenario& s,
                                             const model::ModelNumerics& numerics = {}) {
  const TransformerWeights w = make_weights(*s.model, s.layout);
  return model::model_bounds(s, w, reference_transformer(s, w), numerics);
}

void expect_same(const std::map<RowKey, model::RowBounds>& a,
                 const std::map<RowKey, model::RowBounds>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j) {
    ASSERT_EQ(i->first, j->first);
    EXPECT_EQ(i->second.logits, j->second.logits);
    EXPECT_EQ(i->second.attention, j->second.attention);
    EXPECT_EQ(i->second.hidden, j->second.hidden);
  }
}

TEST(ModelBoundsCache, AHitGivesTheFreshBoundsAndTheKeyHoldsWhatTheyDependOn) {
  model::clear_model_bounds_cache();
  const Scenario s = model_scenario(5);
  const auto first = bounds_of(s);
  const auto second = bounds_of(s);
  EXPECT_EQ(model::model_bounds_cache_stats().misses, 1);
  EXPECT_EQ(model::model_bounds_cache_stats().hits, 1);
  expect_same(first, second);
  model::clear_model_bounds_cache();
  expect_same(bounds_of(s), first);  // computed afresh: the same

  // Another page size shares; other numerics or another model seed do not, and are right.
  Scenario paged = s;
  paged.layout.page_size = s.layout.page_size == 1 ? 2 : 1;
  bounds_of(paged);
  EXPECT_EQ(model::model_bounds_cache_stats().hits, 1);
  model::ModelNumerics numerics;
  numerics.numerics.p = DType::f16;
  const auto declared = bounds_of(s, numerics);
  Scenario reseeded = s;
  reseeded.model->seed += 1;
  const auto other_model = bounds_of(reseeded);
  EXPECT_EQ(model::model_bounds_cache_stats().misses, 3);
  model::clear_model_bounds_cache();
  expect_same(bounds_of(s, numerics), declared);
  expect_same(bounds_of(reseeded), other_model);
}

TEST(ModelBoundsCache, EnginesAndVariantsShareThePerturbedPasses) {
  const std::vector<const EngineInfo*> engines{find_engine("contiguous"), find_engine("paged"),
                                               find_engine("flash")};
  for (const EngineInfo* e : engines) ASSERT_NE(e, nullptr);
  for (uint64_t seed = 10; seed < 14; ++seed) {
    const Scenario s = model_scenario(seed);
    model::clear_model_bounds_cache();
    std::vector<ModelVerdict> shared;
    for (const EngineInfo* engine : engines) shared.push_back(judge_model(s, *engine));
    // Three engines with the same numerics: one computation.
    EXPECT_EQ(model::model_bounds_cache_stats().misses, 1) << s.name;
    EXPECT_EQ(model::model_bounds_cache_stats().hits, 2) << s.name;
    // The schedule variant has the same streams: a hit too.
    const std::vector<ScenarioVariant> variants = property_variants(Property::schedule, s);
    for (const ScenarioVariant& v : variants) judge_model(v.scenario, *engines[0]);
    EXPECT_EQ(model::model_bounds_cache_stats().misses, 1) << s.name;
    // Verdicts as without the cache.
    for (size_t i = 0; i < engines.size(); ++i) {
      model::clear_model_bounds_cache();
      const ModelVerdict alone = judge_model(s, *engines[i]);
      EXPECT_EQ(alone.pass, shared[i].pass);
      EXPECT_EQ(alone.worst_logits_ratio, shared[i].worst_logits_ratio);
      EXPECT_EQ(alone.worst_layer_ratio, shared[i].worst_layer_ratio);
    }
  }
}

}  // namespace
}  // namespace kvfuzz
