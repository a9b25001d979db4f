// A feature draft's block of L drafted tokens in one call (draftverify.models.feature_draft,
// FeatureDraft.sample_block): the forward over the chunk of tokens it has not seen, with the target's
// features, then L - 1 forwards of one drafted token each, with its own last feature, and after every
// forward the draw of the next token from the law warped as draftverify.probs.warp warps it
// (temperature, then top-k, then top-p) over its token subset.
//
// The same operations as the Python loop (FeatureDraft._forward, Decoder.draft_positions, warp,
// sample) in the same order, each the same kernel: the products and the layer loop of
// llama_layers.cpp (its RMS norm for the final one too), ATen's softmax, the float64 cumulative sums
// of inverse_cdf (in a plain loop), the uniforms from the same generator in the same order. So a
// block is bit for bit what the loop draws (tests/models/test_feature_draft.py), without the loop's
// ~0.3 ms of Python and small operations a position, which on this CPU cost as much as the draft's
// products.

#include <ATen/core/Tensor.h>
#include <ATen/ops/all.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/copy.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/gt.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/logical_or.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/masked_fill.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/scatter.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/topk.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/_softmax.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "llama_layers.h"

namespace {

// Row b of probs [B, N] (float32, contiguous) drawn by uniforms[b] (float64), as rng.inverse_cdf
// draws it: the cumulative sums in float64, summed in order of the index as ATen's cumsum sums them,
// the first index whose sum exceeds u times the row's total or reaches the total (never one of zero
// mass); then that index's token of the support, written to tokens[b] (one plain pass a row, no
// intermediate tensors: the same index as searchsorted over the cumsum).
void draw_tokens(const at::Tensor& probs, const at::Tensor& uniforms, const int64_t* support, int64_t* tokens) {
  const int64_t rows = probs.size(0), size = probs.size(1);
  const float* p = probs.data_ptr<float>();
  const double* u = uniforms.data_ptr<double>();
  for (int64_t b = 0; b < rows; ++b) {
    const float* row = p + b * size;
    double total = 0.0;
    for (int64_t i = 0; i < size; ++i) total += static_cast<double>(row[i]);
    const double value = u[b] * total;
    double sum = 0.0;
    int64_t index = size - 1;
    for (int64_t i = 0; i < size; ++i) {
      sum += static_cast<double>(row[i]);
      if (sum > value || sum >= total) {
        index = i;
        break;
      }
    }
    tokens[b] = support[index];
  }
}

// probs._nucleus_drop's arithmetic on probs [B, N]: the tokens whose mass before them (descending,
// ties by the lower id) reaches top_p, sorted over the 64 most probable candidates, eight times
// more until they decide (every kept token more probable than the last candidate), at most all N.
at::Tensor nucleus_drop(const at::Tensor& probs, double top_p) {
  const int64_t size = probs.size(-1);
  int64_t count = std::min<int64_t>(size, 64);
  while (true) {
    at::Tensor values, order;
    if (count == size) {
      std::tie(values, order) = at::sort(probs, true, -1, true);
    } else {
      std::tie(values, order) = at::topk(probs, count, -1);
      auto [by_id_order, by_id] = at::sort(order, -1);
      auto [by_value_values, by_value] = at::sort(values.gather(-1, by_id), true, -1, true);
      values = by_value_values;
      order = by_id_order.gather(-1, by_value);
    }
    const at::Tensor kept = at::lt(at::sub(at::cumsum(values, -1), values), top_p);
    if (count == size ||
        at::logical_or(at::logical_not(kept), at::gt(values, values.narrow(-1, count - 1, 1))).all().item<bool>())
      return at::ones_like(probs, probs.options().dtype(at::kBool)).scatter_(-1, order, at::logical_not(kept));
    count = std::min<int64_t>(size, 8 * count);
  }
}

// probs.warp's arithmetic on logits [B, N] with temperature > 0: the scores logits / temperature,
// those below the top_k-th largest set to -inf, the softmax, then the tokens nucleus_drop drops set
// to zero and the rest renormalised (each step only where it removes something: top_k < N, top_p < 1).
// As probs.warp, a row with a NaN, a +inf or no finite logit is refused after the softmax, which
// leaves such a row NaN everywhere and any other row nowhere: its first column tells.
at::Tensor warp(const at::Tensor& logits, double temperature, std::optional<int64_t> top_k, std::optional<double> top_p) {
  at::Tensor scores = temperature != 1.0 ? at::div(logits, temperature) : logits;
  if (top_k && *top_k < scores.size(-1)) {
    const at::Tensor kth = std::get<0>(at::topk(scores, *top_k, -1)).narrow(-1, *top_k - 1, 1);
    scores = scores.masked_fill(at::lt(scores, kth), -std::numeric_limits<double>::infinity());
  }
  at::Tensor probs = at::_softmax(scores, -1, false).contiguous();
  const float* first = probs.data_ptr<float>();
  for (int64_t b = 0; b < probs.size(0); ++b)
    TORCH_CHECK(!std::isnan(first[b * probs.size(1)]), "feature_draft_block: a row has a NaN, a +inf, or no finite logit");
  if (top_p && *top_p < 1.0) {
    probs = probs.masked_fill(nucleus_drop(probs, *top_p), 0.0);
    probs = at::div(probs, probs.sum(-1, true));
  }
  return probs;
}

// tokens [B, m] (the chunk) with features [B, m, E] (f_{j-1} of each position), then L - 1 drafted
// tokens: returns the L drafted token ids [B, L], their laws over the whole vocabulary [B, L, V]
// (``vocab`` = V; zero outside the support, the subset's law at its tokens) and the last position's
// feature f^ [B, E]. cos / sin [B, 1, m + L - 1, D] cover every position fed; forward i (0: the
// chunk) attends by masks[i] and skips the padding valids[i] marks, as FeatureDraft._forward passes
// them to the layers (None where nothing is padded and the query is one token); the chunk's
// positions that `repeats` an earlier row's (llama_layers.cpp; None: none) take its layers' keys,
// values and state. With n layers (one
// key tensor each), products 0 and 4n + 1 of the flat lists are fc and the output layer, 1..4n the
// layers' (llama_layers.cpp); norms: the layers' two each, then the final one. The inputs'
// gathering, the draw and the laws' scatter into the vocabulary are plain loops (copies,
// comparisons and the float64 sums inverse_cdf makes), the arithmetic ATen's.
std::tuple<at::Tensor, at::Tensor, at::Tensor> feature_draft_block(
    const at::Tensor& tokens, const at::Tensor& features, const at::Tensor& embedding, const at::Tensor& support,
    const at::Tensor& cos, const at::Tensor& sin, const c10::List<std::optional<at::Tensor>>& masks,
    const c10::List<std::optional<at::Tensor>>& valids, const std::optional<at::Tensor>& repeats, at::TensorList keys,
    at::TensorList values, int64_t start, int64_t heads, int64_t kv_heads, int64_t head_dim, at::TensorList norms,
    c10::ArrayRef<double> eps, at::IntArrayRef kind, at::TensorList weights,
    const c10::List<std::optional<at::Tensor>>& scales, const c10::List<std::optional<at::Tensor>>& offsets,
    const c10::List<std::optional<at::Tensor>>& biases, at::IntArrayRef outputs, int64_t length, int64_t vocab,
    double temperature, std::optional<int64_t> top_k, std::optional<double> top_p,
    std::optional<at::Generator> generator) {
  const size_t n = keys.size(), products = 4 * n + 2;
  TORCH_CHECK(n >= 1 && values.size() == n && kind.size() == products && weights.size() == products &&
                  scales.size() == products && offsets.size() == products && biases.size() == products &&
                  outputs.size() == products && norms.size() == 2 * n + 1 && eps.size() == 2 * n + 1,
              "feature_draft_block: fc, four products a layer and the output layer; two norms a layer and the final one");
  TORCH_CHECK(static_cast<int64_t>(masks.size()) == length && static_cast<int64_t>(valids.size()) == length,
              "feature_draft_block: a mask and a valid for each of the length forwards");
  TORCH_CHECK(length >= 1 && temperature > 0 && (!top_k || *top_k >= 1) && (!top_p || (*top_p > 0 && *top_p <= 1)),
              "feature_draft_block: length >= 1, temperature > 0, top_k >= 1, top_p in (0, 1]");
  const int64_t rows = tokens.size(0), width = embedding.size(1), subset = support.size(0);
  TORCH_CHECK(tokens.scalar_type() == at::kLong && embedding.scalar_type() == at::kFloat && embedding.is_contiguous() &&
                  support.scalar_type() == at::kLong &&
                  support.is_contiguous() && support.dim() == 1 && vocab >= subset,
              "feature_draft_block: int64 tokens, a contiguous float32 embedding, the support's int64 ids, vocab >= their count");
  const auto layer_list = [n](const c10::List<std::optional<at::Tensor>>& list) {
    c10::List<std::optional<at::Tensor>> layer;
    for (size_t i = 1; i <= 4 * n; ++i) layer.push_back(list.get(i));
    return layer;
  };
  const size_t out = 4 * n + 1, final = 2 * n;  // the output layer's product, the final norm
  const auto layer_scales = layer_list(scales), layer_offsets = layer_list(offsets), layer_biases = layer_list(biases);
  const at::Tensor drafted = at::empty({rows, length}, tokens.options().dtype(at::kLong));
  const at::Tensor laws = at::zeros({rows, length, vocab}, embedding.options());
  const int64_t* ids = support.data_ptr<int64_t>();
  const float* table = embedding.data_ptr<float>();
  at::Tensor chunk = tokens.contiguous(), previous = features.contiguous(), last;
  int64_t position = start;  // the first slot this forward writes
  for (int64_t i = 0; i < length; ++i) {
    const int64_t size = chunk.size(1);
    // [e(x_j); f_{j-1}] for each position j of this forward: [B S, 2 E]
    const at::Tensor input = at::empty({rows * size, 2 * width}, embedding.options());
    float* row = input.data_ptr<float>();
    const int64_t* token_ids = chunk.data_ptr<int64_t>();
    const float* feature = previous.data_ptr<float>();
    for (int64_t j = 0; j < rows * size; ++j, row += 2 * width) {
      TORCH_CHECK(0 <= token_ids[j] && token_ids[j] < embedding.size(0), "feature_draft_block: token id ", token_ids[j],
                  " outside the embedding's ", embedding.size(0), " rows");
      std::copy_n(table + token_ids[j] * width, width, row);
      std::copy_n(feature + j * width, width, row + width);
    }
    const at::Tensor x = draftverify::product(kind[0], input, weights[0], scales.get(0), offsets.get(0), biases.get(0),
                                              outputs[0]).view({rows, size, width});
    const int64_t first = position - start;  // this forward's angles
    const at::Tensor layers = draftverify::llama_layers(
        x, cos.narrow(2, first, size), sin.narrow(2, first, size), masks.get(i), valids.get(i),
        i == 0 ? repeats : std::nullopt, keys,
        values, position, heads, kv_heads, head_dim, norms.slice(0, final), eps.slice(0, final), kind.slice(1, 4 * n),
        weights.slice(1, 4 * n), layer_scales, layer_offsets, layer_biases, outputs.slice(1, 4 * n));
    const at::Tensor hidden = draftverify::rms_norm_rows(layers, norms[final], eps[final]);  // [B, S, E]
    last = hidden.select(1, size - 1).contiguous();  // [B, E]
    const at::Tensor logits = draftverify::product(kind[out], last, weights[out], scales.get(out), offsets.get(out),
                                                   biases.get(out), outputs[out]).contiguous();
    const at::Tensor probs = warp(logits, temperature, top_k, top_p).contiguous();  // [B, N]
    const at::Tensor token = at::empty({rows}, drafted.options());
    draw_tokens(probs, at::rand({rows}, generator, at::kDouble), ids, token.data_ptr<int64_t>());
    drafted.select(1, i).copy_(token);
    const float* law = probs.data_ptr<float>();
    float* full = laws.data_ptr<float>();
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t j = 0; j < subset; ++j) full[(b * length + i) * vocab + ids[j]] = law[b * subset + j];
    position += size;
    chunk = token.view({rows, 1});
    previous = last.view({rows, 1, width});
  }
  return {drafted, laws, last};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(draftverify, m) {
  m.def("feature_draft_block(Tensor tokens, Tensor features, Tensor embedding, Tensor support, Tensor cos, Tensor sin, "
        "Tensor?[] masks, Tensor?[] valids, Tensor? repeats, Tensor[] keys, Tensor[] values, int start, int heads, int kv_heads, int head_dim, Tensor[] norms, "
        "float[] eps, int[] kind, Tensor[] weights, Tensor?[] scales, Tensor?[] offsets, Tensor?[] biases, int[] outputs, "
        "int length, int vocab, float temperature, int? top_k, float? top_p, Generator? generator) -> (Tensor, Tensor, Tensor)",
        &feature_draft_block);
}
