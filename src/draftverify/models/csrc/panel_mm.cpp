// out [M, N] = x [M, K] @ W [K, N] (* scales [N]) (+ bias [N]) over W packed once in panels
// [P, K, width] (P = ceil(N / width), the last panel zero-padded; width 8 for AVX2, 16 for AVX-512),
// float32 or int8 (weight-only int8: activations and accumulation float32, the per-column scale applied
// once at the end). A panel's k-th row of weights is contiguous, so a pass over a panel is one
// sequential stream.
//
// Two instruction sets, picked per call (the `isa` argument; "avx512" only where the CPU has it):
// - AVX2 + FMA (every x86-64 CPU of the last decade; the build's flags): a panel's 8 columns are one
//   ymm a row, and a pass holds 12 accumulators: up to 12 rows read four panels side by side in blocks
//   of 3 rows, more rows two panels in blocks of 6 (plan8); the blocks of a pass take turns over
//   chunks of k, so the first streams each chunk from memory and the rest read it from L1 while the
//   prefetches run ahead (chunk8).
// - AVX-512F (compiled for it by a pragma, so the same build runs on AVX2-only CPUs): a panel's 16
//   columns are one zmm register a row. More than six rows of float32 weights read two neighbouring
//   panels a pass, up to 14 rows (28 accumulators, 2 weight vectors, a broadcast: each broadcast feeds
//   two FMAs), the weights loaded once per k for all of them; more rows run in blocks of 14 and the
//   rest, each a pass over the pair, then in L2. int8 panels run up to 24 rows a pass over one panel
//   (each weight converted once per k).
// Few rows split K over several accumulator sets, so the FMA latency does not bound the stream. The
// weights ahead are prefetched while these are consumed (not by the AVX-512 float32 blocks of one or
// two rows: kPrefetches512). Few rows read two to four panels side by side (AVX-512: up to six rows;
// AVX2: every count), each from its own part of the weights: one core streams several sequential reads
// faster than one (product_panels, product_panels8). Panels are shared among threads by
// at::parallel_for.
//
// Built with -mavx2 -mfma -fopenmp by draftverify.models.panel_mm at first use.

#include <immintrin.h>

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "panel_mm.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

#define UNROLL _Pragma("GCC unroll 32")  // loops over R and U (up to 24): the accumulators stay in registers

constexpr int64_t kPanel = 16;  // columns of a panel: a zmm (AVX-512), the block formats
constexpr int64_t kPanel2 = 8;  // columns of an AVX2 float32 / int8 panel: a ymm
constexpr int64_t kMaxRows = 6;  // rows of an AVX2 block, at most
constexpr int kMaxStreams = 4;  // panels a block reads side by side, at most (product_panels)
constexpr int64_t kPrefetch = 1024;  // bytes of W ahead of the ones being read (AVX2)

// One panel as a block reads it: its weights, where its columns go (the block's first row), how many
// of its columns are real (the last panel's may be fewer), the scales and bias of those columns.
template <typename Weights>
struct Panel {
  Weights w;  // const float* or const int8_t* [K, 16], or a BlockPanel
  float* out;
  int64_t cols;
  const float* scale;  // or nullptr
  const float* bias;  // or nullptr
};

// A block: R rows of x (stride ldx) times S panels, its instantiation's R and S (x, ldx, panels, K, ldo);
// x float32 activations, or one Q8Row a row (the 8-bit activation product).
template <typename Weights, typename X = float>
using Block = void (*)(const X*, int64_t, const Panel<Weights>*, int64_t, int64_t);

// The AVX2 float32 and int8 products read panels of 8 columns, a ymm a row: a pass of R rows over S
// panels side by side holds R S accumulators, so 3 rows read four panels (four streams; 16-column
// panels allowed one panel from three rows on), and a block of rows can pause after a chunk of k and
// leave its accumulators in L1 while the next block reads the same chunk (chunk8).
inline __m256 load_weights8(const float* w) { return _mm256_load_ps(w); }

inline __m256 load_weights8(const int8_t* w) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w))));
}

// accumulator sets over k for R rows of 8-column panels: two for one row, else one
constexpr int sets8(int R) { return R == 1 ? 2 : 1; }

constexpr int64_t kAccumulators8 = 12;  // ymm accumulators of an AVX2 block, at most (16 registers)

// Rows of x (stride ldx) times S panels w[s] [K, 8] over the k-steps [k0, k1), k-step k adding to
// accumulator set k % U: a ymm for each set, row and panel, loaded from and stored back to
// state [U][R][S][8], so that the blocks of rows of a pass take turns over chunks of k and the chunk
// is read from memory once (by the first block) and then from L1.
template <int R, int U, int S, typename W>
void chunk8(const float* x, int64_t ldx, const W* const* w, int64_t k0, int64_t k1, int64_t ahead, float* state) {
  constexpr int64_t line = 64 / (kPanel2 * sizeof(W));  // k-steps a cache line of a panel holds: 2 or 8
  static_assert(line % U == 0);
  __m256 acc[U][R][S];
  UNROLL for (int u = 0; u < U; ++u)
    UNROLL for (int r = 0; r < R; ++r)
      UNROLL for (int s = 0; s < S; ++s) acc[u][r][s] = _mm256_load_ps(state + ((u * R + r) * S + s) * kPanel2);
  const auto step = [&](int64_t k, int u) {
    if constexpr (R + 1 + R * S * U <= 16) {  // the rows' broadcasts held, a panel's weights at a time
      __m256 a[R];
      UNROLL for (int r = 0; r < R; ++r) a[r] = _mm256_broadcast_ss(x + r * ldx + k);
      UNROLL for (int s = 0; s < S; ++s) {
        const __m256 v = load_weights8(w[s] + k * kPanel2);
        UNROLL for (int r = 0; r < R; ++r) acc[u][r][s] = _mm256_fmadd_ps(a[r], v, acc[u][r][s]);
      }
    } else {  // the panels' weights held, a row's broadcast at a time
      __m256 v[S];
      UNROLL for (int s = 0; s < S; ++s) v[s] = load_weights8(w[s] + k * kPanel2);
      UNROLL for (int r = 0; r < R; ++r) {
        const __m256 a = _mm256_broadcast_ss(x + r * ldx + k);
        UNROLL for (int s = 0; s < S; ++s) acc[u][r][s] = _mm256_fmadd_ps(a, v[s], acc[u][r][s]);
      }
    }
  };
  int64_t k = k0;  // a multiple of line
  for (; k + line <= k1; k += line) {
    UNROLL for (int s = 0; s < S; ++s) _mm_prefetch(reinterpret_cast<const char*>(w[s] + k * kPanel2) + ahead, _MM_HINT_T0);
    UNROLL for (int j = 0; j < line; ++j) step(k + j, j % U);
  }
  for (; k < k1; ++k) step(k, k % U);
  UNROLL for (int u = 0; u < U; ++u)
    UNROLL for (int r = 0; r < R; ++r)
      UNROLL for (int s = 0; s < S; ++s) _mm256_store_ps(state + ((u * R + r) * S + s) * kPanel2, acc[u][r][s]);
}

template <typename W>
using Chunk8 = void (*)(const float*, int64_t, const W* const*, int64_t, int64_t, int64_t, float*);

// The chunk8 of R rows (entry R - 1) on S panels; none where they would take more than kAccumulators8
// (plan8 never asks for them).
template <typename W, int S, int R>
constexpr Chunk8<W> chunk8_of() {
  if constexpr (R * S * sets8(R) <= kAccumulators8) return &chunk8<R, sets8(R), S, W>;
  else return nullptr;
}
template <typename W, int S, std::size_t... I>
constexpr std::array<Chunk8<W>, sizeof...(I)> chunks8(std::index_sequence<I...>) {
  return {chunk8_of<W, S, static_cast<int>(I) + 1>()...};
}

