// The model of a model-level scenario (model_choices.h): its sizes and seed, and its work.
#include "generate/model_choices.h"

#include <algorithm>
#include <array>
#include <cstdint>

namespace kvfuzz {

ModelChoices pick_model(ChoiceSource& c, const ModelOptions& o) {
  static constexpr std::array<int, 7> kWidths{4, 8, 16, 32, 64, 12, 24};
  const int max_width = std::clamp(o.max_width, 1, 128);
  const int max_ffn = std::clamp(o.max_ffn, 1, 512);
  ModelChoices m;
  m.layers = c.pick_int(1, std::clamp(o.max_layers, 1, 4));
  m.width = std::min(c.pick_from(kWidths), max_width);
  enum class Ffn { width, twice, four_times, any };
  const Ffn ffn = pick_weighted<Ffn>(
      c, {{Ffn::width, 2}, {Ffn::twice, 2}, {Ffn::four_times, 1}, {Ffn::any, 1}});
  const int any_ffn = c.pick_int(1, max_ffn);
  m.ffn = std::clamp(select(ffn, {{Ffn::width, m.width},
                                  {Ffn::twice, 2 * m.width},
                                  {Ffn::four_times, 4 * m.width},
                                  {Ffn::any, any_ffn}}),
                     1, max_ffn);
  const bool spare = rarely(c, 4);
  const int spare_vocab = c.pick_int(1, std::clamp(o.max_spare_vocab, 1, 64));
  m.spare_vocab = spare ? spare_vocab : 0;
  m.seed = static_cast<uint64_t>(c.pick(0, INT32_MAX));
  return m;
}

// Multiply-adds of the model for one token with a vocabulary of `vocab` (validate.cpp's
// kMaxModelWork counts the same).
int64_t model_work_per_token(const ModelChoices& m, const Layout& l, int64_t vocab) {
  const int64_t width = m.width;
  const int64_t layer = width * (int64_t{l.q_heads} * l.head_dim +
                                 int64_t{l.kv_heads} * (int64_t{l.head_dim} + l.value_dim)) +
                        int64_t{l.q_heads} * l.value_dim * width + 3 * width * m.ffn;
  return m.layers * layer + width * vocab;
}

}  // namespace kvfuzz
