// The mutants only a kernel can have: the CUDA engine with one KernelFault
// (cuda/paged_kv.cuh) planted in the very kernels the honest engine runs.
#include <memory>

#include "cuda/engine/cuda_engine.h"
#include "cuda/paged_kv.cuh"
#include "mutants/mutants.h"

namespace kvfuzz::mutants {

namespace {

std::unique_ptr<Engine> with_fault(const EngineConfig& config, int fault, bool wide_pool = false) {
  cuda::CudaEngineOptions options = cuda::cuda_f32_options();
  options.faults = fault;
  options.wide_pool = wide_pool;
  return std::make_unique<cuda::CudaEngine>(config, options);
}

}  // namespace

std::unique_ptr<Engine> make_cuda_missing_tile_sync(const EngineConfig& config) {
  return with_fault(config, cuda::kFaultMissingTileSync);
}

std::unique_ptr<Engine> make_cuda_empty_split_unwritten(const EngineConfig& config) {
  return with_fault(config, cuda::kFaultEmptySplitUnwritten);
}

std::unique_ptr<Engine> make_cuda_half_warp_reduce(const EngineConfig& config) {
  return with_fault(config, cuda::kFaultHalfWarpReduce);
}

std::unique_ptr<Engine> make_cuda_split_bound_past_length(const EngineConfig& config) {
  return with_fault(config, cuda::kFaultSplitBoundPastLength);
}

std::unique_ptr<Engine> make_cuda_offset_32bit(const EngineConfig& config) {
  return with_fault(config, cuda::kFaultOffset32, /*wide_pool=*/true);
}

std::unique_ptr<Engine> make_cuda_race_unsynced_pages(const EngineConfig& config) {
  return with_fault(config, cuda::kFaultPagesUnsynced);
}

std::unique_ptr<Engine> make_cuda_barrier_per_branch(const EngineConfig& config) {
  return with_fault(config, cuda::kFaultBarrierPerBranch);
}

std::unique_ptr<Engine> make_cuda_race_merge_no_syncwarp(const EngineConfig& config) {
  return with_fault(config, cuda::kFaultMergeNoSyncwarp);
}

}  // namespace kvfuzz::mutants
