// The plugin's C++ kernels, bound to Python as fairseq_monoattn._kernels (bindings.cpp) and
// chosen at run time by fairseq_monoattn/modules/compiled.py.  They use torch's public extension
// API only: tensors, torch::autograd::Function for their autograd nodes and a registered custom
// class (torch::class_) for what a node keeps that is not a tensor.
#pragma once

#include <torch/custom_class.h>
#include <torch/extension.h>

#include "rows.h"

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace fairseq_monoattn {

// The encoder's GRU time loop over packed rows (packed_gru.cpp).
std::vector<at::Tensor> packed_gru_forward(const at::Tensor& input_gates, const at::Tensor& weight,
                                              const at::Tensor& bias, const std::vector<int64_t>& sizes,
                                              const std::optional<at::Tensor>& noise);
std::vector<at::Tensor> packed_gru_backward(const at::Tensor& grad_states, const at::Tensor& states,
                                               const at::Tensor& saved, const at::Tensor& weight,
                                               const std::vector<int64_t>& sizes);

// Where each (row, position) of a right-padded batch goes when it is stepped packed (packed_gru.cpp,
// modules/gru.py's _Packing): the step sizes, then forward_inputs, backward_inputs (total,),
// forward_outputs, backward_outputs (B, width) and finals (B,), as int64 tensors.
std::tuple<std::vector<int64_t>, std::vector<at::Tensor>> packing_plan(const at::Tensor& lengths, int64_t width);

// One GRU update as one autograd node (step_nodes.cpp).
at::Tensor gru_step(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                       const at::Tensor& hidden);

// The softmax focus over source positions as one autograd node (step_nodes.cpp).
at::Tensor softmax_gaussian(const at::Tensor& positions, const at::Tensor& mu, const at::Tensor& sigma,
                               const at::Tensor& padding_mask);

// One decoder step's location focus from its heads (the step, the reference, the clamp, the
// width and the softmax focus), as one autograd node (step_nodes.cpp): weights, mu, steps and the
// attended position.
std::vector<at::Tensor> location_focus(const at::Tensor& heads, const at::Tensor& previous,
                                       const std::optional<at::Tensor>& mono_gate, const at::Tensor& positions,
                                       const at::Tensor& step_size, const at::Tensor& lengths,
                                       const at::Tensor& padding_mask, const std::string& step_activation,
                                       double step_temperature, const std::string& reference, int64_t step,
                                       double sigma_min, std::optional<double> clamp_slope);

// One decoder step's mix of the content focus softmax(scores) and the location focus, weights =
// location + sigmoid(T mix_logit) (content - location), and the position the weights attend, as
// one autograd node (step_nodes.cpp).
std::vector<at::Tensor> mixed_focus(const at::Tensor& scores, const at::Tensor& padding_mask,
                                    const at::Tensor& location, const at::Tensor& mix_logit, double temperature,
                                    const at::Tensor& positions);

// The factor pairs (a_t, b_t) of a gradient sum_t a_t^T b_t that the step nodes below file in the
// backward pass, one a step, for the collector in modules/step_linear.py to take once every step is
// done.  A custom class registered with torch (bindings.cpp), so that a node's ctx->saved_data can
// hold it; Python makes one as fairseq_monoattn._kernels.PendingFactors().
struct PendingFactors : torch::CustomClassHolder {
  std::vector<std::tuple<at::Tensor, at::Tensor>> pairs;
  std::vector<std::tuple<at::Tensor, at::Tensor>> take() {
    auto taken = std::move(pairs);
    pairs.clear();
    return taken;
  }
};

// The per-step products of modules/step_linear.py as C++ autograd nodes (step_nodes.cpp):
// offset + x W^T + b filing (dL/dy, x); w M filing (w, dL/dy); M q filing (dL/ds, q).
at::Tensor step_product(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                        const std::optional<at::Tensor>& offset, const c10::intrusive_ptr<PendingFactors>& pending);
at::Tensor step_read(const at::Tensor& weights, const at::Tensor& operand,
                     const c10::intrusive_ptr<PendingFactors>& pending);
at::Tensor step_score(const at::Tensor& query, const at::Tensor& operand,
                      const c10::intrusive_ptr<PendingFactors>& pending);

// The GRU decoder's whole time loop in training (one layer; content scores, the location focus or
// their mix), as one autograd node (decoder_loop.cpp): the hidden states h_1 ... h_T (B, T, H), the
// attention weights (B, T, S) and the last attended position (B,) or undefined.
std::vector<at::Tensor> decoder_loop(const at::Tensor& input_gates, const at::Tensor& hidden0,
                                     const at::Tensor& read_weight, const at::Tensor& read_bias,
                                     const at::Tensor& context_weight, const at::Tensor& values,
                                     const std::optional<at::Tensor>& keys, const std::optional<at::Tensor>& mono_gate,
                                     const std::optional<at::Tensor>& positions,
                                     const std::optional<at::Tensor>& step_size,
                                     const std::optional<at::Tensor>& lengths, const at::Tensor& padding_mask,
                                     const std::vector<int64_t>& readout_sizes,
                                     const std::optional<std::string>& step_activation, double step_temperature,
                                     const std::optional<std::string>& reference, double sigma_min,
                                     std::optional<double> clamp_slope, double mix_temperature,
                                     bool location_reference);

}  // namespace fairseq_monoattn
