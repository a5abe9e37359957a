#include "shrink/measure.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <variant>
#include <vector>

#include "shrink/token_data.h"

namespace kvfuzz::shrinking {

std::pair<int, int> page_key(int page_size, int context) {
  if (page_size >= context) return {0, page_size == 16 ? 0 : page_size};
  return {1, page_size};
}

Measure measure(const Scenario& s) {
  Measure m;
  m.expect_rows = static_cast<int>(s.expect.size());
  m.program_tokens = program_tokens(s);
  m.ops = static_cast<int>(s.program.size());
  m.sequences = s.sequences;
  for (const Op& op : s.program) {
    m.chunks += static_cast<int>(op.batch().size());
    m.steps += op.kind == OpKind::step;
    m.epoch_ops += op.kind == OpKind::truncate || op.kind == OpKind::fork;
    if (op.kind == OpKind::truncate) m.truncate_keeps += op.keep;
  }

  if (s.model) {
    const std::vector<int> order = first_use_order(s);
    m.model_layers = s.model->layers;
    m.model_width = s.model->width;
    m.model_ffn = s.model->ffn;
    m.model_vocab = s.model->vocab;
    m.words_used = static_cast<int>(order.size());
    for (size_t i = 0; i < order.size(); ++i) {
      m.words_out_of_order = m.words_out_of_order || order[i] != static_cast<int>(i);
    }
  }

  const Layout& l = s.layout;
  m.q_heads = l.q_heads;
  m.kv_heads = l.kv_heads;
  m.head_dim = l.head_dim;
  m.value_dim = l.value_dim;
  m.rope = l.rope_theta.has_value();
  m.rope_interleaved = l.rope_style != RopeStyle::half_split;
  m.rope_dims = l.rope_dims.has_value();
  m.window = l.window.has_value();
  m.scale = l.scale.has_value();
  m.dtype_not_f32 = l.dtype != DType::f32;
  m.softcap = l.softcap.has_value();
  m.sinks = !l.sinks.empty();
  m.alibi = !l.alibi.empty();
  m.chunked_local = l.chunked_local.has_value();
  m.value_from_key = l.value_from_key;
  for (const KvFormat* format : {&l.k_format, &l.v_format}) {
    m.quantized_kv += format->quantized();
    const bool unit = format->scale.size() == 1 && format->scale[0] == 1.0;
    m.kv_scales += unit ? 0 : static_cast<int>(format->scale.size());
    m.kv_wide_groups += format->group > kAffineGroups[0];
  }
  for (const auto* values : {&l.sinks, &l.alibi}) {
    m.nonzero_feature_values += static_cast<int>(
        std::count_if(values->begin(), values->end(), [](double x) { return x != 0; }));
  }

  const Placement& p = s.placement;
  m.page_order = p.order == PageOrder::identity ? 0 : p.order == PageOrder::reversed ? 1 : 2;
  m.pool_pages = p.pool_pages.has_value();
  m.poison_not_nan = p.poison != Poison::nan;
  m.threads_not_thread_order = p.threads != ThreadSchedule{};
  std::tie(m.page_class, m.page_rank) = page_key(l.page_size, std::max(1, max_epoch_length(s)));

  m.generated_tokens = std::holds_alternative<GeneratedTokens>(s.tokens);
  m.table_size = token_count(s.tokens);
  if (const auto* tokens = std::get_if<std::vector<ExplicitToken>>(&s.tokens)) {
    m.ids_out_of_order = !numbered_in_first_use_order(first_use_order(s), tokens->size());
    for_each_value(*tokens, true, true, true, [&m](double x) {
      m.nonzero_values += x != 0;
      m.fractional_values += !is_integer(x);
      m.magnitude += std::fabs(x);
      m.negative_values += std::signbit(x);
    });
  }
  return m;
}

}  // namespace kvfuzz::shrinking
