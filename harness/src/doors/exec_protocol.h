// The messages of the engine protocol, version 1 (docs/engine-protocol.md): the request
// lines kvfuzz writes and the checks of the reply lines it reads. One JSON object per line
// each way; every reply carries "ok". Shapes are checked to the last value, and every
// violation is an EngineError naming the request, the JSON path and what was expected, so
// that a user fixing an engine reads what to change, not a parser's complaint.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvfuzz/engine.h"

namespace kvfuzz::doors {

inline constexpr int kProtocolVersion = 1;

// Every optional object hello's reply may leave out reads as the C++ interface's defaults.
struct HelloReply {
  std::string name;
  EngineCapabilities capabilities;
  BitwiseClaims bitwise;
  EngineNumerics numerics;
  EngineSupports supports;
};

std::string hello_request(const EngineConfig& config);
// Throws EngineError, before reading any value, when a chunk's q, k or v does not hold
// exactly its tokens' values for `layout`.
std::string step_request(std::span<const ChunkIn> chunks, const Layout& layout);
std::string reset_request(int seq);
std::string truncate_request(int seq, int64_t keep);
std::string fork_request(int src, int dst);

// Each throws EngineError: for {"ok": false, "error": ...} the engine's own message, for
// anything else what the reply should have been.
HelloReply read_hello_reply(std::string_view line);
void read_step_reply(std::string_view line, std::span<const ChunkIn> chunks, const Layout& layout,
                     std::span<ChunkOut> outs);
// reset, truncate and fork: {"ok": true}.
void read_done_reply(std::string_view line, std::string_view what);

// The longest reply line a correct engine can need for these chunks (every value printed
// at its longest, with room to spare); a longer one is refused before it is parsed.
size_t step_reply_limit(std::span<const ChunkIn> chunks, const Layout& layout);
inline constexpr size_t kSmallReplyLimit = size_t{1} << 20;

}  // namespace kvfuzz::doors
