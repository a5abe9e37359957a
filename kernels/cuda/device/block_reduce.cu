// block_reduce.cuh compiled for the device (nvcc, sm_90 and PTX): the same source the SIMT
// launcher runs in tests/cuda.
#include "cuda/block_reduce.cuh"
