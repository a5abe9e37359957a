// One engine of a plugin, seen through the C++ interface (kvfuzz/engine.h): the runner,
// the properties and the shrinker drive it exactly like a built-in engine.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "doors/plugin_library.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/engine_abi.h"

namespace kvfuzz::doors {

class PluginEngine final : public Engine {
 public:
  // Calls the entry's create; throws EngineError with the plugin's message when it fails.
  // `entry` is kvfuzz's checked copy of the plugin's entry; the engine keeps a copy of its
  // function pointers and declarations.
  PluginEngine(std::shared_ptr<PluginLibrary> library, const PluginEntry& entry,
               const EngineConfig& config);
  ~PluginEngine() override;
  PluginEngine(const PluginEngine&) = delete;
  PluginEngine& operator=(const PluginEngine&) = delete;

  EngineCapabilities capabilities() const override;
  BitwiseClaims bitwise_claims() const override { return bitwise_; }
  EngineNumerics numerics() const override { return numerics_; }
  EngineSupports supports() const override { return supports_; }
  void step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) override;
  void reset(int seq) override;
  void truncate(int seq, int64_t keep) override;
  void fork(int src, int dst) override;

 private:
  // Runs one call that reports failure through its status and *error; throws EngineError
  // "plugin <what> failed: <message>".
  template <class Call>
  void call(const char* what, Call&& call);
  // ABI 5: the entry's numerics_of for this engine, checked as the table's entries are, and
  // refused when it changed anything but numerics.
  EngineNumerics numerics_of(const PluginEntry& entry);

  std::shared_ptr<PluginLibrary> library_;  // keeps the code loaded
  // Every capability and function pointer comes from here, never from the plugin's table.
  const kvfuzz_engine_api api_;
  const BitwiseClaims bitwise_;
  EngineNumerics numerics_;  // the entry's, or numerics_of's for this engine (ABI 5)
  const EngineSupports supports_;
  // The plugin may keep the config's page_order pointer for the engine's life.
  std::vector<int32_t> page_order_;
  int q_heads_ = 0, value_dim_ = 0;
  kvfuzz_engine* engine_ = nullptr;
  // Reused across steps.
  std::vector<kvfuzz_chunk_in> ins_;
  std::vector<kvfuzz_chunk_out> outs_;
};

}  // namespace kvfuzz::doors