// out rows (stride ldo) of panels p[0..S) = the sums of U sets in state [U][R][S][8] (* scale) (+ bias),
// the first p[s].cols columns. Scale and bias as one explicit FMA (GCC contracts a multiply and an
// add where it sees both).
template <typename W>
void finish8(const float* state, int R, int U, int S, const Panel<const W*>* p, int64_t ldo) {
  for (int s = 0; s < S; ++s) {
    const int64_t n = p[s].cols;
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 scale = p[s].scale == nullptr ? _mm256_set1_ps(1.0f) : _mm256_loadu_ps(p[s].scale);  // padded
    const __m256 bias = p[s].bias == nullptr ? _mm256_setzero_ps() : _mm256_maskload_ps(p[s].bias, mask);
    for (int r = 0; r < R; ++r) {
      __m256 o = _mm256_load_ps(state + (r * S + s) * kPanel2);
      for (int u = 1; u < U; ++u) o = _mm256_add_ps(o, _mm256_load_ps(state + ((u * R + r) * S + s) * kPanel2));
      if (p[s].scale != nullptr && p[s].bias != nullptr)
        o = _mm256_fmadd_ps(o, scale, bias);
      else if (p[s].scale != nullptr)
        o = _mm256_mul_ps(o, scale);
      else if (p[s].bias != nullptr)
        o = _mm256_add_ps(o, bias);
      _mm256_maskstore_ps(p[s].out + r * ldo, mask, o);
    }
  }
}

// What one product reads and writes (the op's arguments as pointers).
template <typename W>
struct Product {
  const float* x;  // [M, K]
  int64_t M, K;
  const W* panels;  // [P, K, width]: 16 (AVX-512) or 8 (AVX2) columns a panel
  int64_t N;
  const float* scales;  // [P * width] or nullptr
  const float* bias;  // [N] or nullptr
  float* out;  // [M, N]
};

// run(first row, rows) over M rows in blocks of max_rows rows, the last one the rest. The first block
// over a panel streams it from memory and the later ones read it from L2, so the first holds as many
// rows as a pass takes: its arithmetic hides behind the stream, and the rest is the arithmetic of the
// few rows left (2026-11-28, AVX-512, 17 rows of the real target as 14 + 3: a 27.3-27.7 ms call against
// 31.1-32.2 as 9 + 8, r(17) 1.71-1.73 against 1.99-2.05; the AVX2 16-column panels of then, 9 rows as
// 6 + 3: 34.0-34.6 ms against 35.5-36.4 as 5 + 4; three alternating rounds of bench model-cost). The
// AVX-512 and block-format products split their rows here, so a row meets the same block size, hence
// the same accumulator sets, in the float32 and the block formats (what makes their products
// bit-identical); the AVX2 8-column product splits them in product_panels8.
template <typename Run>
inline void row_blocks(int64_t M, int64_t max_rows, Run run) {
  for (int64_t row = 0; row < M;) {
    const int64_t rows = std::min(max_rows, M - row);
    run(row, rows);
    row += rows;
  }
}

// Twelve independent FMA chains of `steps` each in registers (enough to hide the FMA latency on two
// units): float32 multiply-adds at the core's issue rate, no memory. Returns the seconds taken and
// adds the chains' sum to *sink so the work cannot be elided.
double fma_chains(int64_t steps, float* sink) {
  __m256 a[12];
  UNROLL for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_ps(static_cast<float>(j));
  const __m256 b = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) UNROLL for (int j = 0; j < 12; ++j) a[j] = _mm256_fmadd_ps(a[j], b, c);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  UNROLL for (int j = 0; j < 12; ++j) *sink += _mm256_cvtss_f32(a[j]);
  return seconds;
}

#pragma GCC push_options
#pragma GCC target("avx512f")

// fma_chains on zmm registers (sixteen floats a multiply-add).
double fma_chains512(int64_t steps, float* sink) {
  __m512 a[12];
  UNROLL for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512 b = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) UNROLL for (int j = 0; j < 12; ++j) a[j] = _mm512_fmadd_ps(a[j], b, c);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  UNROLL for (int j = 0; j < 12; ++j) *sink += _mm512_reduce_add_ps(a[j]);
  return seconds;
}

// bytes of W ahead of the ones being read: with 16-column panels 2048 ran 17 rows 8-15% faster than
// 1024 and 9 rows ~5%, one row alike (no prefetch ran 5-17 rows 30-50% slower); with 32-column float32
// panels 4096 (the same 32 k-steps ahead) ran 5-12 rows up to 6% faster than 8192 in a standalone
// probe, kept for 16-column float32 panels (64 k-steps ahead); int8 panels (16 bytes a k-step, 256
// ahead) ran as with 2048 (576x1536, 5 rows 85 us both)
constexpr int64_t kPrefetch512 = 4096;
// rows of a block: a pair of float32 panels in one pass takes 28 accumulators, 2 weight vectors and a
// broadcast; the block formats split their rows alike (bit-identical products)
constexpr int kMaxRows512 = 14;

// Rows of a block by weight type: float32 14 (a pair of panels, two zmm a row); int8 24 (one panel, a
// zmm a row: over two panels' columns its conversions ran 2-12 rows 10-20% slower).
template <typename W>
constexpr int kRows512 = std::is_same_v<W, float> ? kMaxRows512 : 24;
// Whether a block also prefetches 4 kPrefetch512 ahead into L2: float32 from 8 rows, where the FMAs
// and the weight stream are both near their limits (576x1536, 9 rows 11-15% faster, 12 rows 5-7%
// in a standalone probe); fewer rows ran 10-20% slower with it (more memory operations a k-step).
template <typename W, int R>
constexpr bool kFar512 = std::is_same_v<W, float> && R >= 8;
// Whether a block prefetches at all: not float32 blocks of one or two rows, whose stream the hardware
// prefetcher keeps up with alone (2026-11-27, a machine at 40 GB/s copy bandwidth, one row, three
// alternating rounds: 576x49152 2.72-2.81 ms without against 2.96-3.03 with, 1536x576 88-101 us
// against 96-100, 576x1536 89-96 against 94-99; two prefetches a 128-byte k-step are memory
// operations the one-row pass does not need; those panels had 32 columns).
template <typename W, int R>
constexpr bool kPrefetches512 = !(std::is_same_v<W, float> && R <= 2);

// One core reads a single sequential stream slower than several side by side (2026-11-29, Intel Xeon,
// one thread, a one-row product over 200 cycled 576 x 1536 float32 matrices: 9.8-11.5 GB/s as one
// stream, 12.8-13.1 as four, 13.2-13.8 as six or eight; its copy bandwidth 11-13 GB/s). A product of
// up to kStreamRows rows reads streams512<W>(R) panels side by side, each from its own part of the
// weights (product_panels below): float32 four (R by 4 accumulators, the weights loaded as they are),
// int8 and the block formats as many as the registers hold beside the R rows' accumulators and the
// weights' conversion (four at five and six rows ran 10-40% slower than two there: registers spilled).
constexpr int kStreamRows = 6;
constexpr int converted_streams512(int R) { return R <= 2 ? 4 : R == 3 ? 3 : R <= kStreamRows ? 2 : 1; }
template <typename W>
constexpr int streams512(int R) { return std::is_same_v<W, float> ? (R <= kStreamRows ? 4 : 1) : converted_streams512(R); }

