// The decoder layers of draftverify.models.llama.llama_layers in one call, everything but the matrix
// products in plain loops over the float32 states: RMS norm, rotary angles, the cache write, attention
// (softmax over the keys the mask lets each query see, grouped heads), SiLU gate, residual adds. The
// same arithmetic as the Python loop's ATen operations, summed in another order and with another e^x
// (float32 rounding: tests/models/test_llama_layers.py). A query's attention reads the keys from its
// first visible one to its last and no others, and its bits do not depend on the rest of the call nor
// on the thread that computes it. A one-token call of SmolLM2-135M runs some 30 ATen operations a
// layer, each a few microseconds of dispatch and allocation, together as much as the call's matrix
// products once these stream GGUF blocks; here a layer's work outside its four products is a few
// microseconds. The products are the panel kernel's (panel_mm.cpp); the keys and values go straight
// into the static cache's buffers (draftverify.models.static_cache.StaticKV). Positions marked as
// padding (`valid`) are left out of every product and of attention: a batch of prompts of different
// lengths pays for its tokens, not for its rectangle.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
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
#include <type_traits>
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

#define ALWAYS_INLINE inline __attribute__((always_inline))

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

// The sum of each of eight accumulators' eight lanes, lane j of the result from acc[j]: the pairwise
// tree ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) of score1, as one 8 x 8 transposing sum.
ALWAYS_INLINE __m256 lane_sums(const __m256* acc) {
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

// lane_sums of four accumulators: lane j of the result from acc[j], j < 4, by the same tree.
ALWAYS_INLINE __m128 lane_sums4(const __m256* acc) {
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
  return _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
}

// The sum of one vector's eight lanes by lane_sums' tree, ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)).
ALWAYS_INLINE float tree_sum(__m256 v) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// The score of one query [D] against one key [D]: lane l sums the head's floats d = l mod 8 in order
// of d, then tree_sum; times scale.
ALWAYS_INLINE float score1(const float* query, const float* key, int64_t D, float scale) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(query + d), _mm256_loadu_ps(key + d), acc);
  return tree_sum(acc) * scale;
}

constexpr int64_t kNearKeys = 16, kFarKeys = 64;  // rows ahead of the block read prefetched into L1, into L2

// Prefetch the D floats of rows t + kNearKeys .. + 7 into L1 and t + kFarKeys .. + 7 into L2, those
// below T, of the rows [T, D] from `rows` (row stride stride). Only the first query of a unit of work
// (attend_tiled) prefetches (`fetch`): the others find a key head's keys and values in L2, where
// prefetching them again cost 8 instructions a key (2026-11-30, AMD EPYC, a call 1,500 deep: the
// rest of a call outside its products 13.2-18.5 ms against 15.7-26.4 for 5 tokens, 22.6-23.9
// against 28.3-50.6 for 9, 37.2-44.7 against 50.0-79.1 for 17; three alternating rounds).
ALWAYS_INLINE void prefetch_ahead(const float* rows, int64_t t, int64_t T, int64_t stride, int64_t D) {
  for (int64_t r = t; r < t + 8; ++r)
    for (int64_t d = 0; d < D; d += 16) {
      if (r + kNearKeys < T) _mm_prefetch(reinterpret_cast<const char*>(rows + (r + kNearKeys) * stride + d), _MM_HINT_T0);
      if (r + kFarKeys < T) _mm_prefetch(reinterpret_cast<const char*>(rows + (r + kFarKeys) * stride + d), _MM_HINT_T1);
    }
}

