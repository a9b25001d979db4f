// The products of panel_mm.cpp, for the other sources of the extension (llama_layers.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace draftverify {

// x [M, K] @ W (* scales) (+ bias) over float32 or int8 panels [ceil(N / width), K, width] (width: panel_mm.cpp); isa "avx2" or "avx512".
at::Tensor panel_mm(const at::Tensor& x, const at::Tensor& panels, const std::optional<at::Tensor>& scales,
                    const std::optional<at::Tensor>& bias, int64_t N, c10::string_view isa);

// x [M, K] @ W (+ bias) over GGML Q4_1 (offsets given) or Q8_0 blocks packed in panels (AVX-512).
at::Tensor block_mm(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                    const std::optional<at::Tensor>& offsets, const std::optional<at::Tensor>& bias, int64_t N);

// The same blocks (codes in block_q8_mm's layout, panel_mm.cpp) times x rounded to 8 bits per block of 32:
// isa "avx512" (VNNI), "avx2" (with F16C) or "best" (VNNI where the CPU has it); the same bits in both.
at::Tensor block_q8_mm(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                       const std::optional<at::Tensor>& offsets, const std::optional<at::Tensor>& bias, int64_t N,
                       c10::string_view isa = "best");

}  // namespace draftverify
