#include "generate/integer_limits.h"

#include <algorithm>

#include "kvfuzz/limits.h"

namespace kvfuzz {

int64_t page_elements(const Layout& layout) {
  return int64_t{layout.page_size} * layout.kv_heads *
         (int64_t{layout.head_dim} + layout.value_dim);
}

WidePoolChoices pick_wide_pool(ChoiceSource& c) {
  static constexpr int kWidths[] = {8, 15, 16};
  WidePoolChoices w;
  w.on = rarely(c, 8);
  w.width = kWidths[c.pick(0, 2)];
  w.extra = c.pick_int(0, 7);
  return w;
}

namespace {

// The pool the placement has now: its list's length, its pool_pages, or what the program
// needs.
int64_t current_pool(const Scenario& s, const Placement& p) {
  if (p.order == PageOrder::explicit_list) return static_cast<int64_t>(p.pages.size());
  return p.pool_pages ? *p.pool_pages : required_pool_pages(s);
}

}  // namespace

void apply_wide_pool(const WidePoolChoices& choices, const Scenario& scenario,
                     Placement& placement) {
  if (!choices.on) return;
  const int64_t fits =
      std::min<int64_t>(kWidePoolElements / std::max<int64_t>(1, page_elements(scenario.layout)),
                        limits::kMaxPoolPages);
  // The highest page handed out is 2^width + extra; a width that does not fit gives way to
  // the next narrower one.
  const auto pool_for = [&](int width) { return (int64_t{1} << width) + choices.extra + 1; };
  int width = choices.width;
  while (width > 8 && pool_for(width) > fits) width = width == 16 ? 15 : 8;
  const int64_t pool = std::max(pool_for(width), current_pool(scenario, placement));
  if (pool > fits) return;
  placement.order = PageOrder::reversed;
  placement.pages.clear();
  placement.pool_pages = static_cast<int>(pool);
}

}  // namespace kvfuzz
