// The idle processes of one exec: command that speaks protocol version 2, so that one
// process serves many cases (docs/engine-protocol.md, "Lifecycle"): an engine that ends
// cleanly gives its process back, the next engine made for the same command takes it
// and starts its case with new_case instead of a process start and hello. Properties'
// variants, shrink candidates and check's cases thus pay the start once.
//
// Only a process that is fit for another case is kept: none whose exchange failed (an
// engine error of any kind, a timeout, a crash, a malformed reply) and none that exited
// since; a process found dead when taken is ended and the next one tried.
//
// Across fork(): the processes belong to the kvfuzz process that started them (their
// pipes and pids are its own; LineProcess records it). A pool inherited by a forked child
// (a worker of check) hands none of them out there, since none is usable() in the child:
// the child drops its copies without signalling the processes, and starts its own.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "doors/exec_process.h"
#include "doors/exec_protocol.h"

namespace kvfuzz::doors {

// A process and what it declared in its hello: every new_case must declare the same.
struct ExecSession {
  std::unique_ptr<LineProcess> process;
  HelloReply hello;
  // The declarations in `hello` are a whole model's answer to a hello without a model (the
  // first one, sent before kvfuzz knew): only "whole_model" counts, and the first answer
  // that was given a model replaces them instead of being compared with them.
  bool before_model = false;
};

class ExecPool {
 public:
  // Engines are made one at a time (a property's variants run one after the other), so two
  // idle processes cover a run; more would hold memory (a model, a GPU context) for nothing.
  static constexpr size_t kMostIdle = 2;

  ExecPool() = default;
  ExecPool(const ExecPool&) = delete;
  ExecPool& operator=(const ExecPool&) = delete;

  // The idle process last given back that is still usable, or nothing.
  std::optional<ExecSession> take();
  // Keeps `session` for the next take() when it is usable and fewer than kMostIdle are
  // idle; ends it otherwise.
  void give(ExecSession session);

 private:
  std::mutex mutex_;
  std::vector<ExecSession> idle_;
};

}  // namespace kvfuzz::doors