// scores[i][j] = q_i k_j / sqrt(D) for the N queries q_i [D] and the B keys k_j from `key` (row
// stride kt): B = 8, or 4 where 16 registers must hold N x B accumulators; N x B accumulators, each key
// chunk loaded once for the N queries; each score summed as score1 sums it, whatever N and B and
// wherever its block starts.
template <int N, int B>
ALWAYS_INLINE void score_block(const float* const* queries, const float* key, int64_t kt, int64_t D, float scale,
                               float* const* scores) {
  static_assert(B == 8 || B == 4);
  __m256 acc[N][B];
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < B; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; d += 8) {
    __m256 q[N];
    for (int i = 0; i < N; ++i) q[i] = _mm256_loadu_ps(queries[i] + d);
    for (int j = 0; j < B; ++j) {
      const __m256 k = _mm256_loadu_ps(key + j * kt + d);
      for (int i = 0; i < N; ++i) acc[i][j] = _mm256_fmadd_ps(q[i], k, acc[i][j]);
    }
  }
  for (int i = 0; i < N; ++i) {
    if constexpr (B == 8) _mm256_storeu_ps(scores[i], _mm256_mul_ps(lane_sums(acc[i]), _mm256_set1_ps(scale)));
    else _mm_storeu_ps(scores[i], _mm_mul_ps(lane_sums4(acc[i]), _mm_set1_ps(scale)));
  }
}

// out_i [W 8 floats from d] = sum_{t < T} probs_i[t] v_t[d ...], t in order from zero, for the N queries
// (one broadcast of probs_i[t] for its W registers, each value chunk loaded once for the N queries).
template <int N, int W>
ALWAYS_INLINE void weigh_chunk(const float* const* probs, const float* value, int64_t vt, int64_t T, int64_t D, int64_t d,
                               float* const* out, bool fetch) {
  __m256 acc[N][W];
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < W; ++c) acc[i][c] = _mm256_setzero_ps();
  for (int64_t t = 0; t < T; ++t) {
    if (fetch && t % 8 == 0) prefetch_ahead(value, t, T, vt, D);
    __m256 p[N];
    for (int i = 0; i < N; ++i) p[i] = _mm256_set1_ps(probs[i][t]);
    for (int c = 0; c < W; ++c) {
      const __m256 v = _mm256_loadu_ps(value + t * vt + d + 8 * c);
      for (int i = 0; i < N; ++i) acc[i][c] = _mm256_fmadd_ps(p[i], v, acc[i][c]);
    }
  }
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < W; ++c) _mm256_storeu_ps(out[i] + d + 8 * c, acc[i][c]);
}

// e^x for x <= 0 (softmax's x - max), 8 lanes: 2^n e^r with n = round(x / ln 2) and r = x - n ln 2
// (ln 2 in two parts), e^r by Cephes' expf polynomial (S. Moshier, Cephes Math Library: relative
// error about 1e-7); below -87.3 (under the smallest normal float) the result is 0, so e^-inf = 0.
ALWAYS_INLINE __m256 exp8(__m256 x) {
  const __m256 gone = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(gone, _mm256_mul_ps(y, _mm256_castsi256_ps(two_n)));
}

// row[t] = e^{row[t] - max} / sum_u e^{row[u] - max} over t in [0, T), T >= 1, in place; 8 lanes at a
// time, the last partial chunk padded with -inf, sums in 8 lanes then tree_sum: the same
// bits for the same row, whichever call computes it.
ALWAYS_INLINE void softmax(float* row, int64_t T) {
  alignas(32) float tail[8];
  const int64_t full = T / 8 * 8, rest = T - full;
  for (int l = 0; l < 8; ++l) tail[l] = l < rest ? row[full + l] : -std::numeric_limits<float>::infinity();
  __m256 top = _mm256_load_ps(tail);
  for (int64_t t = 0; t < full; t += 8) top = _mm256_max_ps(top, _mm256_loadu_ps(row + t));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, top);
  const __m256 max = _mm256_set1_ps(*std::max_element(lanes, lanes + 8));
  __m256 sum = _mm256_setzero_ps();
  for (int64_t t = 0; t < full; t += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + t), max));
    _mm256_storeu_ps(row + t, e);
    sum = _mm256_add_ps(sum, e);
  }
  const __m256 e = exp8(_mm256_sub_ps(_mm256_load_ps(tail), max));
  _mm256_store_ps(tail, e);
  sum = _mm256_add_ps(sum, e);
  const __m256 total = _mm256_set1_ps(tree_sum(sum));
  for (int64_t t = 0; t < full; t += 8) _mm256_storeu_ps(row + t, _mm256_div_ps(_mm256_loadu_ps(row + t), total));
  _mm256_store_ps(tail, _mm256_div_ps(_mm256_load_ps(tail), total));
  std::copy_n(tail, rest, row + full);
}

