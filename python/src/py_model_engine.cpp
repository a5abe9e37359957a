#include "py_model_engine.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "arrays.h"
#include "kvfuzz/model_engine.h"
#include "python_types.h"

namespace nb = nanobind;

namespace kvfuzz::python {

namespace {

// A chunk's ids as a new int32 numpy array that owns them (the engine may keep it).
nb::object ids_array(std::span<const int> ids) {
  auto* copy = new int32_t[ids.size()];
  std::copy(ids.begin(), ids.end(), copy);
  nb::capsule owner(copy, [](void* p) noexcept { delete[] static_cast<int32_t*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, int32_t, nb::ndim<1>>(copy, {ids.size()}, owner));
}

class PythonModelEngine final : public ModelEngine {
 public:
  PythonModelEngine(nb::object engine, const ModelEngineConfig& config,
                    std::shared_ptr<IdleEngines> idle)
      : engine_(std::move(engine)),
        vocab_(static_cast<size_t>(std::max(0, config.model.vocab))),
        declared_(read_declarations(engine_, config.engine.layout)),
        convert_(calling_python(
            "the engine's inputs",
            [&] {
              return nb::module_::import_("kvfuzz._inputs").attr("input_converter")(engine_);
            })),
        idle_(std::move(idle)) {}

  ~PythonModelEngine() override { release_engine(engine_, idle_.get()); }
  PythonModelEngine(const PythonModelEngine&) = delete;
  PythonModelEngine& operator=(const PythonModelEngine&) = delete;

  EngineCapabilities capabilities() const override { return declared_.capabilities; }
  EngineNumerics numerics() const override { return declared_.numerics; }
  EngineSupports supports() const override { return declared_.supports; }

  void step(std::span<const ModelChunkIn> chunks, std::span<ModelChunkOut> outs) override {
    nb::list list;
    for (const ModelChunkIn& c : chunks) {
      ModelChunk chunk{c.seq, static_cast<int>(c.ids.size()), ids_array(c.ids)};
      if (!convert_.is_none()) {  // the engine's `inputs` (kvfuzz/_inputs.py): torch tensors
        calling_python("making the ids a torch tensor (the engine's `inputs`)",
                       [&] { chunk.ids = convert_(chunk.ids); });
      }
      list.append(std::move(chunk));
    }
    const nb::object results = calling_python("step", [&] { return engine_.attr("step")(list); });
    const auto pairs = step_pairs(results, chunks.size(), "logits");
    for (size_t i = 0; i < chunks.size(); ++i) {
      const std::string what = "step's result " + std::to_string(i);
      const size_t tokens = chunks[i].ids.size();
      read_positions(pairs[i].first, tokens, what + "'s positions", outs[i].positions);
      read_output(pairs[i].second, {tokens, vocab_}, what + "'s logits", outs[i].logits);
    }
  }

  void reset(int seq) override {
    calling_python("reset", [&] { engine_.attr("reset")(seq); });
  }
  // Called only when its capabilities announce them (apply_history_op).
  void truncate(int seq, int64_t keep) override {
    calling_python("truncate", [&] { engine_.attr("truncate")(seq, keep); });
  }
  void fork(int src, int dst) override {
    calling_python("fork", [&] { engine_.attr("fork")(src, dst); });
  }

 private:
  nb::object engine_;
  size_t vocab_;
  doors::HelloReply declared_;
  nb::object convert_;  // None, or what makes each ids array what the engine's `inputs` asks
  std::shared_ptr<IdleEngines> idle_;
};

}  // namespace

ModelEngineFactory python_model_factory(std::shared_ptr<nb::object> factory,
                                        std::shared_ptr<IdleEngines> idle) {
  return [factory, idle](const ModelEngineConfig& config) -> std::unique_ptr<ModelEngine> {
    nb::object engine = engine_object(*factory, *idle, nb::cast(config));
    return std::make_unique<PythonModelEngine>(std::move(engine), config, idle);
  };
}

}  // namespace kvfuzz::python
