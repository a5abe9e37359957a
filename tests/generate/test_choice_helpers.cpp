// The choice helpers of kvfuzz/choice_source.h, driven by a scripted choice source: which
// choices each draws, and what each answer means. Each keeps simple at lo: its outcome at
// the low end of its choice is its simplest.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kvfuzz/choice_source.h"

namespace kvfuzz {
namespace {

// Answers the given values in order (each must lie in the range asked for) and records the
// ranges asked for.
class ScriptedChoices final : public ChoiceSource {
 public:
  explicit ScriptedChoices(std::vector<int64_t> answers) : answers_(std::move(answers)) {}
  int64_t pick(int64_t lo, int64_t hi) override {
    ranges.emplace_back(lo, hi);
    if (next_ >= answers_.size()) throw std::logic_error("more choices than scripted");
    const int64_t answer = answers_[next_++];
    if (answer < lo || answer > hi) throw std::logic_error("scripted answer out of range");
    return answer;
  }
  bool all_used() const { return next_ == answers_.size(); }

  std::vector<std::pair<int64_t, int64_t>> ranges;

 private:
  std::vector<int64_t> answers_;
  size_t next_ = 0;
};

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

TEST(Rarely, TrueOnlyAtTheHighEnd) {
  for (int64_t answer = 0; answer < 4; ++answer) {
    ScriptedChoices c({answer});
    EXPECT_EQ(rarely(c, 4), answer == 3) << answer;
    EXPECT_EQ(c.ranges, (Ranges{{0, 3}}));
  }
}

TEST(Rarely, OnceInOneIsAlwaysAndZeroIsNeverWithoutAChoice) {
  ScriptedChoices once({0});
  EXPECT_TRUE(rarely(once, 1));
  EXPECT_EQ(once.ranges, (Ranges{{0, 0}}));
  ScriptedChoices never({});
  EXPECT_FALSE(rarely(never, 0));
  EXPECT_FALSE(rarely(never, -3));
  EXPECT_TRUE(never.ranges.empty());  // no choice drawn: large_one_in = 0 draws nothing
}

enum class Kind { x, y, z };

TEST(PickWeighted, OneChoiceOverTheWeightsSumInListOrder) {
  // Weights 3, 5, 2: answers 0..2 are x, 3..7 are y, 8..9 are z.
  const std::array<Kind, 10> expected{Kind::x, Kind::x, Kind::x, Kind::y, Kind::y,
                                      Kind::y, Kind::y, Kind::y, Kind::z, Kind::z};
  for (int64_t answer = 0; answer < 10; ++answer) {
    ScriptedChoices c({answer});
    EXPECT_EQ(pick_weighted<Kind>(c, {{Kind::x, 3}, {Kind::y, 5}, {Kind::z, 2}}),
              expected[static_cast<size_t>(answer)])
        << answer;
    EXPECT_EQ(c.ranges, (Ranges{{0, 9}}));
  }
}

TEST(PickWeighted, TheListOrderNotTheEnumOrderDecides) {
  ScriptedChoices c({0, 1});
  EXPECT_EQ(pick_weighted<Kind>(c, {{Kind::z, 1}, {Kind::x, 1}}), Kind::z);  // the low end
  EXPECT_EQ(pick_weighted<Kind>(c, {{Kind::z, 1}, {Kind::x, 1}}), Kind::x);
}

TEST(PickWeighted, AKindWithWeightZeroIsNeverPicked) {
  for (int64_t answer = 0; answer < 3; ++answer) {
    ScriptedChoices c({answer});
    EXPECT_NE(pick_weighted<Kind>(c, {{Kind::x, 1}, {Kind::y, 0}, {Kind::z, 2}}), Kind::y);
    EXPECT_EQ(c.ranges, (Ranges{{0, 2}}));
  }
}

TEST(Zigzag, TheIntegersNearestZeroFirst) {
  const std::array<int, 7> expected{0, 1, -1, 2, -2, 3, -3};
  for (int64_t n = 0; n < 7; ++n) EXPECT_EQ(zigzag(n), expected[static_cast<size_t>(n)]) << n;
}

TEST(PickOffset, OnTheEdgeThenOneAfterThenOneBefore) {
  ScriptedChoices c({0, 1, 2});
  EXPECT_EQ(pick_offset(c), 0);
  EXPECT_EQ(pick_offset(c), 1);
  EXPECT_EQ(pick_offset(c), -1);
  EXPECT_EQ(c.ranges, (Ranges{{0, 2}, {0, 2}, {0, 2}}));
}

TEST(Select, TheCandidatePairedWithTheKindAndNoChoice) {
  ScriptedChoices c({});
  EXPECT_EQ(select(Kind::x, {{Kind::x, 10}, {Kind::y, 20}, {Kind::z, 30}}), 10);
  EXPECT_EQ(select(Kind::z, {{Kind::x, 10}, {Kind::y, 20}, {Kind::z, 30}}), 30);
  EXPECT_EQ(select(Kind::y, {{Kind::z, 30}, {Kind::y, 20}}), 20);  // in any order
  EXPECT_EQ((select<Kind, double>(Kind::y, {{Kind::x, 0.5}, {Kind::y, 2.5}})), 2.5);
  EXPECT_THROW(select(Kind::y, {{Kind::x, 10}}), std::invalid_argument);
}

TEST(ChoiceSource, PickFromAndPickBoolDrawOneChoiceEach) {
  static constexpr std::array<int, 3> kOptions{7, 8, 9};
  ScriptedChoices c({0, 2, 0, 1});
  EXPECT_EQ(c.pick_from(kOptions), 7);  // the first is the simplest
  EXPECT_EQ(c.pick_from(kOptions), 9);
  EXPECT_FALSE(c.pick_bool());  // false at the low end
  EXPECT_TRUE(c.pick_bool());
  EXPECT_EQ(c.ranges, (Ranges{{0, 2}, {0, 2}, {0, 1}, {0, 1}}));
  EXPECT_TRUE(c.all_used());
}

}  // namespace
}  // namespace kvfuzz
