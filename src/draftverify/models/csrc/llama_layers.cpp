// The decoder layers of draftverify.models.llama.llama_layers in one call, everything but the matrix
// products in plain loops over the float32 states: RMS norm, rotary angles, the cache write, attention
// (softmax over the keys the mask lets each query see, grouped heads), SiLU gate, residual adds. The
// same arithmetic as the Python loop's ATen operations, summed in another order (float32 rounding:
// tests/models/test_llama_layers.py). A one-token call of SmolLM2-135M runs some 30 ATen operations a
// layer, each a few microseconds of dispatch and allocation, together as much as the call's matrix
// products once these stream GGUF blocks; here a layer's work outside its four products is a few
// microseconds. The products are the panel kernel's (panel_mm.cpp); the keys and values go straight
// into the static cache's buffers (draftverify.models.static_cache.StaticKV). Positions marked as
// padding (`valid`) are left out of every product and of attention: a batch of prompts of different
// lengths pays for its tokens, not for its rectangle.

#include <ATen/core/Tensor.h>
#include <ATen/ops/_softmax.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/index_copy.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/silu.h>
#include <torch/library.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "llama_layers.h"
#include "panel_mm.h"

namespace draftverify {

enum Kind : int64_t { kPanelAvx2 = 0, kPanelAvx512 = 1, kBlocks = 2, kBlocksQ8 = 3 };

at::Tensor product(int64_t kind, const at::Tensor& x, const at::Tensor& weights, const std::optional<at::Tensor>& scale,
                   const std::optional<at::Tensor>& offsets, const std::optional<at::Tensor>& bias, int64_t N) {
  if (kind == kBlocks) return block_mm(x, weights, *scale, offsets, bias, N);
  if (kind == kBlocksQ8) return block_q8_mm(x, weights, *scale, offsets, bias, N);
  return panel_mm(x, weights, scale, bias, N, kind == kPanelAvx512 ? "avx512" : "avx2");
}

}  // namespace draftverify

namespace {

// Product i of the flat lists (four a layer: qkv, o, gate_up, down), as its Python object runs it.
struct Products {
  at::IntArrayRef kind;
  at::TensorList weights;  // panels or codes
  const c10::List<std::optional<at::Tensor>>& scales;  // int8 or block scales
  const c10::List<std::optional<at::Tensor>>& offsets;  // Q4_1 offsets
  const c10::List<std::optional<at::Tensor>>& biases;
  at::IntArrayRef outputs;

  at::Tensor operator()(int64_t i, const at::Tensor& x) const {
    return draftverify::product(kind[i], x, weights[i], scales.get(i), offsets.get(i), biases.get(i), outputs[i]);
  }
};

// Rows [n, width] of x normalised by their root mean square, times the norm's weight (llama's RMSNorm,
// x / sqrt(mean(x^2) + eps) * w, as F.rms_norm computes it in float32; sums in 16 lanes).
void rms_norm(const float* x, int64_t n, int64_t width, const float* weight, double eps, float* out) {
  for (int64_t r = 0; r < n; ++r) {
    const float* row = x + r * width;
    float lanes[16] = {};
    int64_t j = 0;
    for (; j + 16 <= width; j += 16)
      for (int l = 0; l < 16; ++l) lanes[l] += row[j + l] * row[j + l];
    float sum = 0.0f;
    for (; j < width; ++j) sum += row[j] * row[j];
    for (int l = 0; l < 16; ++l) sum += lanes[l];
    const float inverse = 1.0f / std::sqrt(sum / static_cast<float>(width) + static_cast<float>(eps));
    for (j = 0; j < width; ++j) out[r * width + j] = row[j] * inverse * weight[j];
  }
}

// head [D] turned by the rotary angles into out: x cos + (-x_2, x_1) sin (llama's rotate_half).
inline void rotate(const float* head, const float* cos, const float* sin, int64_t D, float* out) {
  const int64_t half = D / 2;
  for (int64_t d = 0; d < half; ++d) out[d] = head[d] * cos[d] - head[d + half] * sin[d];
  for (int64_t d = half; d < D; ++d) out[d] = head[d] * cos[d] + head[d - half] * sin[d];
}

// Which keys a query may see: mask None (all), [S, T] or [B, 1, S, T] boolean, any strides.
struct Mask {
  const bool* data = nullptr;
  int64_t row = 0, query = 0, key = 0;  // strides

