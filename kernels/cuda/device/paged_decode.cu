// paged_decode.cuh compiled for the device (nvcc, sm_90 and PTX).
#include "cuda/paged_decode.cuh"
