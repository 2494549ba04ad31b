// The plugin's C++ kernels, bound to Python as fairseq_monoattn._kernels (bindings.cpp) and
// chosen at run time by fairseq_monoattn/modules/compiled.py.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <utility>
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

// The factor pairs (a_t, b_t) of a gradient sum_t a_t^T b_t that the step nodes below file in the
// backward pass, one a step, for the collector in modules/step_linear.py to take once every step is
// done.
struct PendingFactors {
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs;
};

// The per-step products of modules/step_linear.py as C++ autograd nodes (step_nodes.cpp):
// offset + x W^T + b filing (dL/dy, x); w M filing (w, dL/dy); M q filing (dL/ds, q).
at::Tensor step_product(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                        const std::optional<at::Tensor>& offset, const std::shared_ptr<PendingFactors>& pending);
at::Tensor step_read(const at::Tensor& weights, const at::Tensor& operand,
                     const std::shared_ptr<PendingFactors>& pending);
at::Tensor step_score(const at::Tensor& query, const at::Tensor& operand,
                      const std::shared_ptr<PendingFactors>& pending);

}  // namespace fairseq_monoattn