  explicit Mask(const std::optional<at::Tensor>& mask) {
    if (!mask.has_value()) return;
    TORCH_CHECK(mask->scalar_type() == at::kBool && (mask->dim() == 2 || mask->dim() == 4),
                "mask must be boolean [S, T] or [B, 1, S, T]");
    data = mask->data_ptr<bool>();
    const int64_t d = mask->dim();
    row = d == 4 ? mask->stride(0) : 0;
    query = mask->stride(d - 2);
    key = mask->stride(d - 1);
  }
  bool sees(int64_t b, int64_t s, int64_t t) const { return data == nullptr || data[b * row + s * query + t * key]; }
};

// Scores q k_t / sqrt(D) of one query [D] against the eight keys from `key` (row stride kt): eight
// accumulators over the head's 8-float chunks, then one 8 x 8 transposing sum.
inline void scores8(const float* query, const float* key, int64_t kt, int64_t D, float scale, float* out) {
  __m256 acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; d += 8) {
    const __m256 q = _mm256_loadu_ps(query + d);
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(q, _mm256_loadu_ps(key + j * kt + d), acc[j]);
  }
  // lane j of the result: the sum of acc[j]'s eight lanes
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
  const __m256 sum = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  _mm256_storeu_ps(out, _mm256_mul_ps(sum, _mm256_set1_ps(scale)));
}

// The score of one query [D] against one key [D].
inline float score1(const float* query, const float* key, int64_t D, float scale) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(query + d), _mm256_loadu_ps(key + d), acc);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  return (((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))) * scale;
}

// out [D] += sum_t probs[t] value_t over the n <= 8 rows from `value` (row stride vt), t in order: 64
// floats of the head at a time in eight accumulators (one broadcast of probs[t] for all of them), the
// rest 8 floats at a time. Each output float adds its terms in the order of t, whatever the blocks.
inline void accumulate8(const float* probs, const float* value, int64_t vt, int64_t n, int64_t D, float* out) {
  int64_t d = 0;
  for (; d + 64 <= D; d += 64) {
    __m256 acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_loadu_ps(out + d + 8 * j);
    for (int64_t t = 0; t < n; ++t) {
      const __m256 p = _mm256_set1_ps(probs[t]);
      const float* row = value + t * vt + d;
      for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(p, _mm256_loadu_ps(row + 8 * j), acc[j]);
    }
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(out + d + 8 * j, acc[j]);
  }
  for (; d < D; d += 8) {
    __m256 acc = _mm256_loadu_ps(out + d);
    for (int64_t t = 0; t < n; ++t) acc = _mm256_fmadd_ps(_mm256_set1_ps(probs[t]), _mm256_loadu_ps(value + t * vt + d), acc);
    _mm256_storeu_ps(out + d, acc);
  }
}

constexpr int64_t kNearKeys = 16, kFarKeys = 64;  // rows ahead of the block read prefetched into L1, into L2

// Prefetch the D floats of rows t + kNearKeys .. + 7 into L1 and t + kFarKeys .. + 7 into L2, those
// below T, of the rows [T, D] from `rows` (row stride stride).
inline void prefetch_ahead(const float* rows, int64_t t, int64_t T, int64_t stride, int64_t D) {
  for (int64_t r = t; r < t + 8; ++r)
    for (int64_t d = 0; d < D; d += 16) {
      if (r + kNearKeys < T) _mm_prefetch(reinterpret_cast<const char*>(rows + (r + kNearKeys) * stride + d), _MM_HINT_T0);
      if (r + kFarKeys < T) _mm_prefetch(reinterpret_cast<const char*>(rows + (r + kFarKeys) * stride + d), _MM_HINT_T1);
    }
}

