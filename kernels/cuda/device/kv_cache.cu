// kv_cache.cuh compiled for the device (nvcc, sm_90 and PTX).
#include "cuda/kv_cache.cuh"
