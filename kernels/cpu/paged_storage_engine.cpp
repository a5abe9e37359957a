#include "cpu/paged_storage_engine.h"

namespace kvfuzz::cpu {

PagedStorageEngine::PagedStorageEngine(const EngineConfig& config)
    : CpuEngine(config), kv_(layout(), sequences(), config.page_order, config.poison) {}

void PagedStorageEngine::reset(int seq) {
  check_seq(seq, "reset");
  kv_.release(seq);
}

void PagedStorageEngine::truncate(int seq, int64_t keep) {
  check_seq(seq, "truncate");
  kv_.truncate(seq, keep);
}

void PagedStorageEngine::fork(int src, int dst) {
  check_seq(src, "fork");
  check_seq(dst, "fork");
  kv_.fork(src, dst);
}

}  // namespace kvfuzz::cpu
