#include "doors/model_weights_file.h"

#include <unistd.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "model/transformer.h"
#include "support/atomic_file.h"

namespace kvfuzz::doors {

namespace {

struct Tensor {
  std::string name;
  const std::vector<float>* values;
  std::vector<size_t> shape;
};

std::vector<Tensor> tensors_of(const TransformerWeights& w, const ModelConfig& model,
                               const Layout& l) {
  const auto n = [](int value) { return static_cast<size_t>(value > 0 ? value : 0); };
  const size_t vocab = n(model.vocab), width = n(model.width), ffn = n(model.ffn);
  const size_t q = n(l.q_heads) * n(l.head_dim), k = n(l.kv_heads) * n(l.head_dim),
               v = n(l.kv_heads) * n(l.value_dim), a = n(l.q_heads) * n(l.value_dim);
  std::vector<Tensor> out{{"embedding", &w.embedding, {vocab, width}}};
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const TransformerWeights::Layer& layer = w.layers[i];
    const std::string at = "layers." + std::to_string(i) + ".";
    out.push_back({at + "attention_norm", &layer.attention_norm, {width}});
    out.push_back({at + "wq", &layer.wq, {width, q}});
    out.push_back({at + "wk", &layer.wk, {width, k}});
    out.push_back({at + "wv", &layer.wv, {width, v}});
    out.push_back({at + "wo", &layer.wo, {a, width}});
    out.push_back({at + "mlp_norm", &layer.mlp_norm, {width}});
    out.push_back({at + "w_gate", &layer.w_gate, {width, ffn}});
    out.push_back({at + "w_up", &layer.w_up, {width, ffn}});
    out.push_back({at + "w_down", &layer.w_down, {ffn, width}});
  }
  out.push_back({"final_norm", &w.final_norm, {width}});
  out.push_back({"lm_head", &w.lm_head, {width, vocab}});
  return out;
}

void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

}  // namespace

std::string model_weights_safetensors(const ModelConfig& model, const Layout& layout) {
  const TransformerWeights weights = make_weights(model, layout);
  const std::vector<Tensor> tensors = tensors_of(weights, model, layout);
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "kvfuzz tiny transformer, [in][out]"}};
  size_t offset = 0;
  for (const Tensor& t : tensors) {
    const size_t bytes = t.values->size() * sizeof(float);
    header[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + text.size() + offset);
  append_le(out, text.size(), 8);
  out += text;
  for (const Tensor& t : tensors) {
    for (const float value : *t.values) append_le(out, std::bit_cast<uint32_t>(value), 4);
  }
  return out;
}

ModelWeightsFile::ModelWeightsFile(const std::filesystem::path& folder, const ModelConfig& model,
                                   const Layout& layout) {
  static std::atomic<uint64_t> made{0};  // engines of one process (threads) never share a file
  const std::string name =
      std::to_string(static_cast<long>(getpid())) + "-" + std::to_string(made++) + "-vocab" +
      std::to_string(model.vocab) + "-width" + std::to_string(model.width) + "-layers" +
      std::to_string(model.layers) + "-ffn" + std::to_string(model.ffn) + "-seed" +
      std::to_string(model.seed) + "-q" + std::to_string(layout.q_heads) + "-kv" +
      std::to_string(layout.kv_heads) + "-d" + std::to_string(layout.head_dim) + "-v" +
      std::to_string(layout.value_dim) + ".safetensors";
  path_ = folder / name;
  // Written whole under a temporary name, then renamed: a reader never sees half a file.
  write_file_atomically(path_, model_weights_safetensors(model, layout));
}

ModelWeightsFile::~ModelWeightsFile() {
  std::error_code ignored;  // already gone (a user cleaning the folder) is fine
  std::filesystem::remove(path_, ignored);
}

WeightsFolder::WeightsFolder() : owner_(static_cast<long>(getpid())) {
  static std::atomic<uint64_t> made{0};
  path_ = std::filesystem::temp_directory_path() /
          ("kvfuzz-weights-" + std::to_string(static_cast<unsigned long>(getuid()))) /
          (std::to_string(owner_) + "-" + std::to_string(made++));
}

WeightsFolder::~WeightsFolder() {
  if (static_cast<long>(getpid()) != owner_) return;
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace kvfuzz::doors