// The keys each live query sees, from its row of the mask: [first, limit) less `hidden` (ascending; none
// under a causal mask, a tree of drafts' other branches otherwise). `first` skips the keys hidden
// before the first visible one (a left-padded prompt's padding), so a padded row reads, scores and
// sums the same keys in the same order as the prompt alone. With them, where each cache row's live
// queries start (`starts`: row i's are starts[i] .. starts[i + 1] - 1) and the keys all of them read
// (`spans`). Read once a call, not per layer.
struct Visible {
  std::vector<int64_t> first, limit, starts;
  std::vector<std::vector<int64_t>> hidden;
  int64_t spans = 0;

  Visible(const Mask& mask, const std::vector<int64_t>& live, int64_t S, int64_t T)
      : first(live.size(), 0), limit(live.size(), T), hidden(live.size()) {
    for (std::size_t r = 0; r < live.size(); ++r) {
      const int64_t b = live[r] / S, s = live[r] % S;
      if (r == 0 || b != live[r - 1] / S) starts.push_back(static_cast<int64_t>(r));
      if (mask.data != nullptr) {
        while (limit[r] > 0 && !mask.sees(b, s, limit[r] - 1)) --limit[r];
        while (first[r] < limit[r] && !mask.sees(b, s, first[r])) ++first[r];
        for (int64_t t = first[r]; t < limit[r]; ++t)
          if (!mask.sees(b, s, t)) hidden[r].push_back(t);
      }
      spans += limit[r] - first[r];
    }
    starts.push_back(static_cast<int64_t>(live.size()));
  }
};

constexpr int64_t kTile = 3;  // query heads sharing each load of a key or value chunk
constexpr int kPositions = 8;  // query positions of a cache row sharing each load of a key block or value chunk

// Attention for N <= 3 query heads of P live queries of one cache row that see from the same first key
// (`queries[p]`, `outputs[p]`; `rows[p]`, N scratch rows of at least `limit - first` floats; `visible`
// and their indices `at[p]`) over one key head's keys and values (from `key` and `value`, row strides
// kt, vt): scores over each query's keys in [first, limit), -inf at its hidden ones, softmax, weighted
// values. The queries share each load of a block of B keys (score_block; the keys past a query's last
// full block one by one, score1) and of a value chunk of 8 B floats (weigh_chunk, each query's chunk in
// turn while the chunk's values stay in L2): a call 1,500 deep had streamed a key head's keys and
// values, 768 KB, from L3 once a query (2026-11-30). With `fetch`, the first query prefetches them.
template <int N, int B>
ALWAYS_INLINE void attend_group(int P, const float* const (*queries)[kTile], float* const (*rows)[kTile],
                                float* const (*outputs)[kTile], const Visible& visible, const int64_t* at,
                                const float* key, int64_t kt, const float* value, int64_t vt, int64_t D, float scale,
                                bool fetch) {
  const int64_t first = visible.first[at[0]];  // every query's (attend_tiled groups them so)
  const auto seen = [&](int p) { return visible.limit[at[p]] - first; };
  int64_t longest = 0;
  for (int p = 0; p < P; ++p) longest = std::max(longest, seen(p));
  for (int64_t t = 0; t + B <= longest; t += B) {
    if (fetch && t % 8 == 0) prefetch_ahead(key + first * kt, t, longest, kt, D);
    for (int p = 0; p < P; ++p)
      if (t + B <= seen(p)) {
        float* scores[N];
        for (int i = 0; i < N; ++i) scores[i] = rows[p][i] + t;
        score_block<N, B>(queries[p], key + (first + t) * kt, kt, D, scale, scores);
      }
  }
  for (int p = 0; p < P; ++p) {
    const int64_t n = seen(p);
    for (int64_t t = n / B * B; t < n; ++t)
      for (int i = 0; i < N; ++i) rows[p][i][t] = score1(queries[p][i], key + (first + t) * kt, D, scale);
    if (n == 0) {  // sees no key: no terms (the Python loop's softmax gives NaN; no one reads it)
      for (int i = 0; i < N; ++i) std::fill_n(outputs[p][i], D, 0.0f);
      continue;
    }
    for (int i = 0; i < N; ++i) {
      for (const int64_t t : visible.hidden[at[p]]) rows[p][i][t - first] = -std::numeric_limits<float>::infinity();
      softmax(rows[p][i], n);
    }
  }
  const float* values = value + first * vt;
  const auto weigh = [&](auto width, int64_t d) {  // a chunk of 8 W floats of every query's output
    constexpr int W = decltype(width)::value;
    for (int p = 0; p < P; ++p)
      if (seen(p) > 0) weigh_chunk<N, W>(rows[p], values, vt, seen(p), D, d, outputs[p], fetch && p == 0 && d == 0);
  };
  int64_t d = 0;
  for (; d + 8 * B <= D; d += 8 * B) weigh(std::integral_constant<int, B>{}, d);
  for (; d < D; d += 8) weigh(std::integral_constant<int, 1>{}, d);
}