// accumulator sets over k for R rows: at least 8 independent FMA chains (latency 4, up to 2 per
// cycle) counting the panels read side by side, so two for one row and for seven (a block format
// reads seven rows on one panel; float32 on a pair keeps the same sets), else one (a power of two,
// so the sets divide a 32-step block of the block formats below and every k has the same set in
// both: their products are then bit-identical to the float32 product of the same weights; which
// panels a block reads beside one another does not change a column's arithmetic)
constexpr int sets512(int R) { return R == 1 || R == 7 ? 2 : 1; }

inline __m512 load_weights512(const float* w) { return _mm512_loadu_ps(w); }

// Prefetch the weights Distance bytes ahead of the k-steps k..k+U-1 of a panel w [K, kPanel]
// into L1; with Far, also 4 Distance ahead into L2.
template <int64_t Distance, int U, bool Far, typename W>
inline void prefetch_panel512(const W* w, int64_t k) {
  constexpr int64_t row = kPanel * sizeof(W);  // bytes of W per k-step: 64 (float32) or 16 (int8)
  const char* ahead = reinterpret_cast<const char*>(w) + Distance;
  UNROLL for (int u = 0; u < U; ++u) {
    const int64_t at = (k + u) * row;
    if constexpr (row >= 64) {
      UNROLL for (int64_t line = 0; line < row; line += 64) {
        _mm_prefetch(ahead + at + line, _MM_HINT_T0);
        if constexpr (Far) _mm_prefetch(ahead + 3 * Distance + at + line, _MM_HINT_T1);
      }
    } else if (at % 64 == 0) {
      _mm_prefetch(ahead + at, _MM_HINT_T0);
    }
  }
}

inline __m512 load_weights512(const int8_t* w) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w))));
}

// out (+ stride ldo a row) = v (* scale) (+ bias) for the first n of 16 columns (scales are padded).
// Scale and bias as one explicit FMA: a multiply and an add the compiler may contract in one block
// and not in another would give a row other bits in another block (GCC contracts vector arithmetic).
inline void store_columns512(const __m512* v, int R, int64_t ldo, float* out, int64_t n, const float* scale,
                             const float* bias) {
  const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1);
  const __m512 s = scale == nullptr ? _mm512_set1_ps(1.0f) : _mm512_loadu_ps(scale);
  const __m512 b = bias == nullptr ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, bias);
  for (int r = 0; r < R; ++r) {
    __m512 o = v[r];
    if (scale != nullptr && bias != nullptr)
      o = _mm512_fmadd_ps(o, s, b);
    else if (scale != nullptr)
      o = _mm512_mul_ps(o, s);
    else if (bias != nullptr)
      o = _mm512_add_ps(o, b);
    _mm512_mask_storeu_ps(out + r * ldo, mask, o);
  }
}

// Rows of x (stride ldx) times S panels p[s].w [K, kPanel]: R rows, U accumulator sets over k, a zmm
// for each row of each panel: S > 1 reads S panels side by side, each the next of its own stream
// (product_panels below), or a pair of neighbouring panels (more rows, pairs512).
template <int R, int U, int S, typename W>
void panel_block512(const float* x, int64_t ldx, const Panel<const W*>* p, int64_t K, int64_t ldo) {
  __m512 acc[U][R][S];
  UNROLL for (int u = 0; u < U; ++u)
    UNROLL for (int r = 0; r < R; ++r)
      UNROLL for (int s = 0; s < S; ++s) acc[u][r][s] = _mm512_setzero_ps();
  const W* w[S];
  UNROLL for (int s = 0; s < S; ++s) w[s] = p[s].w;
  int64_t k = 0;
  for (; k + U <= K; k += U) {
    if constexpr (kPrefetches512<W, R>)
      UNROLL for (int s = 0; s < S; ++s) prefetch_panel512<kPrefetch512, U, kFar512<W, R>>(w[s], k);
    UNROLL for (int u = 0; u < U; ++u) {
      __m512 weights[S];
      UNROLL for (int s = 0; s < S; ++s) weights[s] = load_weights512(w[s] + (k + u) * kPanel);
      UNROLL for (int r = 0; r < R; ++r) {
        const __m512 a = _mm512_set1_ps(x[r * ldx + k + u]);
        UNROLL for (int s = 0; s < S; ++s) acc[u][r][s] = _mm512_fmadd_ps(a, weights[s], acc[u][r][s]);
      }
    }
  }
  for (; k < K; ++k) {
    UNROLL for (int s = 0; s < S; ++s) {
      const __m512 weights = load_weights512(w[s] + k * kPanel);
      UNROLL for (int r = 0; r < R; ++r)
        acc[0][r][s] = _mm512_fmadd_ps(_mm512_set1_ps(x[r * ldx + k]), weights, acc[0][r][s]);
    }
  }
  UNROLL for (int u = 1; u < U; ++u)
    UNROLL for (int r = 0; r < R; ++r)
      UNROLL for (int s = 0; s < S; ++s) acc[0][r][s] = _mm512_add_ps(acc[0][r][s], acc[u][r][s]);
  UNROLL for (int s = 0; s < S; ++s) {
    __m512 v[R];
    UNROLL for (int r = 0; r < R; ++r) v[r] = acc[0][r][s];
    store_columns512(v, R, ldo, p[s].out, p[s].cols, p[s].scale, p[s].bias);
  }
}

// The AVX-512 float32 blocks by rows over a pair of neighbouring panels (entry R - 1: R rows).
template <std::size_t... I>
constexpr std::array<Block<const float*>, sizeof...(I)> pairs512(std::index_sequence<I...>) {
  return {&panel_block512<I + 1, sets512(I + 1), 2, float>...};
}

// The AVX-512 blocks by rows (entry R - 1: R rows), each on one panel or (Side) on streams512<W>(R) side by side.
template <typename W, bool Side, std::size_t... I>
constexpr std::array<Block<const W*>, sizeof...(I)> blocks512(std::index_sequence<I...>) {
  return {&panel_block512<I + 1, sets512(I + 1), Side ? streams512<W>(I + 1) : 1, W>...};
}

// GGML's block formats along k (blocks of 32 k-steps of one column, one float16 scale d each):
// Q4_1, w = d q + m with q in 0..15 and a float16 offset m; Q8_0, w = d q with q an int8. A panel's
// codes are [K / 2, 16] bytes for Q4_1 (byte c of pair j: q[2j][c] | q[2j + 1][c] << 4) and [K, 16]
// int8 for Q8_0; its scales and offsets [K / 32, 16] float16. Each weight is rebuilt in registers
// exactly as the float32 weight dequantized from the block (q d is exact in float32, so one FMA
// rounds q d + m as float32 arithmetic does), then used as panel_block512 uses a float32 weight: the
// same accumulator set per k, the same order, so the product is bit-identical to the float32
// product over the dequantized weights while streaming 5 (Q4_1) or 8.5 (Q8_0) bits per weight.
constexpr int64_t kBlock = 32;

template <int Bits>
struct BlockPanel {
  const uint8_t* codes;  // the panel's codes (int8 for Bits = 8)
  const uint16_t* scales;  // [K / 32, 16] float16
  const uint16_t* offsets;  // [K / 32, 16] float16, Bits = 4 only
};

template <int R, int U, int S>
inline void accumulate512(__m512 (&acc)[U][R][S], const float (&x)[R][kBlock], int64_t k, int s, __m512 weights) {
  UNROLL for (int r = 0; r < R; ++r)
    acc[k % U][r][s] = _mm512_fmadd_ps(_mm512_set1_ps(x[r][k]), weights, acc[k % U][r][s]);
}

