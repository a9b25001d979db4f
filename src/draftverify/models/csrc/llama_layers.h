// The decoder-layer loop of llama_layers.cpp, its product dispatch and its RMS norm, for the other
// sources of the extension (feature_draft.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/List.h>

#include <optional>

namespace draftverify {

// x [M, K] times one product of a compiled list (kind 0 / 1: panels in AVX2 / AVX-512, 2: GGUF
// blocks, 3: GGUF blocks times 8-bit activations; draftverify.models.llama.compiled_layers).
at::Tensor product(int64_t kind, const at::Tensor& x, const at::Tensor& weights, const std::optional<at::Tensor>& scale,
                   const std::optional<at::Tensor>& offsets, const std::optional<at::Tensor>& bias, int64_t N);

// The decoder layers applied to x [B, S, E] over the static cache's buffers (llama_layers.cpp).
at::Tensor llama_layers(at::Tensor x, const at::Tensor& cos, const at::Tensor& sin, const std::optional<at::Tensor>& mask,
                        const std::optional<at::Tensor>& valid, const std::optional<at::Tensor>& repeats,
                        at::TensorList keys, at::TensorList values, int64_t start, int64_t heads, int64_t kv_heads,
                        int64_t head_dim, at::TensorList norms, c10::ArrayRef<double> eps, at::IntArrayRef kind,
                        at::TensorList weights, const c10::List<std::optional<at::Tensor>>& scales,
                        const c10::List<std::optional<at::Tensor>>& offsets,
                        const c10::List<std::optional<at::Tensor>>& biases, at::IntArrayRef outputs);

// Rows x [..., E] normalised by their root mean square, times weight [E], as the loop normalises
// (float32, sums in 16 lanes: F.rms_norm's result to float32 rounding); a new tensor.
at::Tensor rms_norm_rows(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace draftverify
