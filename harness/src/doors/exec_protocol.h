// The messages of the engine protocol (docs/engine-protocol.md): the request lines kvfuzz
// writes and the checks of the reply lines it reads. One JSON object per line each way;
// every reply carries "ok". Shapes are checked to the last value, and every violation is
// an EngineError naming the request, the JSON path and what was expected, so that a user
// fixing an engine reads what to change, not a parser's complaint.
//
// Versions: 1, one process per engine (hello, the case's operations, end of file); 2 adds
// new_case, which starts another case in the same process, so that one process serves
// every case of a run. hello offers every version kvfuzz speaks and the engine answers the
// one it chose; an engine of version 1, which reads only "protocol", sees what it always
// saw.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kvfuzz/engine.h"
#include "kvfuzz/model_engine.h"

namespace kvfuzz::doors {

inline constexpr int kOldestProtocol = 1;
inline constexpr int kNewestProtocol = 2;
// The first version with new_case.
inline constexpr int kPersistentProtocol = 2;

// Every optional object hello's reply may leave out reads as the C++ interface's defaults.
struct HelloReply {
  int protocol = kOldestProtocol;  // the version the engine chose
  std::string name;
  EngineCapabilities capabilities;
  BitwiseClaims bitwise;
  EngineNumerics numerics;
  EngineSupports supports;
  // "whole_model": true: it runs whole models (ids in, logits out; docs/engine-protocol.md,
  // "Whole models"), so every later hello and new_case carries a "model".
  bool whole_model = false;
};

// What hello and new_case add for a whole-model engine: the model's sizes and seed, and the
// safetensors file holding its weights (doors/model_weights_file.h).
struct ModelRequest {
  ModelConfig model;
  std::string weights;
};

// hello for `config`, offering versions kOldestProtocol .. `newest`: "protocol" is always
// 1 (what an engine of version 1 checks), "protocols" lists them all (absent when only 1
// is offered: then hello is exactly version 1's).
std::string hello_request(const EngineConfig& config, int newest,
                          const std::optional<ModelRequest>& model = std::nullopt);
// Version 2: the next case, in the process that served the last one; the same fields as
// hello but "protocol" and "protocols".
std::string new_case_request(const EngineConfig& config,
                             const std::optional<ModelRequest>& model = std::nullopt);
// Throws EngineError, before reading any value, when a chunk's q, k or v does not hold
// exactly its tokens' values for `layout`.
std::string step_request(std::span<const ChunkIn> chunks, const Layout& layout);
// A whole model's step: each chunk's sequence and vocabulary ids.
std::string model_step_request(std::span<const ModelChunkIn> chunks);
std::string reset_request(int seq);
std::string truncate_request(int seq, int64_t keep);
std::string fork_request(int src, int dst);

// Each throws EngineError: for {"ok": false, "error": ...} the engine's own message, for
// anything else what the reply should have been. `protocol` is the version in use, named
// in messages.
//
// hello's reply, whose "protocol" must be one of kOldestProtocol .. `newest`.
HelloReply read_hello_reply(std::string_view line, int newest);
// new_case's reply: a hello reply of version 2, whose declarations must be those of the
// process's hello (`hello`): kvfuzz plans and judges every case by what the engine
// declared once, so a change is refused, naming what changed.
// `compare` false: read it as hello's reply is read, compared with nothing (the first case
// a whole model is given its model, after a hello that had none).
HelloReply read_new_case_reply(std::string_view line, const HelloReply& hello, bool compare = true);
void read_step_reply(std::string_view line, std::span<const ChunkIn> chunks, const Layout& layout,
                     std::span<ChunkOut> outs, int protocol);
// A whole model's step: per chunk "positions" (one per token) and "logits" (one array of
// `vocab` numbers per token).
void read_model_step_reply(std::string_view line, std::span<const ModelChunkIn> chunks,
                           size_t vocab, std::span<ModelChunkOut> outs, int protocol);
// reset, truncate and fork: {"ok": true}.
void read_done_reply(std::string_view line, std::string_view what, int protocol);

// The longest reply line a correct engine can need for these chunks (every value printed
// at its longest, with room to spare); a longer one is refused before it is parsed.
size_t step_reply_limit(std::span<const ChunkIn> chunks, const Layout& layout);
size_t model_step_reply_limit(std::span<const ModelChunkIn> chunks, size_t vocab);
inline constexpr size_t kSmallReplyLimit = size_t{1} << 20;

}  // namespace kvfuzz::doors