// Rows of x (stride ldx) times S block-format panels p[s].w: R rows, U accumulator sets over k, as
// panel_block512 (S panels side by side).
template <int R, int U, int S, int Bits>
void block_panel512(const float* x, int64_t ldx, const Panel<BlockPanel<Bits>>* p, int64_t K, int64_t ldo) {
  static_assert(kBlock % U == 0, "accumulator sets must divide a block");
  constexpr int64_t code_bytes = kBlock * kPanel * Bits / 8;  // per block
  __m512 acc[U][R][S];
  UNROLL for (int u = 0; u < U; ++u)
    UNROLL for (int r = 0; r < R; ++r)
      UNROLL for (int s = 0; s < S; ++s) acc[u][r][s] = _mm512_setzero_ps();
  for (int64_t b = 0; b < K / kBlock; ++b) {
    // the block's activations of the R rows side by side: one base register for every broadcast
    // (R row pointers at stride ldx ran out of registers and went through xmm moves, 2026-11-29)
    alignas(64) float xb[R][kBlock];
    UNROLL for (int r = 0; r < R; ++r) std::memcpy(xb[r], x + r * ldx + b * kBlock, sizeof(xb[r]));
    // the S panels' weights k-step by k-step, so the accumulators of all of them are chains in flight
    const uint8_t* codes[S];
    __m512 d[S], m[S];
    UNROLL for (int s = 0; s < S; ++s) {
      const BlockPanel<Bits>& w = p[s].w;
      codes[s] = w.codes + b * code_bytes;
      for (int64_t line = 0; line < code_bytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(codes[s]) + kPrefetch512 + line, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w.scales + (b + 8) * kPanel), _MM_HINT_T0);
      d[s] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.scales + b * kPanel)));
      if constexpr (Bits == 4) {
        _mm_prefetch(reinterpret_cast<const char*>(w.offsets + (b + 8) * kPanel), _MM_HINT_T0);
        m[s] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.offsets + b * kPanel)));
      }
    }
    if constexpr (Bits == 4) {
      const __m512i low = _mm512_set1_epi32(0xF);
      UNROLL for (int j = 0; j < kBlock / 2; ++j)
        UNROLL for (int s = 0; s < S; ++s) {
          const __m512i pair = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes[s] + j * kPanel)));
          accumulate512<R, U, S>(acc, xb, 2 * j, s, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(pair, low)), d[s], m[s]));
          accumulate512<R, U, S>(acc, xb, 2 * j + 1, s, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(pair, 4)), d[s], m[s]));
        }
    } else {
      UNROLL for (int t = 0; t < kBlock; ++t)
        UNROLL for (int s = 0; s < S; ++s) {
          const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes[s] + t * kPanel));
          accumulate512<R, U, S>(acc, xb, t, s, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d[s]));
        }
    }
  }
  UNROLL for (int u = 1; u < U; ++u)
    UNROLL for (int r = 0; r < R; ++r)
      UNROLL for (int s = 0; s < S; ++s) acc[0][r][s] = _mm512_add_ps(acc[0][r][s], acc[u][r][s]);
  UNROLL for (int s = 0; s < S; ++s) {
    __m512 v[R];
    UNROLL for (int r = 0; r < R; ++r) v[r] = acc[0][r][s];
    store_columns512(v, R, ldo, p[s].out, p[s].cols, nullptr, p[s].bias);
  }
}

// The block-format blocks by rows, as blocks512.
template <int Bits, bool Side, std::size_t... I>
constexpr std::array<Block<BlockPanel<Bits>>, sizeof...(I)> block_table512(std::index_sequence<I...>) {
  return {&block_panel512<I + 1, sets512(I + 1), Side ? converted_streams512(I + 1) : 1, Bits>...};
}

#pragma GCC pop_options

// The block formats times activations rounded to 8 bits per block of 32, as llama.cpp computes them
// (its Q8_1 / Q8_0 activations): per row and block, d_x = max |x| / 127, q_x = round(x 127 / max |x|)
// (to nearest even; 0 where the block is 0), so each activation is read as d_x q_x. A block's dot
// product with a column is then one integer sum of 32 products (exact) scaled once:
//   Q4_1: d_w d_x sum(q_w q_x) + m_w s_x with s_x = d_x sum(q_x);
//   Q8_0: d_w d_x sum(q_w q_x),
// accumulated over the blocks in order, one float32 chain per row and column: a row's result does not
// depend on the other rows of the call. The integer sums run on AVX-512 VNNI (vpdpbusd: 64 byte
// products a instruction, four times the float32 FMA's 16), unsigned weights times signed
// activations: Q4_1 codes are 0..15; Q8_0 codes are stored as q + 128, and 128 sum(q_x) is taken off.
// A panel's codes per block: Q4_1 [4, 16, 4] bytes (group g, column c, t: q[4g + t][c] in the low
// nibble, q[16 + 4g + t][c] in the high one), Q8_0 [8, 16, 4] (group g, column c, t: q[4g + t][c] + 128).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vnni")

constexpr int kMaxRowsQ8 = 8;  // 8 integer sums and 8 float32 accumulators beside 8 weight vectors

// One row's blocks: codes q [K], per block d_x and s_x (Q4_1) or -128 sum(q_x) (Q8_0, as an int).
struct Q8Row {
  const int8_t* q;
  const float* d;
  const float* s;
  const int32_t* minus;
};

// Rows rows[0..R) times S panels p[s].w, the panels one after the other per block of 32 k-steps.
template <int R, int S, int Bits>
void q8_panel512(const Q8Row* rows, int64_t, const Panel<BlockPanel<Bits>>* p, int64_t K, int64_t ldo) {
  constexpr int64_t code_bytes = kBlock * kPanel * Bits / 8;  // per block
  __m512 acc[R][S];
  UNROLL for (int r = 0; r < R; ++r)
    UNROLL for (int s = 0; s < S; ++s) acc[r][s] = _mm512_setzero_ps();
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < K / kBlock; ++b)
    UNROLL for (int s = 0; s < S; ++s) {
      const BlockPanel<Bits>& w = p[s].w;
      const uint8_t* codes = w.codes + b * code_bytes;
      for (int64_t line = 0; line < code_bytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(codes) + kPrefetch512 + line, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w.scales + (b + 8) * kPanel), _MM_HINT_T0);
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.scales + b * kPanel)));
      __m512i wq[8];
      __m512 mw = _mm512_setzero_ps();
      if constexpr (Bits == 4) {
        _mm_prefetch(reinterpret_cast<const char*>(w.offsets + (b + 8) * kPanel), _MM_HINT_T0);
        mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.offsets + b * kPanel)));
        UNROLL for (int g = 0; g < 4; ++g) {
          const __m512i v = _mm512_loadu_si512(codes + 64 * g);
          wq[g] = _mm512_and_si512(v, nibble);
          wq[g + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
        }
      } else {
        UNROLL for (int g = 0; g < 8; ++g) wq[g] = _mm512_loadu_si512(codes + 64 * g);
      }
      UNROLL for (int r = 0; r < R; ++r) {
        const int8_t* x = rows[r].q + b * kBlock;
        __m512i sum = Bits == 4 ? _mm512_setzero_si512() : _mm512_set1_epi32(rows[r].minus[b]);
        UNROLL for (int g = 0; g < 8; ++g) {
          int32_t four;
          std::memcpy(&four, x + 4 * g, 4);
          sum = _mm512_dpbusd_epi32(sum, wq[g], _mm512_set1_epi32(four));
        }
        acc[r][s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, _mm512_set1_ps(rows[r].d[b])), acc[r][s]);
        if constexpr (Bits == 4) acc[r][s] = _mm512_fmadd_ps(mw, _mm512_set1_ps(rows[r].s[b]), acc[r][s]);
      }
    }
  UNROLL for (int s = 0; s < S; ++s) {
    __m512 v[R];
    UNROLL for (int r = 0; r < R; ++r) v[r] = acc[r][s];
    store_columns512(v, R, ldo, p[s].out, p[s].cols, nullptr, p[s].bias);
  }
}