// One layer's attention for n queries q [n, H, D] over the cache's keys and values [B, H_kv, T, D]
// (strided), query r at row b = live[r] / S and position s = live[r] % S (the live positions of the
// chunk, in order): softmax(q k / sqrt(D)) v over the keys `visible` lets each query see, query head
// h reading key head h / (H / H_kv); out [n, H, D]. Per key head, up to kPositions query positions of
// a row and their query heads in tiles of up to kTile share each load of a key or value chunk
// (attend_group; blocks of 8 keys where 32 registers hold three heads' accumulators, of 4 where 16 do:
// on AVX2 a tile of one head read each key and value once a head, and a call of 9 tokens 150 deep
// spent 0.5 ms a token outside its products, 2026-11-30); the keys outside the query's visible span
// are neither scored nor weighed (half the work of a prompt under the causal mask, none of a
// left-padded prompt's padding).
// Every score and output float is summed as the query alone would sum it, over the same keys:
// whatever the tiling, the call's size, the other queries or the thread, a query's output has the
// same bits (the softmax is this file's, over its visible keys only). The units of work, a cache row's
// queries for one key head (whose keys and values stay in cache across them), are shared among
// threads by at::parallel_for when the call reads enough keys to pay for it (a batch of prompts; a
// prompt's forward): a batch of 32 answers 300 tokens deep reads as many bytes of keys and values a
// step as of weights.
constexpr int64_t kParallelWork = 1 << 20;  // query-key-float products below which one thread attends

// One layer's attention, as attend_tiled reads it.
struct Attention {
  const float* q;
  const int64_t* live;
  const float* k;
  const float* v;
  int64_t kb, kh, kt, vb, vh, vt, S, H, H_kv, D, T;
  const Visible& visible;
  float* out;
};