// The queries of one key/value head (grouped-query attention: every query head h with h / (H / H_kv)
// equal to it, at every query position of one row): each query [D], its row of scores or
// probabilities [T], its output [D]. Their keys and values are read in blocks of eight for all of
// them at once, so each streams from memory once per layer, not once per query head and position.
struct Group {
  std::vector<const float*> queries;
  std::vector<float*> scores;
  std::vector<float*> outputs;

  // scores[j][t] = q_j k_t / sqrt(D) for keys t in [0, T) (row stride kt)
  void score(const float* key, int64_t kt, int64_t T, int64_t D, float scale) const {
    int64_t t = 0;
    for (; t + 8 <= T; t += 8) {
      prefetch_ahead(key, t, T, kt, D);
      for (std::size_t j = 0; j < queries.size(); ++j) scores8(queries[j], key + t * kt, kt, D, scale, scores[j] + t);
    }
    for (; t < T; ++t)
      for (std::size_t j = 0; j < queries.size(); ++j) scores[j][t] = score1(queries[j], key + t * kt, D, scale);
  }

  // outputs[j] = sum_t probs[j][t] v_t over t in [0, T) (row stride vt), probs in the rows `scores`
  void weigh(const float* value, int64_t vt, int64_t T, int64_t D) const {
    for (float* out : outputs) std::fill_n(out, D, 0.0f);
    for (int64_t t = 0; t < T; t += 8) {
      prefetch_ahead(value, t, T, vt, D);
      for (std::size_t j = 0; j < outputs.size(); ++j)
        accumulate8(scores[j] + t, value + t * vt, vt, std::min<int64_t>(8, T - t), D, outputs[j]);
    }
  }
};

// One layer's attention for n queries q [n, H, D] over the cache's keys and values [B, H_kv, T, D]
// (strided), T = start + S, query r at row b = live[r] / S and position s = live[r] % S (the
// live positions of the chunk, in order): softmax(q k / sqrt(D)) v over the keys the mask lets each query
// see, query head h reading key head h / (H / H_kv); per chunk of queries the softmax is one ATen
// call (its vectorised exp). out [n, H, D]. Every score and output float is summed as a query alone
// would sum it: the grouping changes which memory the keys and values come from, not the arithmetic.
constexpr int64_t kScoreFloats = int64_t{1} << 20;

void attend(const float* q, int64_t n, const int64_t* live, const at::Tensor& keys, const at::Tensor& values, int64_t S,
            int64_t H, int64_t H_kv, int64_t D, int64_t T, const Mask& mask, float* out) {
  const float* k = keys.data_ptr<float>();
  const float* v = values.data_ptr<float>();
  const int64_t kb = keys.stride(0), kh = keys.stride(1), kt = keys.stride(2);
  const int64_t vb = values.stride(0), vh = values.stride(1), vt = values.stride(2);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t G = H / H_kv;  // query heads per key head
  // queries in chunks whose scores take at most kScoreFloats (a long prompt's S x T stays bounded)
  const int64_t chunk = std::max<int64_t>(1, std::min(n, kScoreFloats / (H * T)));
  at::Tensor buffer = at::empty({chunk * H, T}, keys.options());
  Group group;
  for (int64_t first = 0; first < n; first += chunk) {
    const int64_t count = std::min(chunk, n - first);
    at::Tensor logits = buffer.narrow(0, 0, count * H);
    float* w = logits.data_ptr<float>();
    // run(b, g) with `group` holding the chunk's queries of row b and key head g, their rows in `rows`
    const auto each_group = [&](float* rows, const auto& run) {
      for (int64_t r = first; r < first + count;) {
        const int64_t b = live[r] / S;
        int64_t end = r;
        while (end < first + count && live[end] / S == b) ++end;
        for (int64_t g = 0; g < H_kv; ++g) {
          group.queries.clear(), group.scores.clear(), group.outputs.clear();
          for (int64_t j = r; j < end; ++j)
            for (int64_t h = g * G; h < (g + 1) * G; ++h) {
              group.queries.push_back(q + (j * H + h) * D);
              group.scores.push_back(rows + ((j - first) * H + h) * T);
              group.outputs.push_back(out + (j * H + h) * D);
            }
          run(b, g);
        }
        r = end;
      }
    };
    each_group(w, [&](int64_t b, int64_t g) { group.score(k + b * kb + g * kh, kt, T, D, scale); });
    if (mask.data != nullptr)
      for (int64_t r = first; r < first + count; ++r)
        for (int64_t t = 0; t < T; ++t)
          if (!mask.sees(live[r] / S, live[r] % S, t))
            for (int64_t h = 0; h < H; ++h) w[((r - first) * H + h) * T + t] = -std::numeric_limits<float>::infinity();
    const at::Tensor probs = at::_softmax(logits, -1, false);
    each_group(probs.data_ptr<float>(), [&](int64_t b, int64_t g) { group.weigh(v + b * vb + g * vh, vt, T, D); });
  }
}

}  // namespace