// Panels side by side for the 8-bit activation product: one row four, two rows two.
constexpr int kStreamRowsQ8 = 2;
constexpr int panelsQ8(int R) { return R == 1 ? 4 : R == 2 ? 2 : 1; }

// Its blocks by rows, as blocks512.
template <int Bits, bool Side, std::size_t... I>
constexpr std::array<Block<BlockPanel<Bits>, Q8Row>, sizeof...(I)> q8_table512(std::index_sequence<I...>) {
  return {&q8_panel512<I + 1, Side ? panelsQ8(I + 1) : 1, Bits>...};
}

#pragma GCC pop_options

// The same product on AVX2 (with F16C for the scales), for CPUs without VNNI: the integer sums of a
// block from vpmaddubsw (unsigned x signed bytes, adjacent pairs summed to 16 bits) and vpmaddwd (the
// pairs of a column's group of 4 summed to 32 bits), 8 columns a ymm. Q8_0: the codes' q + 128 as q;
// |q| (0..128, unsigned) times x sign(q) (-127..127), so each pair is at most 2 x 128 x 127 < 2^15 and
// never saturates, and the block sum is sum(q_w q_x) itself (VNNI: sum((q_w + 128) q_x) - 128 sum(q_x),
// the same integer). Q4_1: the nibbles (0..15) times x directly. The integer sums are exact and the
// float32 arithmetic after them is the VNNI block's, lane by lane in the same order, so a row's result
// is the VNNI product's bit for bit (tests/models/test_ggml_blocks.py).
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

constexpr int kMaxRowsQ8Avx2 = 2;  // 4 integer sums, 4 float32 accumulators, the weights and their magnitudes

template <int R, int Bits>
void q8_panel2(const Q8Row* rows, int64_t, const Panel<BlockPanel<Bits>>* p, int64_t K, int64_t ldo) {
  constexpr int64_t code_bytes = kBlock * kPanel * Bits / 8;  // per block
  __m256 acc[R][2];
  UNROLL for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const BlockPanel<Bits>& w = p[0].w;
  const __m256i ones = _mm256_set1_epi16(1), nibble = _mm256_set1_epi8(0x0F), bias128 = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const uint8_t* codes = w.codes + b * code_bytes;
    for (int64_t line = 0; line < code_bytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(codes) + kPrefetch + line, _MM_HINT_T0);
    __m256i sum[R][2];
    UNROLL for (int r = 0; r < R; ++r) sum[r][0] = sum[r][1] = _mm256_setzero_si256();
    UNROLL for (int g = 0; g < 8; ++g) {
      __m256i magnitude[2], sign[2];  // per half (columns 0-7, 8-15): the unsigned operand, and what signs x
      UNROLL for (int h = 0; h < 2; ++h) {
        if constexpr (Bits == 4) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * (g % 4) + 32 * h));
          magnitude[h] = _mm256_and_si256(g < 4 ? v : _mm256_srli_epi16(v, 4), nibble);
        } else {
          sign[h] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * g + 32 * h)), bias128);
          magnitude[h] = _mm256_abs_epi8(sign[h]);
        }
      }
      UNROLL for (int r = 0; r < R; ++r) {
        int32_t four;
        std::memcpy(&four, rows[r].q + b * kBlock + 4 * g, 4);
        const __m256i x = _mm256_set1_epi32(four);
        UNROLL for (int h = 0; h < 2; ++h) {
          const __m256i pairs = _mm256_maddubs_epi16(magnitude[h], Bits == 4 ? x : _mm256_sign_epi8(x, sign[h]));
          sum[r][h] = _mm256_add_epi32(sum[r][h], _mm256_madd_epi16(pairs, ones));
        }
      }
    }
    UNROLL for (int h = 0; h < 2; ++h) {
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales + b * kPanel + 8 * h)));
      const __m256 mw = Bits == 4 ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.offsets + b * kPanel + 8 * h)))
                                  : _mm256_setzero_ps();
      UNROLL for (int r = 0; r < R; ++r) {
        acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r][h]), _mm256_mul_ps(dw, _mm256_set1_ps(rows[r].d[b])), acc[r][h]);
        if constexpr (Bits == 4) acc[r][h] = _mm256_fmadd_ps(mw, _mm256_set1_ps(rows[r].s[b]), acc[r][h]);
      }
    }
  }
  UNROLL for (int r = 0; r < R; ++r) {
    alignas(32) float row[kPanel];
    _mm256_store_ps(row, acc[r][0]);
    _mm256_store_ps(row + 8, acc[r][1]);
    if (p[0].bias != nullptr)
      for (int64_t c = 0; c < p[0].cols; ++c) row[c] += p[0].bias[c];
    std::memcpy(p[0].out + r * ldo, row, p[0].cols * sizeof(float));
  }
}

template <int Bits, std::size_t... I>
constexpr std::array<Block<BlockPanel<Bits>, Q8Row>, sizeof...(I)> q8_table2(std::index_sequence<I...>) {
  return {&q8_panel2<I + 1, Bits>...};
}

#pragma GCC pop_options

// The activations of x [M, K] rounded per block of 32 (see above): codes [M, K], d_x [M, K / 32],
// s_x [M, K / 32] and -128 sum(q_x) [M, K / 32], a block in four AVX2 vectors.
struct Q8Activations {
  std::vector<int8_t> q;
  std::vector<float> d, s;
  std::vector<int32_t> minus;

  Q8Activations(const float* x, int64_t M, int64_t K) : q(M * K), d(M * K / kBlock), s(M * K / kBlock), minus(M * K / kBlock) {
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // undoes the packs' lane interleaving
    for (int64_t i = 0; i < M * K / kBlock; ++i) {  // a block of 32: four AVX2 vectors
      __m256 v[4];
      for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(x + i * kBlock + 8 * j);
      const __m256 top = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], magnitude), _mm256_and_ps(v[1], magnitude)),
                                       _mm256_max_ps(_mm256_and_ps(v[2], magnitude), _mm256_and_ps(v[3], magnitude)));
      __m128 half = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
      half = _mm_max_ps(half, _mm_movehl_ps(half, half));
      const float amax = _mm_cvtss_f32(_mm_max_ss(half, _mm_movehdup_ps(half)));
      const __m256 inverse = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      __m256i codes[4], total = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {  // x 127 / amax rounded to nearest even (the default rounding mode)
        codes[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], inverse));
        total = _mm256_add_epi32(total, codes[j]);
      }
      const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(codes[0], codes[1]), _mm256_packs_epi32(codes[2], codes[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q.data() + i * kBlock), _mm256_permutevar8x32_epi32(bytes, order));
      alignas(32) int32_t lanes[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), total);
      const int32_t sum = lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
      d[i] = amax / 127.0f;
      s[i] = d[i] * static_cast<float>(sum);
      minus[i] = -128 * sum;
    }
  }

  Q8Row row(int64_t m, int64_t K) const {
    const int64_t nb = K / kBlock;
    return {q.data() + m * K, d.data() + m * nb, s.data() + m * nb, minus.data() + m * nb};
  }
};