// The units [begin, end) of work: unit u is cache row u / H_kv's queries and key head u % H_kv; with
// Wide (32 registers) blocks of 8 keys, else of 4 for tiles of 2 or 3 heads (12 accumulators).
template <bool Wide>
ALWAYS_INLINE void attend_tiled(const Attention& a, int64_t begin, int64_t end) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.D));
  const int64_t G = a.H / a.H_kv, D = a.D, H = a.H;  // G query heads per key head
  int64_t most = 1;  // queries of a row in a group, at most
  for (int64_t unit = begin; unit < end; ++unit)
    most = std::max(most, std::min<int64_t>(kPositions, a.visible.starts[unit / a.H_kv + 1] - a.visible.starts[unit / a.H_kv]));
  std::vector<float> scratch(most * kTile * a.T);
  for (int64_t unit = begin; unit < end; ++unit) {
    const int64_t r = a.visible.starts[unit / a.H_kv], stop = a.visible.starts[unit / a.H_kv + 1], g = unit % a.H_kv;
    const int64_t b = a.live[r] / a.S;
    const float* key = a.k + b * a.kb + g * a.kh;  // a key head's keys and values stay in cache across the row's queries
    const float* value = a.v + b * a.vb + g * a.vh;
    for (int64_t j0 = r; j0 < stop;) {  // groups of up to kPositions queries that see from the same first key
      int64_t at[kPositions];
      int P = 0;
      for (; P < kPositions && j0 + P < stop && a.visible.first[j0 + P] == a.visible.first[j0]; ++P) at[P] = j0 + P;
      for (int64_t h = g * G; h < (g + 1) * G; h += kTile) {
        const float* queries[kPositions][kTile];
        float* rows[kPositions][kTile];
        float* outputs[kPositions][kTile];
        const int64_t count = std::min<int64_t>(kTile, (g + 1) * G - h);
        for (int p = 0; p < P; ++p)
          for (int64_t i = 0; i < count; ++i) {
            queries[p][i] = a.q + (at[p] * H + h + i) * D;
            rows[p][i] = scratch.data() + (p * kTile + i) * a.T;
            outputs[p][i] = a.out + (at[p] * H + h + i) * D;
          }
        const auto run = [&](auto heads) {
          constexpr int N = decltype(heads)::value;
          attend_group<N, Wide || N == 1 ? 8 : 4>(P, queries, rows, outputs, a.visible, at, key, a.kt, value, a.vt, D, scale,
                                                  j0 == r && h == g * G);
        };
        if (count == 3) run(std::integral_constant<int, 3>{});
        else if (count == 2) run(std::integral_constant<int, 2>{});
        else run(std::integral_constant<int, 1>{});
      }
      j0 += P;
    }
  }
}

void attend_avx2_units(const Attention& a, int64_t begin, int64_t end) { attend_tiled<false>(a, begin, end); }

// The same code where AVX-512VL gives 32 vector registers (blocks of 8 keys for three heads: 24 accumulators).
__attribute__((target("avx512f,avx512vl")))
void attend_avx512_units(const Attention& a, int64_t begin, int64_t end) { attend_tiled<true>(a, begin, end); }

template <void (*units)(const Attention&, int64_t, int64_t)>
void attend(const float* q, const int64_t* live, const at::Tensor& keys, const at::Tensor& values,
            int64_t S, int64_t H, int64_t H_kv, int64_t D, int64_t T, const Visible& visible, float* out) {
  const Attention a{q, live, keys.data_ptr<float>(), values.data_ptr<float>(), keys.stride(0), keys.stride(1),
                    keys.stride(2), values.stride(0), values.stride(1), values.stride(2), S, H, H_kv, D, T, visible, out};
  const int64_t count = (static_cast<int64_t>(visible.starts.size()) - 1) * H_kv;
  if (visible.spans * H * D < kParallelWork) units(a, 0, count);
  else at::parallel_for(0, count, 1, [&](int64_t begin, int64_t end) { units(a, begin, end); });
}

bool wide_registers() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"); }

}  // namespace

