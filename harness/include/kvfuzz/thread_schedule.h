// The order in which a kernel launcher on the CPU (the SIMT launcher,
// kernels/cuda/simt/simt.h) runs a block's threads again after each barrier or warp
// operation: part of a scenario's placement (docs/fixture-format.md, "placement.threads"),
// so that a finding that depends on it replays. No arithmetic of an honest kernel depends
// on it; a kernel with a race may give other rows under another order.
//   thread            thread order
//   reversed          the last thread first
//   warp-interleaved  lane 0 of every warp, then lane 1 of every warp, ...
//   random            warps in a random order per pass (from `seed`, the block and the
//                     pass), each warp's lanes forwards or backwards
//   warp-ahead        thread order, but a warp whose warp operation completes runs on at
//                     once, to its next block barrier, before the warps after it
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvfuzz {

enum class ThreadOrder { thread, reversed, warp_interleaved, random, warp_ahead };

struct ThreadSchedule {
  ThreadOrder order = ThreadOrder::thread;
  uint64_t seed = 0;  // random only
  bool operator==(const ThreadSchedule&) const = default;
};

inline constexpr ThreadOrder kThreadOrders[] = {ThreadOrder::thread, ThreadOrder::reversed,
                                                ThreadOrder::warp_interleaved, ThreadOrder::random,
                                                ThreadOrder::warp_ahead};

constexpr std::string_view thread_order_name(ThreadOrder order) {
  switch (order) {
    case ThreadOrder::thread:
      return "thread";
    case ThreadOrder::reversed:
      return "reversed";
    case ThreadOrder::warp_interleaved:
      return "warp-interleaved";
    case ThreadOrder::random:
      return "random";
    case ThreadOrder::warp_ahead:
      return "warp-ahead";
  }
  return "?";
}

constexpr std::optional<ThreadOrder> parse_thread_order(std::string_view name) {
  for (const ThreadOrder order : kThreadOrders) {
    if (thread_order_name(order) == name) return order;
  }
  return std::nullopt;
}

}  // namespace kvfuzz