// panel(p, row) of product_panels for a block-format W [K, N] (16 columns a panel) into out [M, N] (+ bias).
template <int Bits>
auto block_panel(BlockPanel<Bits> w, int64_t K, int64_t N, float* out, const float* bias) {
  const int64_t code_bytes = K * kPanel * Bits / 8, scale_count = K / kBlock * kPanel;  // per panel
  return [=](int64_t p, int64_t row) {
    const int64_t col = p * kPanel;
    const BlockPanel<Bits> panel{w.codes + p * code_bytes, w.scales + p * scale_count,
                                 Bits == 4 ? w.offsets + p * scale_count : nullptr};
    return Panel<BlockPanel<Bits>>{panel, out + row * N + col, std::min(kPanel, N - col), nullptr,
                                   bias == nullptr ? nullptr : bias + col};
  };
}

// run(begin, end) over ranges of the 16-column panels of a block-format W [K, N], shared among threads.
template <typename Run>
void block_panels(int64_t K, int64_t N, Run run) {
  at::parallel_for(0, (N + kPanel - 1) / kPanel, std::max<int64_t>(1, 8192 / K), run);
}

// The panels [begin, end) of a product for M rows of x (a row every ldx: K floats, or one Q8Row) into
// out [M, ldo]. M rows up to side's size read S = streams(M) panels side by side (side[M - 1]): the
// range in S equal contiguous parts, each pass the next panel of every part, so each part is one
// sequential stream; the fewer than S panels left run one by one (blocks[M - 1]). More rows run panel
// by panel in the blocks of row_blocks, or with `pairs` two neighbouring panels a pass (pairs[rows - 1]
// for a block of rows), the last one alone where the count is odd. panel(p, row) is panel p as a block
// from row `row` reads it.
template <typename Weights, typename X, typename Blocks, typename Side, typename Make>
void product_panels(int64_t begin, int64_t end, int64_t M, const X* x, int64_t ldx, int64_t K, int64_t ldo,
                    const Blocks& blocks, const Side& side, int (*streams)(int), Make panel, const Blocks* pairs = nullptr) {
  if (M <= static_cast<int64_t>(side.size())) {
    const int S = streams(static_cast<int>(M));
    const int64_t part = (end - begin) / S;
    for (int64_t i = 0; i < part; ++i) {
      Panel<Weights> each[kMaxStreams];
      for (int s = 0; s < S; ++s) each[s] = panel(begin + s * part + i, 0);
      side[M - 1](x, ldx, each, K, ldo);
    }
    begin += S * part;
  }
  for (int64_t p = begin; p < end;) {
    const bool two = pairs != nullptr && p + 1 < end;
    row_blocks(M, static_cast<int64_t>(blocks.size()), [&](int64_t row, int64_t rows) {
      const Panel<Weights> both[2] = {panel(p, row), panel(two ? p + 1 : p, row)};
      (two ? (*pairs)[rows - 1] : blocks[rows - 1])(x + row * ldx, ldx, both, K, ldo);
    });
    p += two ? 2 : 1;
  }
}

// out [M, N] = x [M, K] rounded to 8 bits @ W (+ bias) for W in a block format, as product_panels reads it.
template <int Bits>
void q8_mm_impl(const float* x, int64_t M, int64_t K, BlockPanel<Bits> w, int64_t N, const float* bias, float* out,
                bool vnni) {
  static constexpr auto blocks = q8_table512<Bits, false>(std::make_index_sequence<kMaxRowsQ8>());
  static constexpr auto side = q8_table512<Bits, true>(std::make_index_sequence<kStreamRowsQ8>());
  static constexpr auto blocks_avx2 = q8_table2<Bits>(std::make_index_sequence<kMaxRowsQ8Avx2>());
  static constexpr std::array<Block<BlockPanel<Bits>, Q8Row>, 0> none{};  // AVX2: one panel a pass
  const Q8Activations a(x, M, K);
  std::vector<Q8Row> rows(M);
  for (int64_t m = 0; m < M; ++m) rows[m] = a.row(m, K);
  block_panels(K, N, [&](int64_t begin, int64_t end) {
    if (vnni)
      product_panels<BlockPanel<Bits>>(begin, end, M, rows.data(), 1, K, N, blocks, side, &panelsQ8,
                                       block_panel(w, K, N, out, bias));
    else
      product_panels<BlockPanel<Bits>>(begin, end, M, rows.data(), 1, K, N, blocks_avx2, none, &panelsQ8,
                                       block_panel(w, K, N, out, bias));
  });
}

// out [M, N] = x [M, K] @ W (+ bias) for W in a block format, panels shared among threads, as
// product_panels reads them (blocks of at most 14 rows, as the float32 AVX-512 product).
template <int Bits>
void block_mm_impl(const float* x, int64_t M, int64_t K, BlockPanel<Bits> w, int64_t N, const float* bias, float* out) {
  static constexpr auto blocks = block_table512<Bits, false>(std::make_index_sequence<kMaxRows512>());
  static constexpr auto side = block_table512<Bits, true>(std::make_index_sequence<kStreamRows>());
  block_panels(K, N, [&](int64_t begin, int64_t end) {
    product_panels<BlockPanel<Bits>>(begin, end, M, x, K, K, N, blocks, side, &converted_streams512, block_panel(w, K, N, out, bias));
  });
}

bool has_avx512() { return __builtin_cpu_supports("avx512f"); }

