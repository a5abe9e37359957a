// Issue 15's narrow-integer and window corners (generate/integer_limits.h,
// generate/windows_at_edges.h): each occurs in the default scenarios at a stated rate, and
// a mutant that only such a scenario can expose dies on a hand-made one, passes where its
// bug cannot show, and dies on generated ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "generate/integer_limits.h"
#include "kvfuzz/choice_source.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/property.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {
namespace {

constexpr int kCases = 2000;

Scenario default_case(int index) {
  PrngChoiceSource choices(case_seed(1, index));
  return generate_scenario(choices);
}

const std::vector<Scenario>& default_cases() {
  static const std::vector<Scenario> cases = [] {
    std::vector<Scenario> out;
    for (int i = 0; i < kCases; ++i) out.push_back(default_case(i));
    return out;
  }();
  return cases;
}

// The pool a paged engine builds for `s` (engine_config's rule) and the first physical page
// it hands out: the last one under the reversed order, the list's first under an explicit
// one, page 0 otherwise.
int64_t pool_of(const Scenario& s) {
  const Placement& p = s.placement;
  if (p.order == PageOrder::explicit_list) return static_cast<int64_t>(p.pages.size());
  return p.pool_pages ? *p.pool_pages : required_pool_pages(s);
}

int64_t highest_page(const Scenario& s) {
  const Placement& p = s.placement;
  if (p.order == PageOrder::explicit_list) return *std::max_element(p.pages.begin(), p.pages.end());
  return p.order == PageOrder::reversed ? pool_of(s) - 1 : 0;
}

// The first page handed out is the highest only under the reversed order (high pages
// first): the classes below count what the first token of the program reaches.
struct Reach {
  int64_t page = 0;     // the first physical page handed out
  int64_t slot = 0;     // its first slot
  int64_t element = 0;  // the K element offset of that slot's last kv head
};

Reach first_reach(const Scenario& s) {
  Reach r;
  if (s.placement.order != PageOrder::reversed) return r;
  r.page = pool_of(s) - 1;
  r.slot = r.page * s.layout.page_size;
  r.element = (r.slot * s.layout.kv_heads + s.layout.kv_heads - 1) * s.layout.head_dim;
  return r;
}

double percent(int count) {
  return 100.0 * count / kCases;
}

TEST(WidePools, ReachPagesSlotsAndElementsPastEachWidthAtTheStatedRates) {
  int pages[3] = {0, 0, 0}, slots[3] = {0, 0, 0}, elements[3] = {0, 0, 0}, wide = 0;
  const int widths[3] = {8, 15, 16};
  for (const Scenario& s : default_cases()) {
    const Reach r = first_reach(s);
    for (int w = 0; w < 3; ++w) {
      const int64_t limit = int64_t{1} << widths[w];
      pages[w] += r.page >= limit;
      slots[w] += r.slot >= limit;
      elements[w] += r.element >= limit;
    }
    // A wide pool holds at most kWidePoolElements K and V elements (what a program needs
    // may be larger: no pool grows past both).
    const int64_t elements_held = pool_of(s) * page_elements(s.layout);
    if (highest_page(s) >= 256) {
      ++wide;
      EXPECT_LE(elements_held, std::max(kWidePoolElements, int64_t{required_pool_pages(s) + 4} *
                                                               page_elements(s.layout)))
          << s.layout.page_size;
    }
  }
  for (int w = 0; w < 3; ++w) {
    std::printf("past 2^%d: pages %.2f%%, slots %.2f%%, elements %.2f%% of %d default scenarios\n",
                widths[w], percent(pages[w]), percent(slots[w]), percent(elements[w]), kCases);
  }
  std::printf("highest page >= 256 (any order): %.2f%%\n", percent(wide));
  // Measured (seed 1, 2000 cases): pages past 2^8 11.85%, 2^15 3.5%, 2^16 1.05%; slots
  // past 2^16 3.05%. Before wide pools: 0.1%, 0, 0; 0.
  EXPECT_GE(percent(pages[0]), 8.0);
  EXPECT_GE(percent(pages[1]), 2.0);
  EXPECT_GE(percent(pages[2]), 0.5);
  EXPECT_GE(percent(slots[2]), 2.0);
}

// The longest run of consecutive one-token decodes of one sequence (within one epoch) whose
// window has slid past position 0: each such query's first visible key is p - window + 1 > 0.
int64_t longest_slid_decode_run(const Scenario& s) {
  if (!s.layout.window) return 0;
  const int64_t window = *s.layout.window;
  std::vector<int64_t> run(static_cast<size_t>(s.sequences), 0);
  std::vector<int> last_op(static_cast<size_t>(s.sequences), -2);
  int64_t best = 0;
  for_each_chunk(s, [&](const PlacedChunk& c) {
    const auto seq = static_cast<size_t>(c.seq);
    const bool slid = c.tokens->size() == 1 && c.start - window + 1 > 0;
    // A chunk of another kind, or a gap in the sequence's ops (a reset, truncate, fork or
    // a longer chunk in between) ends the run.
    run[seq] = slid && last_op[seq] == c.op - 1 ? run[seq] + 1 : (slid ? 1 : 0);
    last_op[seq] = c.op;
    best = std::max(best, run[seq]);
  });
  return best;
}

// Whether the window lies on, one below or one above a page, two pages, the default
// engine edges or the length of some chunk of two or more tokens.
bool window_at_an_edge(const Scenario& s) {
  if (!s.layout.window) return false;
  const int64_t w = *s.layout.window;
  const EngineEdges edges;
  std::vector<int64_t> edges_at{s.layout.page_size, 2 * s.layout.page_size, edges.tile_keys,
                                edges.partition_keys, edges.split_threshold};
  for (const Op& op : s.program) {
    for (const Chunk& c : op.batch()) {
      if (c.tokens.size() >= 2) edges_at.push_back(static_cast<int64_t>(c.tokens.size()));
    }
  }
  return std::any_of(edges_at.begin(), edges_at.end(),
                     [&](int64_t e) { return w >= e - 1 && w <= e + 1; });
}

TEST(WindowsAtEdges, LongDecodeRunsSlidePastWindowsAtEdgesAtTheStatedRates) {
  int windowed = 0, at_edge = 0, slid_page = 0, slid_two_periods = 0;
  for (const Scenario& s : default_cases()) {
    if (!s.layout.window) continue;
    ++windowed;
    const int64_t run = longest_slid_decode_run(s);
    const bool edge = window_at_an_edge(s);
    at_edge += edge;
    // The window's first key crossed a whole page: it landed on every slot of one.
    const bool page = edge && run >= s.layout.page_size;
    slid_page += page;
    slid_two_periods += page && run >= 2 * std::max<int64_t>(s.layout.page_size, 16);
  }
  std::printf(
      "windowed %.2f%%, window at an edge %.2f%%, and a slid decode run of a page or more "
      "%.2f%%, of two pages or partitions or more %.2f%% (of %d default scenarios)\n",
      percent(windowed), percent(at_edge), percent(slid_page), percent(slid_two_periods), kCases);
  // Measured (seed 1, 2000 cases): 13.25% and 7.85%; before the window-run step 7.8% and
  // 3.1% (the windows themselves, 34.55%, are drawn as before). The step's weight is 1 of
  // 18: at 2 the rates were 17.05% and 10.65%, but the runs took so much of the programs'
  // room that fork-then-rollback programs (truncate-shared-in-place) became 3x rarer.
  EXPECT_GE(percent(slid_page), 10.0);
  EXPECT_GE(percent(slid_two_periods), 5.5);
}

TEST(CornersA, TheGeneratorStaysDeterministic) {
  for (int i = 0; i < 200; ++i) EXPECT_EQ(default_case(i), default_cases()[static_cast<size_t>(i)]);
}

// ---- The mutants on hand-made scenarios: they die just past their width, and pass just
// below it. ----

// One sequence, MHA with one head, head_dim and value_dim 1, dyadic tokens; `pool` pages of
// `page_size`, reversed (the first token goes to page pool - 1).
Scenario narrow_scenario(int pool, int page_size, std::optional<int> window = std::nullopt,
                         std::vector<int> chunks = {3, 1, 1}) {
  Scenario s;
  s.name = "narrow";
  s.layout.q_heads = s.layout.kv_heads = 1;
  s.layout.head_dim = s.layout.value_dim = 1;
  s.layout.page_size = page_size;
  s.layout.window = window;
  int next = 0;
  for (int n : chunks) {
    std::vector<int> ids(static_cast<size_t>(n));
    for (int& id : ids) id = next++;
    s.program.push_back(Op::append(0, ids));
  }
  s.tokens = GeneratedTokens{7, next, Distribution::dyadic, false};
  s.placement.order = PageOrder::reversed;
  s.placement.pool_pages = pool;
  return s;
}

bool passes(const Scenario& s, const std::string& engine) {
  return judge_property(Property::prefix, s, *find_engine(engine)).pass;
}

TEST(NarrowMutants, DieJustPastTheirWidthAndPassJustBelowIt) {
  struct Case {
    std::string mutant;
    int page_size;
    int dies;    // a pool whose first page's first slot lies past the width
    int passes;  // the largest pool whose every slot stays below it
  };
  const std::vector<Case> cases = {
      {"block-table-u8", 1, 257, 256},       {"block-table-u8", 16, 257, 256},
      {"slot-offset-u16", 1, 65537, 65536},  {"slot-offset-u16", 16, 4097, 4096},
      {"slot-mapping-i16", 1, 32769, 32768}, {"slot-mapping-i16", 16, 2049, 2048},
  };
  for (const Case& c : cases) {
    const std::string what = c.mutant + ", pages of " + std::to_string(c.page_size);
    const Scenario dies = narrow_scenario(c.dies, c.page_size);
    const Scenario fine = narrow_scenario(c.passes, c.page_size);
    EXPECT_TRUE(passes(dies, "paged")) << what;
    EXPECT_FALSE(passes(dies, c.mutant)) << what << ", pool " << c.dies;
    EXPECT_TRUE(passes(fine, c.mutant)) << what << ", pool " << c.passes;
  }
}

TEST(WindowMutant, DiesWhenADecodesWindowStartsOnAPagesLastSlot) {
  // Window 4 on pages of 4: a prefill of 4, then decodes at 4, 5, 6, ...; the decode at 6
  // starts its window at 3, the last slot of page 0.
  const Scenario dies = narrow_scenario(8, 4, 4, {4, 1, 1, 1, 1});
  EXPECT_TRUE(passes(dies, "paged"));
  EXPECT_FALSE(passes(dies, "window-evicts-early"));
  const PropertyOutcome out =
      judge_property(Property::prefix, dies, *find_engine("window-evicts-early"));
  ASSERT_TRUE(out.first.has_value());
  EXPECT_EQ(out.first->key.pos, 6);
  // Decodes that stop before it (the windows start at 1 and 2), or the same tokens in one
  // chunk (not the decode path), pass.
  EXPECT_TRUE(passes(narrow_scenario(8, 4, 4, {4, 1, 1}), "window-evicts-early"));
  EXPECT_TRUE(passes(narrow_scenario(8, 4, 4, {8}), "window-evicts-early"));
}

// ---- The mutants on generated scenarios. ----

// Of the first `n` default scenarios, how many `engine` fails.
int killed(const std::string& engine, int n) {
  int count = 0;
  for (int i = 0; i < n; ++i) count += !passes(default_cases()[static_cast<size_t>(i)], engine);
  return count;
}

TEST(CornersA, EachMutantDiesOnGeneratedScenariosAtTheStatedRate) {
  struct Rate {
    std::string mutant;
    int at_least;  // of the first 500 default scenarios
  };
  // Measured (seed 1): 62, 19, 20 and 78; before wide pools and the window-run step 0, 0,
  // 0 and 51.
  const std::vector<Rate> rates = {{"block-table-u8", 40},
                                   {"slot-offset-u16", 9},
                                   {"slot-mapping-i16", 9},
                                   {"window-evicts-early", 60}};
  for (const Rate& r : rates) {
    const int k = killed(r.mutant, 500);
    std::printf("%s: killed by %d of 500 default scenarios\n", r.mutant.c_str(), k);
    EXPECT_GE(k, r.at_least) << r.mutant;
  }
}

}  // namespace
}  // namespace kvfuzz
