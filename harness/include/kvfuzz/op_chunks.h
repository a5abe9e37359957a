// The chunks one program op feeds the engines, for the loops that feed a whole program
// (the runner, the model's cached forward).
#pragma once

#include <vector>

#include "kvfuzz/scenario.h"

namespace kvfuzz {

// Op::batch() copies every token list; a step's chunks are used where they are, and an
// append becomes one chunk in a buffer reused from op to op.
class OpChunks {
 public:
  // The op's chunks; valid until the next call or until the op changes. Reset, truncate
  // and fork feed none.
  const std::vector<Chunk>& of(const Op& op) {
    if (op.kind != OpKind::append) return op.chunks;
    single_[0].seq = op.seq;
    single_[0].tokens = op.tokens;
    return single_;
  }

 private:
  std::vector<Chunk> single_ = std::vector<Chunk>(1);
};

}  // namespace kvfuzz
