// A feature draft's block of L drafted tokens in one call (draftverify.models.feature_draft,
// FeatureDraft.sample_block): the forward over the chunk of tokens it has not seen, with the target's
// features, then L - 1 forwards of one drafted token each, with its own last feature, and after every
// forward the draw of the next token from the law warped as draftverify.probs.warp warps it
// (temperature, then top-k, then top-p) over its token subset.
//
// The same operations as the Python loop (FeatureDraft._forward, Decoder.draft_positions, warp,
// sample) in the same order, each the same kernel: the products and the layer loop of
// llama_layers.cpp, ATen's rms_norm, softmax, cumsum and searchsorted, the uniforms from the same
// generator in the same order. So a block is bit for bit what the loop draws
// (tests/models/test_feature_draft.py), without the loop's ~0.3 ms of Python and small operations
// a position, which on this CPU cost as much as the draft's products.

#include <ATen/core/Tensor.h>
#include <ATen/ops/all.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/div.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/gt.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/logical_or.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/masked_fill.h>
#include <ATen/ops/minimum.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/rms_norm.h>
#include <ATen/ops/scatter.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/topk.h>
#include <ATen/ops/_softmax.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "llama_layers.h"

namespace {

// One index per row of probs [B, N] drawn by the uniform of the row: rng.inverse_cdf's arithmetic
// (float64 cumulative sums, the first index past u times the row's total, never one of zero mass).
at::Tensor inverse_cdf(const at::Tensor& probs, const at::Tensor& uniforms) {
  const at::Tensor cdf = at::cumsum(probs, -1, at::kDouble);
  const at::Tensor total = cdf.narrow(1, cdf.size(1) - 1, 1).contiguous();
  const at::Tensor index = at::searchsorted(cdf, at::mul(uniforms.reshape({-1, 1}), total), false, true);
  const at::Tensor reached = at::searchsorted(cdf, total, false, false);
  return at::minimum(index, reached).select(1, 0);
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
at::Tensor warp(const at::Tensor& logits, double temperature, std::optional<int64_t> top_k, std::optional<double> top_p) {
  at::Tensor scores = temperature != 1.0 ? at::div(logits, temperature) : logits;
  if (top_k && *top_k < scores.size(-1)) {
    const at::Tensor kth = std::get<0>(at::topk(scores, *top_k, -1)).narrow(-1, *top_k - 1, 1);
    scores = scores.masked_fill(at::lt(scores, kth), -std::numeric_limits<double>::infinity());
  }
  at::Tensor probs = at::_softmax(scores, -1, false);
  if (top_p && *top_p < 1.0) {
    probs = probs.masked_fill(nucleus_drop(probs, *top_p), 0.0);
    probs = at::div(probs, probs.sum(-1, true));
  }
  return probs;
}

// tokens [B, m] (the chunk) with features [B, m, E] (f_{j-1} of each position), then L - 1 drafted
// tokens: returns the L drafted token ids [B, L], their laws over the subset [B, L, N] and the last
// position's feature f^ [B, E]. cos / sin [B, 1, m + L - 1, D] cover every position fed; forward i
// (0: the chunk) attends by masks[i] and skips the padding valids[i] marks, as FeatureDraft._forward
// passes them to the layers (None where nothing is padded and the query is one token). With n
// layers (one key tensor each), products 0 and 4n + 1 of the flat lists are fc and the output
// layer, 1..4n the layers' (llama_layers.cpp); norms: the layers' two each, then the final one.
std::tuple<at::Tensor, at::Tensor, at::Tensor> feature_draft_block(
    const at::Tensor& tokens, const at::Tensor& features, const at::Tensor& embedding, const at::Tensor& support,
    const at::Tensor& cos, const at::Tensor& sin, const c10::List<std::optional<at::Tensor>>& masks,
    const c10::List<std::optional<at::Tensor>>& valids, at::TensorList keys,
    at::TensorList values, int64_t start, int64_t heads, int64_t kv_heads, int64_t head_dim, at::TensorList norms,
    c10::ArrayRef<double> eps, at::IntArrayRef kind, at::TensorList weights,
    const c10::List<std::optional<at::Tensor>>& scales, const c10::List<std::optional<at::Tensor>>& offsets,
    const c10::List<std::optional<at::Tensor>>& biases, at::IntArrayRef outputs, int64_t length, double temperature,
    std::optional<int64_t> top_k, std::optional<double> top_p, std::optional<at::Generator> generator) {
  const size_t n = keys.size(), products = 4 * n + 2;
  TORCH_CHECK(n >= 1 && values.size() == n && kind.size() == products && weights.size() == products &&
                  scales.size() == products && offsets.size() == products && biases.size() == products &&
                  outputs.size() == products && norms.size() == 2 * n + 1 && eps.size() == 2 * n + 1,
              "feature_draft_block: fc, four products a layer and the output layer; two norms a layer and the final one");
  TORCH_CHECK(static_cast<int64_t>(masks.size()) == length && static_cast<int64_t>(valids.size()) == length,
              "feature_draft_block: a mask and a valid for each of the length forwards");
  TORCH_CHECK(length >= 1 && temperature > 0 && (!top_k || *top_k >= 1) && (!top_p || (*top_p > 0 && *top_p <= 1)),
              "feature_draft_block: length >= 1, temperature > 0, top_k >= 1, top_p in (0, 1]");
  const int64_t rows = tokens.size(0), width = embedding.size(1);
  const auto layer_list = [n](const c10::List<std::optional<at::Tensor>>& list) {
    c10::List<std::optional<at::Tensor>> layer;
    for (size_t i = 1; i <= 4 * n; ++i) layer.push_back(list.get(i));
    return layer;
  };
  const size_t out = 4 * n + 1, final = 2 * n;  // the output layer's product, the final norm
  const auto layer_scales = layer_list(scales), layer_offsets = layer_list(offsets), layer_biases = layer_list(biases);
  std::vector<at::Tensor> drafted, laws;
  at::Tensor chunk = tokens, previous = features, last;
  int64_t position = start;  // the first slot this forward writes
  for (int64_t i = 0; i < length; ++i) {
    const int64_t size = chunk.size(1);
    const at::Tensor input = at::cat({embedding.index_select(0, chunk.reshape({-1})).view({rows, size, width}), previous}, -1);
    const at::Tensor x = draftverify::product(kind[0], input.view({rows * size, 2 * width}), weights[0], scales.get(0),
                                              offsets.get(0), biases.get(0), outputs[0]).view({rows, size, width});
    const int64_t first = position - start;  // this forward's angles
    const at::Tensor layers = draftverify::llama_layers(
        x, cos.narrow(2, first, size), sin.narrow(2, first, size), masks.get(i), valids.get(i), keys,
        values, position, heads, kv_heads, head_dim, norms.slice(0, final), eps.slice(0, final), kind.slice(1, 4 * n),
        weights.slice(1, 4 * n), layer_scales, layer_offsets, layer_biases, outputs.slice(1, 4 * n));
    const at::Tensor hidden = at::rms_norm(layers, {width}, norms[final], eps[final]);  // [B, S, E]
    last = hidden.select(1, size - 1).clone();  // [B, E]
    const at::Tensor logits = draftverify::product(kind[out], hidden.narrow(1, size - 1, 1).reshape({rows, width}),
                                                   weights[out], scales.get(out), offsets.get(out), biases.get(out), outputs[out]);
    TORCH_CHECK(logits.amax(-1).isfinite().all().item<bool>(),
                "feature_draft_block: a row has a NaN, a +inf, or no finite logit");
    const at::Tensor probs = warp(logits, temperature, top_k, top_p);  // [B, N]
    const at::Tensor token = support.index_select(0, inverse_cdf(probs, at::rand({rows}, generator, at::kDouble)));
    drafted.push_back(token);
    laws.push_back(probs);
    position += size;
    chunk = token.view({rows, 1});
    previous = last.view({rows, 1, width});
  }
  return {at::stack(drafted, 1), at::stack(laws, 1), last};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(draftverify, m) {
  m.def("feature_draft_block(Tensor tokens, Tensor features, Tensor embedding, Tensor support, Tensor cos, Tensor sin, "
        "Tensor?[] masks, Tensor?[] valids, Tensor[] keys, Tensor[] values, int start, int heads, int kv_heads, int head_dim, Tensor[] norms, "
        "float[] eps, int[] kind, Tensor[] weights, Tensor?[] scales, Tensor?[] offsets, Tensor?[] biases, int[] outputs, "
        "int length, float temperature, int? top_k, float? top_p, Generator? generator) -> (Tensor, Tensor, Tensor)",
        &feature_draft_block);
}
