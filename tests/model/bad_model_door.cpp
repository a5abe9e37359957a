// A plugin whose model door is wrong in one way (DOOR_DEFECT): kvfuzz must refuse it with
// one line naming what is wrong.
//   version   the door says version 99
//   unlisted  the door names an engine the C table does not
#include <memory>
#include <vector>

#include "kvfuzz/engine.h"
#include "kvfuzz/engine_plugin.h"
#include "kvfuzz/model_engine.h"

namespace {

std::vector<kvfuzz::EngineInfo> listed() {
  std::vector<kvfuzz::EngineInfo> engines{*kvfuzz::find_engine("model-cached")};
  return engines;
}

kvfuzz::ModelDoor door() {
  static std::vector<kvfuzz::EngineInfo> engines = [] {
    std::vector<kvfuzz::EngineInfo> all = listed();
    all.push_back(*kvfuzz::find_engine("model-cached"));
    all.back().name = "not-in-the-table";
    return all;
  }();
  kvfuzz::ModelDoor d;
  d.engines = &engines;
#if DOOR_DEFECT_VERSION
  d.version = 99;
#endif
  return d;
}

}  // namespace

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz_engine_plugin_table* kvfuzz_engine_plugin(void) {
  return kvfuzz::export_engines(listed);
}

extern "C" KVFUZZ_PLUGIN_EXPORT const kvfuzz::ModelDoor* kvfuzz_model_door(void) {
  static const kvfuzz::ModelDoor d = door();
  return &d;
}
