// The plugin's C++ kernels, bound to Python as fairseq_monoattn._kernels (bindings.cpp) and
// chosen at run time by fairseq_monoattn/modules/compiled.py.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace fairseq_monoattn {

// The encoder's GRU time loop over packed rows (packed_gru.cpp).
std::vector<at::Tensor> packed_gru_forward(const at::Tensor& input_gates, const at::Tensor& weight,
                                              const at::Tensor& bias, const std::vector<int64_t>& sizes);
std::vector<at::Tensor> packed_gru_backward(const at::Tensor& grad_states, const at::Tensor& states,
                                               const at::Tensor& saved, const at::Tensor& weight,
                                               const std::vector<int64_t>& sizes);

// One GRU update as one autograd node (step_nodes.cpp).
at::Tensor gru_step(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                       const at::Tensor& hidden);

// The softmax focus over source positions as one autograd node (step_nodes.cpp).
at::Tensor softmax_gaussian(const at::Tensor& positions, const at::Tensor& mu, const at::Tensor& sigma,
                               const at::Tensor& padding_mask);

}  // namespace fairseq_monoattn
