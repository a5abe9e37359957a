// C++ engines exported through the plugin ABI (kvfuzz/engine_plugin.h):
//
//   declares-everything  every field away from its default (tests/declarations_away.h):
//                        kvfuzz must read back through the C table what the C++ engine
//                        declared, field for field. A field added to a declaration and not
//                        carried by the ABI comes back at its default, and the test says
//                        which.
//   follows-the-dtype    the contiguous engine with its rows rounded to the layout's dtype,
//                        declaring that output per layout (numerics_of, ABI 5)
//   rounds-declares-f32  the same rows, declaring f32 output for every layout: wrong on an
//                        f16 or bf16 layout
#include <memory>
#include <span>
#include <vector>

#include "cpu/contiguous_engine.h"
#include "declarations_away.h"
#include "kvfuzz/dtype.h"
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

// The contiguous engine, its rows rounded to the layout's dtype; `declares` says whether
// its numerics say so (output: the layout's dtype) or claim f32 rows.
class RoundsToTheDtype final : public kvfuzz::Engine {
 public:
  RoundsToTheDtype(const kvfuzz::EngineConfig& config, bool declares)
      : inner_(config), dtype_(config.layout.dtype), declares_(declares) {}
  kvfuzz::EngineCapabilities capabilities() const override { return inner_.capabilities(); }
  kvfuzz::EngineNumerics numerics() const override {
    kvfuzz::EngineNumerics n;
    if (declares_) n.output = dtype_;
    return n;
  }
  void step(std::span<const kvfuzz::ChunkIn> chunks, std::span<kvfuzz::ChunkOut> outs) override {
    inner_.step(chunks, outs);
    for (kvfuzz::ChunkOut& out : outs) {
      for (float& value : out.out) value = kvfuzz::round_to_dtype(value, dtype_);
    }
  }
  void reset(int seq) override { inner_.reset(seq); }
  void truncate(int seq, int64_t keep) override { inner_.truncate(seq, keep); }
  void fork(int src, int dst) override { inner_.fork(src, dst); }

 private:
  kvfuzz::cpu::ContiguousEngine inner_;
  kvfuzz::DType dtype_;
  bool declares_;
};

kvfuzz::EngineInfo rounding(const char* name, bool declares) {
  kvfuzz::EngineInfo info;
  info.name = name;
  info.description = "The contiguous engine with its rows rounded to the layout's dtype.";
  info.make = [declares](const kvfuzz::EngineConfig& config) {
    return std::make_unique<RoundsToTheDtype>(config, declares);
  };
  return info;
}

}  // namespace

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  return kvfuzz::export_engines([] {
    kvfuzz::EngineInfo info;
    info.name = "declares-everything";
    info.description = "Declares every field away from its default.";
    info.make = [](const kvfuzz::EngineConfig&) { return std::make_unique<Declaring>(); };
    return std::vector<kvfuzz::EngineInfo>{info, rounding("follows-the-dtype", true),
                                           rounding("rounds-declares-f32", false)};
  });
}
