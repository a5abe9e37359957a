// Narrow-integer limits (issue 15): now and then a page pool large enough that the pages a
// paged engine hands out, their slots and their K/V element offsets lie past 2^8, 2^15 or
// 2^16, handed out high pages first (the reversed order takes the pool's last page first),
// so that an engine keeping a block-table entry, a slot or an element offset in uint8_t,
// int16_t or uint16_t reads or writes the wrong place on the very first token.
//
// Memory stays small: a wide pool holds at most kWidePoolElements K and V elements (16 MiB
// in f32, an eighth of limits::kMaxPoolElements); a layout whose pages are too large for
// the drawn width gets the widest pool that fits under it (pages past 2^8 need at most
// 16,320 elements a page, past 2^15 at most 128, past 2^16 at most 64: page_size x kv_heads
// x (head_dim + value_dim)), and none when not even the 2^8 class fits.
#pragma once

#include <cstdint>

#include "kvfuzz/choice_source.h"
#include "kvfuzz/scenario.h"

namespace kvfuzz {

inline constexpr int64_t kWidePoolElements = int64_t{1} << 22;

// Off first; the width (8, then 15, then 16: the highest page index handed out is 2^width
// plus `extra`), and a few pages beyond it. Always three choices (fixed arity).
struct WidePoolChoices {
  bool on = false;
  int width = 8;
  int extra = 0;
};

WidePoolChoices pick_wide_pool(ChoiceSource& c);

// Replaces the placement's order and pool by a wide pool, reversed, when `choices` is on
// and some width fits the memory limit; otherwise leaves the placement as it is. The
// poison stays.
void apply_wide_pool(const WidePoolChoices& choices, const Scenario& scenario,
                     Placement& placement);

// K and V elements of one page of `layout`.
int64_t page_elements(const Layout& layout);

}  // namespace kvfuzz