bool has_vnni() { return has_avx512() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni"); }

// What the AVX2 path of the 8-bit activation product needs (F16C: the float16 scales).
bool has_f16c() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"); }

// How an AVX2 product over 8-column panels reads M rows: {S, rows}, S panels side by side in blocks
// of at most `rows` rows. Measured on 576 x 1536 (2026-11-30, AMD EPYC Zen 3, one thread, 197 cycled
// matrices, the fastest of 20 rounds, microseconds; one row 165-186): four panels in blocks of 3 rows
// ran 5 rows in 169-184, 9 in 213-221, 17 in 400-415; two panels in blocks of 6 (its first block the
// rows a pass holds, as row_blocks) ran them in 215-218, 234-240 and 378-381.
inline std::pair<int, int64_t> plan8(int64_t M) { return M <= 12 ? std::pair<int, int64_t>{4, 3} : std::pair<int, int64_t>{2, 6}; }

// k-steps a block of rows runs before the next block takes the same panels (chunk8): 2 KB of each
// panel; and the bytes of weights prefetched ahead, one block (the hardware's prefetcher keeps up)
// or several (the first block's prefetches must cover the others' turns: 2048 ran 9 rows 3-10%
// faster than 1024; one row ran up to 10% slower with it; chunks of 32 ran as 64, of 128 slower;
// prefetching further into L2 as well, by the first block only, ran 5-17 rows 5-40% slower).
constexpr int64_t kChunk8 = 64, kPrefetch8 = 1024, kPrefetchChunked8 = 2048;
// Rows a group of blocks holds at most: the products of many rows (a prompt's forward) run group by
// group, each over all the panels, so a group's rows of x are read from L2 for every panel after the
// first (48 rows of K = 1536 are 295 KB) where all the rows (a prompt of 600 tokens: 1.4 MB of x)
// came from L3 for each panel. 2026-11-30, AMD EPYC Zen 3, one thread, in one process, the best of 9
// rounds, GFLOP/s for 300 / 1,200 rows, groups of 48 against none: 576 x 1536 57.6 / 56.4 against
// 54.6 / 49.9, 1536 x 576 57.8 / 55.9 against 57.7 / 48.5, 576 x 576 62.5 / 58.7 against 59.3 / 50.9
// (groups of 96 alike). A group changes no block, so no row's bits.
constexpr int64_t kGroupRows8 = 48;

// The panels [begin, end) of an AVX2 product over 8-column panels, {S, rows} = plan8(M): S equal
// contiguous parts, each pass the next panel of every part (each part one sequential stream) for all
// the rows, in blocks of at most `rows` rows (the first full, as row_blocks, but a last row alone
// joins the block before it as two: 7 rows are 3 + 2 + 2) that take turns over chunks of kChunk8
// k-steps (chunk8); then the panels left over one at a time; many rows in groups of blocks of at most
// kGroupRows8 rows, each group over all the panels. So a row sums its k in one accumulator
// set in every product of two rows or more, and its bits do not depend on the other rows, nor on S
// nor on the chunks; a product of one row sums in two sets (sets8).
template <typename W, typename Make>
void product_panels8(int64_t begin, int64_t end, const Product<W>& a, Make panel) {
  static constexpr auto seq = std::make_index_sequence<kMaxRows>();
  static constexpr std::array<std::array<Chunk8<W>, kMaxRows>, kMaxStreams> tables{
      chunks8<W, 1>(seq), chunks8<W, 2>(seq), chunks8<W, 3>(seq), chunks8<W, 4>(seq)};
  const auto [S, rows] = plan8(a.M);
  std::vector<std::pair<int64_t, int64_t>> blocks;  // (first row, rows)
  for (int64_t row = 0; row < a.M; row += blocks.back().second) {
    const int64_t R = std::min(rows, a.M - row);
    blocks.emplace_back(row, a.M - row - R == 1 ? R - 1 : R);  // no block of one row beside others
  }
  const int64_t chunk = blocks.size() == 1 ? a.K : kChunk8, ahead = blocks.size() == 1 ? kPrefetch8 : kPrefetchChunked8;
  struct alignas(32) Ymm {
    float lanes[kPanel2];
  };
  const std::size_t group = std::min<std::size_t>(blocks.size(), std::max<int64_t>(1, kGroupRows8 / rows));  // blocks a group holds
  std::vector<Ymm> ymm(group * kAccumulators8);  // each block's accumulators (C++17: aligned)
  float* const state = reinterpret_cast<float*>(ymm.data());
  const auto pass = [&](int n, int64_t first, int64_t stride, std::size_t b0, std::size_t b1) {  // panels first + s stride, s < n; the blocks [b0, b1)
    const W* w[kMaxStreams];
    for (int s = 0; s < n; ++s) w[s] = panel(first + s * stride, 0).w;
    std::fill(ymm.begin(), ymm.end(), Ymm{});
    for (int64_t k0 = 0; k0 < a.K; k0 += chunk)
      for (std::size_t b = b0; b < b1; ++b) {
        const auto [row, R] = blocks[b];
        tables[n - 1][R - 1](a.x + row * a.K, a.K, w, k0, std::min(k0 + chunk, a.K), ahead, state + (b - b0) * kAccumulators8 * kPanel2);
      }
    for (std::size_t b = b0; b < b1; ++b) {
      const auto [row, R] = blocks[b];
      Panel<const W*> at[kMaxStreams];
      for (int s = 0; s < n; ++s) at[s] = panel(first + s * stride, row);
      finish8(state + (b - b0) * kAccumulators8 * kPanel2, static_cast<int>(R), sets8(static_cast<int>(R)), n, at, a.N);
    }
  };
  const int64_t part = (end - begin) / S;
  for (std::size_t b0 = 0; b0 < blocks.size(); b0 += group) {
    const std::size_t b1 = std::min(blocks.size(), b0 + group);
    for (int64_t i = 0; i < part; ++i) pass(S, begin + i, part, b0, b1);
    for (int64_t p = begin + S * part; p < end; ++p) pass(1, p, 0, b0, b1);
  }
}

// run(begin, end, panel) over ranges of the Width-column panels of a float32 or int8 product, shared
// among threads (about 128k weights a range at least); panel(p, row) is panel p as a block from row
// `row` reads it.
template <int64_t Width, typename W, typename Run>
void panel_ranges(const Product<W>& a, Run run) {
  const int64_t count = (a.N + Width - 1) / Width;
  const int64_t grain = std::max<int64_t>(1, 131072 / (Width * std::max<int64_t>(a.K, 1)));
  at::parallel_for(0, count, grain, [&](int64_t begin, int64_t end) {
    run(begin, end, [&](int64_t p, int64_t row) {
      const int64_t col = p * Width;
      return Panel<const W*>{a.panels + p * a.K * Width, a.out + row * a.N + col, std::min(Width, a.N - col),
                             a.scales == nullptr ? nullptr : a.scales + col, a.bias == nullptr ? nullptr : a.bias + col};
    });
  });
}

template <typename W>
void panel_mm8_impl(const Product<W>& a) {
  panel_ranges<kPanel2>(a, [&](int64_t begin, int64_t end, auto panel) { product_panels8(begin, end, a, panel); });
}

template <typename W>
void panel_mm512_impl(const Product<W>& a) {
  static constexpr auto blocks = blocks512<W, false>(std::make_index_sequence<kRows512<W>>());
  static constexpr auto side = blocks512<W, true>(std::make_index_sequence<kStreamRows>());
  panel_ranges<kPanel>(a, [&](int64_t begin, int64_t end, auto panel) {
    const decltype(blocks)* pairs = nullptr;  // float32 reads more rows on two neighbouring panels a pass
    if constexpr (std::is_same_v<W, float>) {
      static constexpr auto float_pairs = pairs512(std::make_index_sequence<kMaxRows512>());
      pairs = &float_pairs;
    }
    product_panels<const W*>(begin, end, a.M, a.x, a.K, a.K, a.N, blocks, side, &streams512<W>, panel, pairs);
  });
}

}  // namespace

namespace draftverify {

at::Tensor panel_mm(const at::Tensor& x, const at::Tensor& panels, const std::optional<at::Tensor>& scales,
                    const std::optional<at::Tensor>& bias, int64_t N, c10::string_view isa) {
  TORCH_CHECK(isa == "avx2" || isa == "avx512", "isa must be 'avx2' or 'avx512', got ", isa);
  TORCH_CHECK(isa == "avx2" || has_avx512(), "isa 'avx512' needs a CPU with AVX-512F");
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "x must be a float32 matrix [M, K]");
  const bool quantized = panels.scalar_type() == at::kChar;
  const bool avx512 = isa == "avx512";
  const int64_t width = avx512 ? kPanel : kPanel2;
  TORCH_CHECK(panels.dim() == 3 && panels.size(2) == width && panels.size(1) == x.size(1) &&
                  panels.size(0) == (N + width - 1) / width && panels.is_contiguous(),
              "panels must be contiguous [ceil(N / ", width, "), K, ", width, "] for x [M, K], isa ", isa,
              " and weights ", panels.scalar_type());
  TORCH_CHECK(reinterpret_cast<uintptr_t>(panels.data_ptr()) % 32 == 0, "panels must be 32-byte aligned");
  TORCH_CHECK(quantized || panels.scalar_type() == at::kFloat, "panels must be float32 or int8");
  TORCH_CHECK(quantized == scales.has_value(), "int8 panels take scales, float32 panels none");
  const at::Tensor xc = x.contiguous();
  const float* s = nullptr;
  if (quantized) {
    TORCH_CHECK(scales->scalar_type() == at::kFloat && scales->is_contiguous() && scales->numel() == panels.size(0) * width,
                "scales must be float32 [ceil(N / ", width, ") * ", width, "]");
    s = scales->data_ptr<float>();
  }
  const float* b = nullptr;
  if (bias.has_value()) {
    TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->is_contiguous() && bias->numel() == N, "bias must be float32 [N]");
    b = bias->data_ptr<float>();
  }
  at::Tensor out = at::empty({x.size(0), N}, x.options());
  const auto run = [&](auto* weights) {
    using W = std::remove_const_t<std::remove_pointer_t<decltype(weights)>>;
    const Product<W> a{xc.data_ptr<float>(), x.size(0), x.size(1), weights, N, s, b, out.data_ptr<float>()};
    avx512 ? panel_mm512_impl(a) : panel_mm8_impl(a);
  };
  if (quantized)
    run(panels.data_ptr<int8_t>());
  else
    run(panels.data_ptr<float>());
  return out;
}

