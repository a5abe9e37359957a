// plugin:PATH[:NAME] (kvfuzz/engine_spec.h): one entry of a checked plugin table, as kvfuzz
// copied it at load, as an EngineInfo whose factory makes PluginEngines.
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "doors/external_engines.h"
#include "doors/plugin_adapter.h"
#include "doors/plugin_library.h"
#include "kvfuzz/model_engine.h"

namespace kvfuzz::doors {

namespace {

// A plugin's whole-model engine, as kvfuzz holds it: the library stays loaded while it
// lives, and whatever the plugin's C++ code throws reaches kvfuzz as an EngineError of its
// own (the plugin's copy of kvfuzz's types is private to it, so only std::exception, from
// the shared C++ library, can be caught as itself).
class PluginModelEngine final : public ModelEngine {
 public:
  PluginModelEngine(std::shared_ptr<PluginLibrary> library, std::unique_ptr<ModelEngine> engine)
      : library_(std::move(library)), engine_(std::move(engine)) {}
  EngineCapabilities capabilities() const override {
    return guarded([&] { return engine_->capabilities(); });
  }
  EngineNumerics numerics() const override {
    return guarded([&] { return engine_->numerics(); });
  }
  EngineSupports supports() const override {
    return guarded([&] { return engine_->supports(); });
  }
  void step(std::span<const ModelChunkIn> chunks, std::span<ModelChunkOut> outs) override {
    guarded([&] { engine_->step(chunks, outs); });
  }
  void reset(int seq) override {
    guarded([&] { engine_->reset(seq); });
  }
  void truncate(int seq, int64_t keep) override {
    guarded([&] { engine_->truncate(seq, keep); });
  }
  void fork(int src, int dst) override {
    guarded([&] { engine_->fork(src, dst); });
  }

 private:
  template <class Body>
  static auto guarded(Body&& body) -> decltype(body()) {
    try {
      return body();
    } catch (const std::exception& e) {
      throw EngineError(e.what());
    } catch (...) {
      throw EngineError("the plugin threw a non-standard C++ exception");
    }
  }
  std::shared_ptr<PluginLibrary> library_;
  std::unique_ptr<ModelEngine> engine_;
};

std::string engine_names(const std::vector<PluginEntry>& engines) {
  std::string names;
  for (const PluginEntry& entry : engines) {
    names += (names.empty() ? "" : ", ") + entry.name;
  }
  return names;
}

const PluginEntry& select_entry(const std::string& spec, const std::vector<PluginEntry>& engines,
                                const std::optional<std::string>& name) {
  if (!name) {
    if (engines.size() == 1) return engines[0];
    throw EngineSpecError("--engine " + spec + ": the plugin has " +
                          std::to_string(engines.size()) + " engines; add :NAME, one of " +
                          engine_names(engines));
  }
  for (const PluginEntry& entry : engines) {
    if (*name == entry.name) return entry;
  }
  throw EngineSpecError("--engine " + spec + ": the plugin has no engine '" + *name +
                        "'; expected one of " + engine_names(engines));
}

}  // namespace

std::shared_ptr<const EngineInfo> plugin_engine(const std::string& spec, const std::string& path,
                                                const std::optional<std::string>& name) {
  std::shared_ptr<PluginLibrary> library = load_plugin_library(spec, path);
  const PluginEntry& entry = select_entry(spec, library->engines, name);
  auto info = std::make_shared<EngineInfo>();
  info->name = spec;
  info->description = entry.description;
  info->mutant = entry.api.mutant != 0;
  // kvfuzz's copy of the entry, by value: nothing here points into the plugin.
  info->make = [library, entry](const EngineConfig& config) -> std::unique_ptr<Engine> {
    return std::make_unique<PluginEngine>(library, entry, config);
  };
  // A whole-model engine of the model door: its factory is the plugin's own C++ function.
  if (const auto it = library->model_factories.find(entry.name);
      it != library->model_factories.end()) {
    if (library->whole_model_only.count(entry.name) > 0) info->make = nullptr;
    info->make_model = [library, factory = it->second](
                           const ModelEngineConfig& config) -> std::unique_ptr<ModelEngine> {
      std::unique_ptr<ModelEngine> made;
      try {
        made = factory(config);
      } catch (const std::exception& e) {
        throw EngineError(e.what());
      } catch (...) {
        throw EngineError("the plugin threw a non-standard C++ exception");
      }
      if (!made) return nullptr;
      return std::make_unique<PluginModelEngine>(library, std::move(made));
    };
  }
  return info;
}

}  // namespace kvfuzz::doors
