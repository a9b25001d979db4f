// The decoder layers of draftverify.models.llama.llama_layers in one call: the same ATen operations
// in the same order (so the same bits), without the Python interpreter between them. A one-token
// call of SmolLM2-135M runs some 25 small operations a layer, 750 a call; from Python each costs a few
// microseconds of dispatch, about as much as all the call's matrix products once these stream GGUF
// blocks. The products are the panel kernel's (panel_mm.cpp); the keys and values go straight into
// the static cache's buffers (draftverify.models.static_cache.StaticKV).

#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/rms_norm.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/silu.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "panel_mm.h"

namespace {

enum Kind : int64_t { kPanelAvx2 = 0, kPanelAvx512 = 1, kBlocks = 2 };

// Product i of the flat lists (four a layer: qkv, o, gate_up, down), as its Python object runs it.
struct Products {
  at::IntArrayRef kind;
  at::TensorList weights;  // panels or codes
  const c10::List<std::optional<at::Tensor>>& scales;  // int8 or block scales
  const c10::List<std::optional<at::Tensor>>& offsets;  // Q4_1 offsets
  const c10::List<std::optional<at::Tensor>>& biases;
  at::IntArrayRef outputs;

  at::Tensor operator()(int64_t i, const at::Tensor& x) const {
    const std::optional<at::Tensor> scale = scales.get(i), bias = biases.get(i);
    if (kind[i] == kBlocks) return draftverify::block_mm(x, weights[i], *scale, offsets.get(i), bias, outputs[i]);
    return draftverify::panel_mm(x, weights[i], scale, bias, outputs[i], kind[i] == kPanelAvx512 ? "avx512" : "avx2");
  }
};

// x [B, H, S, D] turned by the rotary angles: x cos + (-x_2, x_1) sin, as llama._rotate.
at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  return x * cos + at::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1) * sin;
}

at::Tensor llama_layers(at::Tensor x, const at::Tensor& cos, const at::Tensor& sin, const std::optional<at::Tensor>& mask,
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
  const Products product{kind, weights, scales, offsets, biases, outputs};
  const bool grouped = kv_heads != heads;
  for (int64_t i = 0; i < layers; ++i) {
    at::Tensor h = at::rms_norm(x, {width}, norms[2 * i], eps[2 * i]).view({-1, width});
    const std::vector<at::Tensor> qkv = product(4 * i, h).split_with_sizes({(heads + kv_heads) * head_dim, kv_heads * head_dim}, -1);
    const at::Tensor qk = rotate(qkv[0].view({rows, size, heads + kv_heads, head_dim}).transpose(1, 2), cos, sin);
    const at::Tensor v = qkv[1].view({rows, size, kv_heads, head_dim}).transpose(1, 2);
    keys[i].slice(2, start, start + size).copy_(qk.slice(1, heads));
    values[i].slice(2, start, start + size).copy_(v);
    const at::Tensor attended = at::scaled_dot_product_attention(
        qk.slice(1, 0, heads), keys[i].slice(2, 0, start + size), values[i].slice(2, 0, start + size), mask, 0.0, false,
        std::nullopt, grouped);
    x = x + product(4 * i + 1, attended.transpose(1, 2).reshape({rows * size, -1})).view({rows, size, width});
    h = at::rms_norm(x, {width}, norms[2 * i + 1], eps[2 * i + 1]).view({-1, width});
    const std::vector<at::Tensor> gate_up = product(4 * i + 2, h).chunk(2, -1);
    x = x + product(4 * i + 3, at::silu(gate_up[0]) * gate_up[1]).view({rows, size, width});
  }
  return x;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(draftverify, m) {
  m.def("llama_layers(Tensor x, Tensor cos, Tensor sin, Tensor? mask, Tensor[] keys, Tensor[] values, int start, "
        "int heads, int kv_heads, int head_dim, Tensor[] norms, float[] eps, int[] kind, Tensor[] weights, "
        "Tensor?[] scales, Tensor?[] offsets, Tensor?[] biases, int[] outputs) -> Tensor",
        &llama_layers);
}
