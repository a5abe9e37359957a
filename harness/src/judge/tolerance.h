// The tolerance rule, written once. Its derivation is in tolerance.cpp.
#pragma once

#include <cstdint>

#include "kvfuzz/dtype.h"

namespace kvfuzz {

struct ToleranceInputs {
  DType dtype = DType::f32;
  int visible_keys = 1;        // n: keys the row attends to
  int head_dim = 1;            // terms in each q.k dot product
  double max_abs_value = 0;    // M: max |v| over the visible keys of this row's kv head
  double max_score_terms = 0;  // S >= scale * max_j sum_d |q_d| |k_jd| over visible keys j;
                               // the reference passes scale * ||q|| * max_j ||k_j||
  bool rope = false;
  int64_t position = 0;  // absolute position of the query (RoPE angle error grows with it)
};

// Largest |engine - reference| an honest f32-accumulating engine may show on one value of
// the row. Never negative; zero when every visible value is zero.
double tolerance(const ToleranceInputs& in);

}  // namespace kvfuzz
