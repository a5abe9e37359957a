// The two loops of the model-level reference's attention (reference_forward.cpp), over many
// keys at once: every key's score and the weighted sum of the values. Each result is the same
// sum of the same terms in the same order as the plain loop (a multiply, then an add to its
// own running sum, never fused), so the same bits whether the CPU lends AVX2 lanes (chosen at
// run time) or not (tests/model/test_model_lanes.cpp holds both to the plain loops).
//
// Why: the reference runs nine times a model-level check (once, then the tolerance's eight
// perturbed passes), and these two loops over keys were most of each pass.
#pragma once

#include <cstddef>

namespace kvfuzz::model {

// out[j] = sum_i q[i] * kt[i * stride + j], for the keys j in [0, count), summed in i order
// (kt: the keys of one head transposed, dimension-major, `stride` keys per dimension).
void key_dots(const double* q, size_t head_dim, const double* kt, size_t stride, size_t count,
              double* out);

// out[i] = sum_j w[j] * v[j * stride + i] for i in [0, value_dim), summed in j order from 0.
void weighted_values(const double* w, size_t count, const double* v, size_t stride,
                     size_t value_dim, double* out);

// The plain loops: what the two above compute, one value at a time.
void key_dots_plain(const double* q, size_t head_dim, const double* kt, size_t stride, size_t count,
                    double* out);
void weighted_values_plain(const double* w, size_t count, const double* v, size_t stride,
                           size_t value_dim, double* out);

}  // namespace kvfuzz::model
