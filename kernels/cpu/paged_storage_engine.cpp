#include "cpu/paged_storage_engine.h"

namespace kvfuzz::cpu {

PagedStorageEngine::PagedStorageEngine(const EngineConfig& config)
    : CpuEngine(config), kv_(layout(), sequences(), config.page_order, config.poison) {}

void PagedStorageEngine::reset(int seq) {
  check_seq(seq, "reset");
  kv_.release(seq);
}

}  // namespace kvfuzz::cpu
