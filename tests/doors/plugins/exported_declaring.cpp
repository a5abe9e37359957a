// A C++ engine exported through the plugin ABI (kvfuzz/engine_plugin.h) that declares every
// field away from its default (tests/declarations_away.h): kvfuzz must read back through
// the C table what the C++ engine declared, field for field. A field added to a
// declaration and not carried by the ABI comes back at its default, and the test says
// which.
#include <memory>
#include <span>
#include <vector>

#include "declarations_away.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/engine_plugin.h"

namespace {

class Declaring final : public kvfuzz::Engine {
 public:
  kvfuzz::EngineCapabilities capabilities() const override { return away_.capabilities; }
  kvfuzz::BitwiseClaims bitwise_claims() const override { return away_.bitwise; }
  kvfuzz::EngineNumerics numerics() const override { return away_.numerics; }
  kvfuzz::EngineSupports supports() const override { return away_.supports; }
  void step(std::span<const kvfuzz::ChunkIn>, std::span<kvfuzz::ChunkOut>) override {}
  void reset(int) override {}
  void truncate(int, int64_t) override {}
  void fork(int, int) override {}

 private:
  kvfuzz::EngineDeclarations away_ =
      kvfuzz::fieldwise::away_from_defaults<kvfuzz::EngineDeclarations>();
};

}  // namespace

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  return kvfuzz::export_engines([] {
    kvfuzz::EngineInfo info;
    info.name = "declares-everything";
    info.description = "Declares every field away from its default.";
    info.make = [](const kvfuzz::EngineConfig&) { return std::make_unique<Declaring>(); };
    return std::vector<kvfuzz::EngineInfo>{info};
  });
}
