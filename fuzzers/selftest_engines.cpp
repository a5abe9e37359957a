#include "selftest_engines.h"

#include <csignal>
#include <memory>
#include <thread>
#include <vector>

namespace kvfuzz::fuzz {

namespace {

enum class Misbehaviour { crash, hang };

class MisbehavingEngine final : public Engine {
 public:
  MisbehavingEngine(std::unique_ptr<Engine> inner, Misbehaviour misbehaviour)
      : inner_(std::move(inner)), misbehaviour_(misbehaviour) {}
  EngineCapabilities capabilities() const override { return inner_->capabilities(); }
  void step(std::span<const ChunkIn> chunks, std::span<ChunkOut> outs) override {
    inner_->step(chunks, outs);
  }
  void reset(int seq) override { inner_->reset(seq); }
  void fork(int src, int dst) override { inner_->fork(src, dst); }
  void truncate(int seq, int64_t keep) override {
    if (misbehaviour_ == Misbehaviour::crash) std::raise(SIGSEGV);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    inner_->truncate(seq, keep);
  }

 private:
  std::unique_ptr<Engine> inner_;
  Misbehaviour misbehaviour_;
};

std::vector<EngineInfo> make_selftest_engines() {
  std::vector<EngineInfo> engines;
  for (auto [name, misbehaviour] : {std::pair{"selftest-crash", Misbehaviour::crash},
                                    std::pair{"selftest-hang", Misbehaviour::hang}}) {
    const Misbehaviour m = misbehaviour;
    engines.push_back(EngineInfo{
        name, "contiguous, but truncate() misbehaves (a campaign self-test)", true,
        [m](const EngineConfig& config) {
          return std::make_unique<MisbehavingEngine>(find_engine("contiguous")->make(config), m);
        }});
  }
  return engines;
}

}  // namespace

const EngineInfo* find_selftest_engine(std::string_view name) {
  static const std::vector<EngineInfo> engines = make_selftest_engines();
  for (const EngineInfo& e : engines) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

}  // namespace kvfuzz::fuzz