namespace draftverify {

at::Tensor llama_layers(at::Tensor x, const at::Tensor& cos, const at::Tensor& sin, const std::optional<at::Tensor>& mask,
                        const std::optional<at::Tensor>& valid, at::TensorList keys, at::TensorList values, int64_t start,
                        int64_t heads, int64_t kv_heads, int64_t head_dim, at::TensorList norms, c10::ArrayRef<double> eps, at::IntArrayRef kind,
                        at::TensorList weights,
                        const c10::List<std::optional<at::Tensor>>& scales,
                        const c10::List<std::optional<at::Tensor>>& offsets,
                        const c10::List<std::optional<at::Tensor>>& biases, at::IntArrayRef outputs) {
  const int64_t rows = x.size(0), size = x.size(1), width = x.size(2), layers = static_cast<int64_t>(keys.size());
  TORCH_CHECK(values.size() == keys.size() && norms.size() == 2 * keys.size() && eps.size() == norms.size() &&
                  weights.size() == 4 * keys.size() && kind.size() == weights.size() && scales.size() == weights.size() &&
                  offsets.size() == weights.size() && biases.size() == weights.size() && outputs.size() == weights.size(),
              "llama_layers: per layer one key and one value buffer, two norms and four products");
  TORCH_CHECK(x.scalar_type() == at::kFloat && keys[0].scalar_type() == at::kFloat, "llama_layers runs float32 states and caches");
  const Products product{kind, weights, scales, offsets, biases, outputs};
  const int64_t n = rows * size, D = head_dim, H = heads, H_kv = kv_heads, T = start + size;
  // [B, S, D] angles per (row, position), whatever the caller's broadcasting
  const at::Tensor c = cos.expand({rows, 1, size, D}).contiguous(), sn = sin.expand({rows, 1, size, D}).contiguous();
  TORCH_CHECK(head_dim % 8 == 0, "llama_layers: the head size must be a multiple of 8, got ", head_dim);
  const Mask seen(mask);
  // The live positions (flat b S + s, in order): all of them, or those `valid` marks (False: a batch's
  // padding, which the mask hides and no one reads). The layers run on the live rows only; the others
  // leave as they came in, their keys and values zeros (a masked key's value still meets a weight of 0).
  std::vector<int64_t> live, padding;
  at::Tensor flat;
  if (valid.has_value()) {
    TORCH_CHECK(valid->scalar_type() == at::kBool && valid->dim() == 2 && valid->size(0) == rows && valid->size(1) == size,
                "llama_layers: valid must be boolean [B, S] like x's first two dimensions");
    flat = valid->reshape({n}).contiguous();
  }
  const bool* marked = flat.defined() ? flat.data_ptr<bool>() : nullptr;
  for (int64_t j = 0; j < n; ++j) (marked == nullptr || marked[j] ? live : padding).push_back(j);
  const int64_t m = static_cast<int64_t>(live.size());
  const bool all = padding.empty();
  const at::Tensor kept = all ? at::Tensor() : at::from_blob(live.data(), {m}, at::kLong);
  x = x.contiguous();
  // [m, E]: the live positions' residual stream, updated in place
  at::Tensor y = all ? x.clone() : at::index_select(x.view({n, width}), 0, kept);
  float* stream = y.data_ptr<float>();
  at::Tensor h = at::empty({m, width}, x.options()), q = at::empty({m, H * D}, x.options());
  at::Tensor attended = at::empty({m, H * D}, x.options());
  const auto add = [&](const at::Tensor& update) {
    const float* u = update.data_ptr<float>();
    for (int64_t j = 0; j < m * width; ++j) stream[j] += u[j];
  };
  for (int64_t i = 0; i < layers; ++i) {
    rms_norm(stream, m, width, norms[2 * i].data_ptr<float>(), eps[2 * i], h.data_ptr<float>());
    const at::Tensor qkv = product(4 * i, h);  // [m, (H + 2 H_kv) D]
    const float* all_heads = qkv.data_ptr<float>();
    float* k = keys[i].data_ptr<float>();
    float* v = values[i].data_ptr<float>();
    const int64_t kb = keys[i].stride(0), kh = keys[i].stride(1), kt = keys[i].stride(2);
    const int64_t vb = values[i].stride(0), vh = values[i].stride(1), vt = values[i].stride(2);
    for (const int64_t j : padding) {  // zero keys and values (masked, but weighed by 0)
      const int64_t b = j / size, s = j % size;
      for (int64_t g = 0; g < H_kv; ++g) {
        std::fill_n(k + b * kb + g * kh + (start + s) * kt, D, 0.0f);
        std::fill_n(v + b * vb + g * vh + (start + s) * vt, D, 0.0f);
      }
    }
    for (int64_t r = 0; r < m; ++r) {
      const int64_t b = live[r] / size, s = live[r] % size;
      const float* token = all_heads + r * (H + 2 * H_kv) * D;
      const float* angle_cos = c.data_ptr<float>() + live[r] * D;
      const float* angle_sin = sn.data_ptr<float>() + live[r] * D;
      for (int64_t j = 0; j < H; ++j) rotate(token + j * D, angle_cos, angle_sin, D, q.data_ptr<float>() + (r * H + j) * D);
      for (int64_t j = 0; j < H_kv; ++j) {
        rotate(token + (H + j) * D, angle_cos, angle_sin, D, k + b * kb + j * kh + (start + s) * kt);
        std::copy_n(token + (H + H_kv + j) * D, D, v + b * vb + j * vh + (start + s) * vt);
      }
    }
    attend(q.data_ptr<float>(), m, live.data(), keys[i], values[i], size, H, H_kv, D, T, seen, attended.data_ptr<float>());
    add(product(4 * i + 1, attended));
    rms_norm(stream, m, width, norms[2 * i + 1].data_ptr<float>(), eps[2 * i + 1], h.data_ptr<float>());
    const at::Tensor gate_up = product(4 * i + 2, h);  // [m, 2 I]
    const int64_t I = gate_up.size(1) / 2;
    at::Tensor act = at::silu(gate_up.narrow(1, 0, I)).contiguous();  // [m, I] (ATen's vectorised exp)
    const float* up = gate_up.data_ptr<float>() + I;
    float* a = act.data_ptr<float>();
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < I; ++j) a[r * I + j] *= up[r * 2 * I + j];  // silu(gate) up
    add(product(4 * i + 3, act));
  }
  if (all) return y;
  return at::index_copy(x.view({n, width}), 0, kept, y).view({rows, size, width});
}

}  // namespace draftverify

TORCH_LIBRARY_FRAGMENT(draftverify, m) {
  m.def("llama_layers(Tensor x, Tensor cos, Tensor sin, Tensor? mask, Tensor? valid, Tensor[] keys, Tensor[] values, int start, "
        "int heads, int kv_heads, int head_dim, Tensor[] norms, float[] eps, int[] kind, Tensor[] weights, "
        "Tensor?[] scales, Tensor?[] offsets, Tensor?[] biases, int[] outputs) -> Tensor",
        &draftverify::llama_layers);
}
