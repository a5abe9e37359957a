// kvfuzz's storage formats as ggml types, for the two engines of this adapter that make
// ggml caches (ggml_attention.cpp's tensors, llama_engine.cpp's llama_context_params).
// Apart from ggml_attention.h, whose includers do not all see ggml.h.
#pragma once

#include "ggml.h"
#include "kvfuzz/dtype.h"
#include "kvfuzz/kv_format.h"

namespace kvfuzz::ggml_attention {

// The ggml type a cache of this format and dtype holds (kv_format.h's block formats are
// ggml's own); EngineError for a format ggml has no type of.
ggml_type cache_type(const KvFormat& format, DType dtype);

}  // namespace kvfuzz::ggml_attention