namespace draftverify {

at::Tensor llama_layers(at::Tensor x, const at::Tensor& cos, const at::Tensor& sin, const std::optional<at::Tensor>& mask,
                        const std::optional<at::Tensor>& valid, const std::optional<at::Tensor>& repeats,
                        at::TensorList keys, at::TensorList values, int64_t start, int64_t heads, int64_t kv_heads,
                        int64_t head_dim, at::TensorList norms, c10::ArrayRef<double> eps, at::IntArrayRef kind,
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
  // The live positions (flat b S + s, in order): all of them, less those `valid` marks False (a batch's
  // padding, which the mask hides and no one reads) and those that `repeats` an earlier live position
  // (repeats[j] >= 0: the caller vouches that position j has that position's token, position and keys
  // before it, so its state at every layer is the same: a batch's prompts that open alike). The layers
  // run on the live rows only; padding leaves as it came in, its keys and values zeros (a masked key's
  // value still meets a weight of 0); a repeated position gets its source's keys and values each layer
  // and its source's state at the end.
  std::vector<int64_t> live, padding, copied, sources;
  at::Tensor flat, same;
  if (valid.has_value()) {
    TORCH_CHECK(valid->scalar_type() == at::kBool && valid->dim() == 2 && valid->size(0) == rows && valid->size(1) == size,
                "llama_layers: valid must be boolean [B, S] like x's first two dimensions");
    flat = valid->reshape({n}).contiguous();
  }
  if (repeats.has_value()) {
    TORCH_CHECK(repeats->scalar_type() == at::kLong && repeats->dim() == 2 && repeats->size(0) == rows &&
                    repeats->size(1) == size,
                "llama_layers: repeats must be int64 [B, S] like x's first two dimensions");
    same = repeats->reshape({n}).contiguous();
  }
  const bool* marked = flat.defined() ? flat.data_ptr<bool>() : nullptr;
  const int64_t* source = same.defined() ? same.data_ptr<int64_t>() : nullptr;
  std::vector<int64_t> row_of(n, -1);  // each live position's row of the live states
  for (int64_t j = 0; j < n; ++j) {
    if (marked != nullptr && !marked[j]) {
      padding.push_back(j);
    } else if (source != nullptr && source[j] >= 0) {
      TORCH_CHECK(source[j] < j && row_of[source[j]] >= 0, "llama_layers: position ", j, " repeats ", source[j],
                  ", which is not an earlier live position");
      copied.push_back(j);
      sources.push_back(source[j]);
    } else {
      row_of[j] = static_cast<int64_t>(live.size());
      live.push_back(j);
    }
  }
  const int64_t m = static_cast<int64_t>(live.size());
  const Visible visible(seen, live, size, T);
  // three heads a tile where the CPU has the registers, unless the products keep to AVX2 (a CPU without AVX-512
  // as DRAFTVERIFY_KERNEL=panel-avx2 imitates it); the same bits either way
  const auto attend_all = !kind.empty() && kind[0] != kPanelAvx2 && wide_registers() ? attend<attend_avx512_units>
                                                                                       : attend<attend_avx2_units>;
  const bool all = padding.empty() && copied.empty();
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
    for (std::size_t c = 0; c < copied.size(); ++c) {  // a repeated position's keys and values: its source's
      const int64_t b = copied[c] / size, s = copied[c] % size, b0 = sources[c] / size, s0 = sources[c] % size;
      for (int64_t g = 0; g < H_kv; ++g) {
        std::copy_n(k + b0 * kb + g * kh + (start + s0) * kt, D, k + b * kb + g * kh + (start + s) * kt);
        std::copy_n(v + b0 * vb + g * vh + (start + s0) * vt, D, v + b * vb + g * vh + (start + s) * vt);
      }
    }
    attend_all(q.data_ptr<float>(), live.data(), keys[i], values[i], size, H, H_kv, D, T, visible, attended.data_ptr<float>());
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
  at::Tensor out = at::index_copy(x.view({n, width}), 0, kept, y);
  float* states = out.data_ptr<float>();
  for (std::size_t c = 0; c < copied.size(); ++c)
    std::copy_n(stream + row_of[sources[c]] * width, width, states + copied[c] * width);
  return out.view({rows, size, width});
}

at::Tensor rms_norm_rows(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && weight.dim() == 1 && x.dim() >= 1 &&
                  x.size(-1) == weight.size(0),
              "rms_norm: float32 rows [..., E] and a float32 weight [E]");
  const at::Tensor rows = x.contiguous(), w = weight.contiguous();
  at::Tensor out = at::empty_like(rows);
  const int64_t width = w.size(0);
  ::rms_norm(rows.data_ptr<float>(), width ? rows.numel() / width : 0, width, w.data_ptr<float>(), eps, out.data_ptr<float>());
  return out;
}

}  // namespace draftverify

TORCH_LIBRARY_FRAGMENT(draftverify, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor", &draftverify::rms_norm_rows);
  m.def("llama_layers(Tensor x, Tensor cos, Tensor sin, Tensor? mask, Tensor? valid, Tensor? repeats, Tensor[] keys, "
        "Tensor[] values, int start, int heads, int kv_heads, int head_dim, Tensor[] norms, float[] eps, int[] kind, "
        "Tensor[] weights, Tensor?[] scales, Tensor?[] offsets, Tensor?[] biases, int[] outputs) -> Tensor",
        &draftverify::llama_layers);
}
