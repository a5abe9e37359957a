// chunked_prefill.cuh compiled for the device (nvcc, sm_90 and PTX).
#include "cuda/chunked_prefill.cuh"