// The block checks shared by block_mm and block_q8_mm: Q4_1 if offsets are given, else Q8_0.
void check_blocks(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                  const std::optional<at::Tensor>& offsets, const std::optional<at::Tensor>& bias, int64_t N,
                  at::ScalarType q8_type, const char* layout) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "x must be a float32 matrix [M, K]");
  const int64_t K = x.size(1), P = (N + kPanel - 1) / kPanel;
  TORCH_CHECK(K % kBlock == 0, "K must be a multiple of 32 (the blocks' length), got ", K);
  const bool q4 = offsets.has_value();
  TORCH_CHECK(codes.is_contiguous() && codes.dim() == 3 && codes.size(0) == P && codes.size(2) == kPanel &&
                  codes.size(1) == (q4 ? K / 2 : K) && codes.scalar_type() == (q4 ? at::kByte : q8_type),
              "codes must be contiguous ", layout);
  for (const at::Tensor* t : {&scales, q4 ? &*offsets : &scales})
    TORCH_CHECK(t->is_contiguous() && t->scalar_type() == at::kHalf && t->dim() == 3 && t->size(0) == P &&
                    t->size(1) == K / kBlock && t->size(2) == kPanel,
                "scales and offsets must be contiguous float16 [ceil(N / 16), K / 32, 16]");
  if (bias.has_value())
    TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->is_contiguous() && bias->numel() == N, "bias must be float32 [N]");
}

// The output [M, N] of a block op whose arguments check_blocks passed: impl(bits, x, M, K, panels, N,
// bias, out) with bits a std::integral_constant, 4 for Q4_1 (offsets given), else 8 for Q8_0.
template <typename Impl>
at::Tensor block_product(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                         const std::optional<at::Tensor>& offsets, const std::optional<at::Tensor>& bias, int64_t N,
                         Impl impl) {
  const at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty({x.size(0), N}, x.options());
  const float* b = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  const auto* c = static_cast<const uint8_t*>(codes.data_ptr());
  const auto* s = static_cast<const uint16_t*>(scales.data_ptr());
  if (offsets.has_value())
    impl(std::integral_constant<int, 4>{}, xc.data_ptr<float>(), x.size(0), x.size(1),
         BlockPanel<4>{c, s, static_cast<const uint16_t*>(offsets->data_ptr())}, N, b, out.data_ptr<float>());
  else
    impl(std::integral_constant<int, 8>{}, xc.data_ptr<float>(), x.size(0), x.size(1), BlockPanel<8>{c, s, nullptr}, N, b,
         out.data_ptr<float>());
  return out;
}

at::Tensor block_mm(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                    const std::optional<at::Tensor>& offsets, const std::optional<at::Tensor>& bias, int64_t N) {
  TORCH_CHECK(has_avx512(), "the block formats need a CPU with AVX-512F");
  check_blocks(x, codes, scales, offsets, bias, N, at::kChar,
               "[ceil(N / 16), K / 2, 16] uint8 (Q4_1) or [ceil(N / 16), K, 16] int8 (Q8_0)");
  return block_product(x, codes, scales, offsets, bias, N,
                       [](auto bits, auto... args) { block_mm_impl<decltype(bits)::value>(args...); });
}

at::Tensor block_q8_mm(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                       const std::optional<at::Tensor>& offsets, const std::optional<at::Tensor>& bias, int64_t N,
                       c10::string_view isa) {
  TORCH_CHECK(isa == "best" || isa == "avx2" || isa == "avx512", "isa must be 'best', 'avx2' or 'avx512', got ", isa);
  TORCH_CHECK(isa != "avx512" || has_vnni(), "isa 'avx512': the 8-bit activation product needs AVX-512 VNNI");
  const bool vnni = isa == "avx512" || (isa == "best" && has_vnni());
  TORCH_CHECK(vnni || has_f16c(), "the 8-bit activation product needs AVX-512 VNNI or AVX2 with FMA and F16C");
  check_blocks(x, codes, scales, offsets, bias, N, at::kByte,
               "[ceil(N / 16), K / 2, 16] uint8 (Q4_1) or [ceil(N / 16), K, 16] uint8 (Q8_0, codes + 128)");
  return block_product(x, codes, scales, offsets, bias, N,
                       [vnni](auto bits, auto... args) { q8_mm_impl<decltype(bits)::value>(args..., vnni); });
}

bool block_q8_ready() { return has_vnni() || has_f16c(); }

bool block_q8_vnni() { return has_vnni(); }

// Float32 FLOP/s (2 a multiply-add) one thread sustains in registers in instruction set isa: the
// arithmetic ceiling of a float32 product on this core (bench model-cost's floor of r).
double fma_peak(c10::string_view isa, int64_t steps) {
  TORCH_CHECK(isa == "avx2" || isa == "avx512", "isa must be 'avx2' or 'avx512', got ", isa);
  TORCH_CHECK(isa == "avx2" || has_avx512(), "isa 'avx512' needs a CPU with AVX-512F");
  TORCH_CHECK(steps > 0, "steps must be positive, got ", steps);
  float sink = 0.0f;
  const bool avx512 = isa == "avx512";
  const double seconds = avx512 ? fma_chains512(steps, &sink) : fma_chains(steps, &sink);
  volatile float keep = sink;
  (void)keep;
  return 2.0 * (avx512 ? 16 : 8) * 12 * static_cast<double>(steps) / seconds;
}

// The instruction sets this CPU runs, best last.
std::vector<std::string> panel_mm_isas() {
  std::vector<std::string> isas{"avx2"};
  if (has_avx512()) isas.emplace_back("avx512");
  return isas;
}

}  // namespace draftverify

TORCH_LIBRARY(draftverify, m) {
  using namespace draftverify;
  m.def("panel_mm(Tensor x, Tensor panels, Tensor? scales, Tensor? bias, int n, str isa) -> Tensor", &panel_mm);
  m.def("panel_mm_isas() -> str[]", &panel_mm_isas);
  m.def("block_mm(Tensor x, Tensor codes, Tensor scales, Tensor? offsets, Tensor? bias, int n) -> Tensor", &block_mm);
  m.def("block_q8_mm(Tensor x, Tensor codes, Tensor scales, Tensor? offsets, Tensor? bias, int n, str isa=\"best\") -> Tensor", &block_q8_mm);
  m.def("block_q8_ready() -> bool", &block_q8_ready);
  m.def("block_q8_vnni() -> bool", &block_q8_vnni);
  m.def("fma_peak(str isa, int steps) -> float", &fma_peak);
}
