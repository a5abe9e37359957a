// The placement of one scenario's pages (placement.h): the choices, a shuffle that shrinks
// toward identity, and the page list resolved once the program is known.
#include "generate/placement.h"

#include <array>
#include <climits>
#include <numeric>
#include <utility>
#include <vector>

#include "kvfuzz/generator.h"

namespace kvfuzz {

PlacementChoices pick_placement(ChoiceSource& c, bool model_level) {
  PlacementChoices p;
  static constexpr std::array kPoisons{Poison::nan, Poison::pos_inf, Poison::neg_inf, Poison::huge};
  p.poison = c.pick_from(kPoisons);
  const bool spare = rarely(c, 4);
  const int pages = c.pick_int(1, 4);
  p.spare = spare ? pages : 0;
  p.order = pick_weighted<OrderKind>(c, {{OrderKind::identity, 3},
                                         {OrderKind::reversed, 2},
                                         {OrderKind::shuffled, 2},
                                         {OrderKind::interleaved, 2}});
  // Not at model level (yet): there no choice is drawn for it, so model scenarios stay as
  // they were.
  if (!model_level) p.wide = pick_wide_pool(c);
  return p;
}

ThreadSchedule pick_thread_schedule(ChoiceSource& c) {
  ThreadSchedule t;
  t.order = pick_weighted<ThreadOrder>(c, {{ThreadOrder::thread, 3},
                                           {ThreadOrder::reversed, 1},
                                           {ThreadOrder::warp_interleaved, 1},
                                           {ThreadOrder::random, 2},
                                           {ThreadOrder::warp_ahead, 1}});
  const auto seed = static_cast<uint64_t>(c.pick(0, INT32_MAX));  // drawn always: fixed arity
  if (t.order == ThreadOrder::random) t.seed = seed;
  return t;
}

namespace {

// Fisher-Yates with the swap partner counted back from i: the low end swaps nothing, so a
// shuffle shrinks toward identity.
std::vector<int> shuffled_pages(ChoiceSource& c, int pool) {
  std::vector<int> pages(static_cast<size_t>(pool));
  std::iota(pages.begin(), pages.end(), 0);
  for (int i = pool - 1; i > 0; --i) {
    std::swap(pages[static_cast<size_t>(i)], pages[static_cast<size_t>(i - c.pick_int(0, i))]);
  }
  return pages;
}

}  // namespace

Placement resolve_pages(ChoiceSource& c, const PlacementChoices& choices, const Scenario& s) {
  Placement p;
  p.poison = choices.poison;
  const int pool = required_pool_pages(s) + choices.spare;
  switch (choices.order) {
    case OrderKind::identity:
    case OrderKind::reversed:
      p.order = choices.order == OrderKind::identity ? PageOrder::identity : PageOrder::reversed;
      if (choices.spare > 0) p.pool_pages = pool;
      break;
    case OrderKind::shuffled:
      p.order = PageOrder::explicit_list;
      p.pages = shuffled_pages(c, pool);
      break;
    case OrderKind::interleaved:
      p.order = PageOrder::explicit_list;
      p.pages = interleaved_page_order(s, pool);
  }
  apply_wide_pool(choices.wide, s, p);
  return p;
}

}  // namespace kvfuzz
