// The tiny transformer's weights (kernels/model/transformer.h: make_weights) as a safetensors
// file, so that a whole-model engine of the exec door, in any language, loads the very
// weights the judge's reference uses (docs/engine-protocol.md, "Whole models").
//
// Tensors, float32 little-endian, [in][out] as x @ w multiplies them: "embedding"
// [vocab][width]; per layer l "layers.l.attention_norm" [width], "layers.l.wq"
// [width][q_heads * head_dim], "layers.l.wk", "layers.l.wv" [width][kv_heads * head_dim or
// value_dim], "layers.l.wo" [q_heads * value_dim][width], "layers.l.mlp_norm" [width],
// "layers.l.w_gate", "layers.l.w_up" [width][ffn], "layers.l.w_down" [ffn][width];
// "final_norm" [width]; "lm_head" [width][vocab].
#pragma once

#include <filesystem>
#include <string>

#include "kvfuzz/scenario.h"

namespace kvfuzz::doors {

// The file's bytes: an 8-byte little-endian header length, the JSON header (padded with
// spaces to a multiple of 8 bytes), then every tensor's values in the order above.
std::string model_weights_safetensors(const ModelConfig& model, const Layout& layout);

// The weights of one model and layout in a file of their own in `folder`, for as long as the
// object lives: PID-N-MODEL.safetensors, whose name spells every input of make_weights. An
// engine reads it while it answers the hello or new_case that names it; the file is removed
// when that answer is in, so a run of many cases (each model its own seed) leaves no files
// behind. Throws FileWriteError (support/atomic_file.h) when it cannot be written.
class ModelWeightsFile {
 public:
  ModelWeightsFile(const std::filesystem::path& folder, const ModelConfig& model,
                   const Layout& layout);
  ~ModelWeightsFile();
  ModelWeightsFile(const ModelWeightsFile&) = delete;
  ModelWeightsFile& operator=(const ModelWeightsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A folder for one run's weights files, kvfuzz-weights-UID/PID-N in the system's temporary
// folder ($TMPDIR), removed with everything in it when the object made in this process dies:
// a forked worker killed while its engine read a file (a check that stops early) leaves it
// for this removal. Copies in forked children never remove it.
class WeightsFolder {
 public:
  WeightsFolder();
  ~WeightsFolder();
  WeightsFolder(const WeightsFolder&) = delete;
  WeightsFolder& operator=(const WeightsFolder&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  long owner_;  // the process that made it
};

}  // namespace kvfuzz::doors
