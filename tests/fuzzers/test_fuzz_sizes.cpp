// Size follows the input (fuzzers/fuzz_sizes.h): the bounds grow with the input's length
// and stop at the generator's defaults; a short input's scenario stays inside them and is
// much cheaper than a long one's; the same bytes give the same scenario; and short inputs
// still reach every cache-state event and layout feature that full-size ones reach.
// Decodes as the fuzz targets do (FuzzedChoiceSource), without running an engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "fuzz_choices.h"
#include "fuzz_sizes.h"
#include "generate/events.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/dtype.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/prng.h"

namespace kvfuzz::fuzz {
namespace {

// Inputs per length: enough that every event occurs many times at full size.
constexpr int kInputs = 1500;

std::vector<uint8_t> random_bytes(Xoshiro256& rng, size_t size) {
  std::vector<uint8_t> bytes(size);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng.between(0, 255));
  return bytes;
}

Scenario decode(const std::vector<uint8_t>& bytes) {
  FuzzedChoiceSource choices(bytes.data(), bytes.size());
  return generate_scenario(choices, input_sized_options(GeneratorOptions{}, bytes.size()));
}

TEST(InputSizedOptions, GrowWithTheInputUpToTheDefaultsAndNeverPastTheOptions) {
  const GeneratorOptions full;
  const GeneratorOptions empty = input_sized_options(full, 0);
  EXPECT_EQ(empty.max_sequences, 2);
  EXPECT_EQ(empty.max_ops, 4);
  EXPECT_EQ(empty.max_q_heads, 4);
  EXPECT_EQ(empty.max_head_dim, 8);
  // One partition past the split threshold: 32 + 16 + 1.
  EXPECT_EQ(empty.max_epoch_tokens, full.edges.split_threshold + full.edges.partition_keys + 1);
  GeneratorOptions previous = empty;
  for (size_t size = 1; size <= kFullSizeBytes + 8; ++size) {
    const GeneratorOptions o = input_sized_options(full, size);
    for (auto field :
         {&GeneratorOptions::max_sequences, &GeneratorOptions::max_ops,
          &GeneratorOptions::max_q_heads, &GeneratorOptions::max_head_dim,
          &GeneratorOptions::max_epoch_tokens, &GeneratorOptions::typical_q_heads,
          &GeneratorOptions::typical_head_dim, &GeneratorOptions::typical_epoch_tokens}) {
      EXPECT_GE(o.*field, previous.*field) << size;
      EXPECT_LE(o.*field, full.*field) << size;
    }
    previous = o;
  }
  PrngChoiceSource sized_choices(1);
  PrngChoiceSource full_choices(1);
  EXPECT_EQ(
      write_fixture(generate_scenario(sized_choices, input_sized_options(full, kFullSizeBytes))),
      write_fixture(generate_scenario(full_choices, full)));
  // Options below a floor stay as they are: an engine's own limits win.
  GeneratorOptions narrow;
  narrow.max_q_heads = 2;
  narrow.max_sequences = 1;
  narrow.max_head_dim = 4;
  const GeneratorOptions o = input_sized_options(narrow, 0);
  EXPECT_EQ(o.max_q_heads, 2);
  EXPECT_EQ(o.max_sequences, 1);
  EXPECT_EQ(o.max_head_dim, 4);
  GeneratorOptions model;
  model.model = ModelOptions{};
  EXPECT_EQ(input_sized_options(model, 0).model->max_layers, 1);
  EXPECT_EQ(input_sized_options(model, kFullSizeBytes).model->max_layers,
            ModelOptions{}.max_layers);
}

TEST(InputSizedOptions, AShortInputsScenarioStaysInsideItsBoundsAndIsCheap) {
  Xoshiro256 rng(15);
  int64_t short_cost = 0;
  int64_t long_cost = 0;
  for (int i = 0; i < kInputs; ++i) {
    for (size_t size : {size_t{0}, size_t{4}, size_t{8}, size_t{16}, size_t{32}}) {
      const std::vector<uint8_t> bytes = random_bytes(rng, size);
      const Scenario s = decode(bytes);
      const GeneratorOptions o = input_sized_options(GeneratorOptions{}, size);
      ASSERT_LE(s.sequences, o.max_sequences) << size;
      ASSERT_LE(s.layout.q_heads, o.max_q_heads) << size;
      ASSERT_LE(s.layout.head_dim, o.max_head_dim) << size;
      ASSERT_LE(s.layout.value_dim, o.max_head_dim) << size;
      ASSERT_LE(max_epoch_length(s), o.max_epoch_tokens) << size;
      if (size == 8) short_cost += attention_cost(s);
    }
    long_cost += attention_cost(decode(random_bytes(rng, kFullSizeBytes)));
  }
  // Measured: 51x, then 9.4x after issue 15's generator corners (the split-edge tail and the
  // window runs take short inputs' contexts to the split threshold); 5x asserted.
  EXPECT_GT(long_cost, 5 * short_cost)
      << "8-byte inputs cost " << short_cost << ", 64-byte inputs " << long_cost;
}

TEST(InputSizedOptions, TheSameBytesGiveTheSameScenario) {
  Xoshiro256 rng(7);
  for (size_t size : {size_t{0}, size_t{3}, size_t{17}, size_t{63}, size_t{64}, size_t{500}}) {
    const std::vector<uint8_t> bytes = random_bytes(rng, size);
    EXPECT_EQ(write_fixture(decode(bytes)), write_fixture(decode(bytes))) << size;
  }
  // One byte more is another scenario (its hash, and so its PRNG tail, differ).
  const std::vector<uint8_t> a = random_bytes(rng, 8);
  std::vector<uint8_t> b = a;
  b.push_back(0);
  EXPECT_NE(write_fixture(decode(a)), write_fixture(decode(b)));
}

// What one scenario shows: its cache-state events, and layout features beside them.
std::set<std::string> features_of(const Scenario& s) {
  std::set<std::string> found;
  const EventCounts counts = count_events(s, EngineEdges{});
  for (int e = 0; e < kEventCount; ++e) {
    if (counts.counts[static_cast<size_t>(e)] > 0) {
      found.insert(std::string(event_name(static_cast<Event>(e))));
    }
  }
  const Layout& l = s.layout;
  if (l.rope_theta) found.insert("rope");
  if (l.window) found.insert("window");
  if (l.kv_heads == 1 && l.q_heads > 1) found.insert("mqa");
  if (l.kv_heads > 1 && l.group() > 1) found.insert("gqa");
  if (l.group() > 2) found.insert("gqa group > 2");
  found.insert("dtype " + std::string(dtype_name(l.dtype)));
  if (s.placement.order != PageOrder::identity) found.insert("page order not identity");
  for (const Op& op : s.program) found.insert("op " + std::to_string(static_cast<int>(op.kind)));
  return found;
}

TEST(InputSizedOptions, ShortInputsReachEveryFeatureFullSizeOnesReach) {
  Xoshiro256 rng(3);
  std::set<std::string> full;
  std::set<std::string> short_inputs;
  for (int i = 0; i < kInputs; ++i) {
    const std::set<std::string> f = features_of(decode(random_bytes(rng, kFullSizeBytes)));
    full.insert(f.begin(), f.end());
    const std::set<std::string> s = features_of(decode(random_bytes(rng, 8)));
    short_inputs.insert(s.begin(), s.end());
  }
  // Every event, and rope, window, MQA, GQA, a group past 2, three dtypes, a page order
  // and five op kinds: the test would pass vacuously if full-size inputs reached little.
  EXPECT_EQ(full.size(), static_cast<size_t>(kEventCount) + 14);
  for (const std::string& feature : full) {
    EXPECT_TRUE(short_inputs.contains(feature)) << feature << " not reached by 8-byte inputs";
  }
}

}  // namespace
}  // namespace kvfuzz::fuzz
