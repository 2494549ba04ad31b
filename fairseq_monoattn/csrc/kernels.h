// The plugin's C++ kernels, bound to Python as fairseq_monoattn._kernels (bindings.cpp) and
// chosen at run time by fairseq_monoattn/modules/compiled.py.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace fairseq_monoattn {

// One row of a GRU update's backward pass, h' = (h - n) z + n with r = sigmoid(i_r + h_r),
// z = sigmoid(i_z + h_z), n = tanh(i_n + r h_n): from g = dL/dh' (H numbers), writes dL/dh through h'
// itself (kept = g z) and the gates' pre-activation gradients, on the input side [g_r | g_z | g_n]
// and on the hidden side [g_r | g_z | g_n r].  Shared by the encoder's packed loop and the decoder's
// GRU step.  Every array its own restrict pointer, so that the compiler vectorizes the loop (with the
// gates as offsets of one pointer it cannot tell the stores apart and runs it one number at a time).
template <typename T>
void gru_row_backward(const T* __restrict__ g, const T* __restrict__ r, const T* __restrict__ z,
                      const T* __restrict__ n, const T* __restrict__ h, const T* __restrict__ h_n, int64_t H,
                      T* __restrict__ kept, T* __restrict__ gi_r, T* __restrict__ gi_z, T* __restrict__ gi_n,
                      T* __restrict__ gh_r, T* __restrict__ gh_z, T* __restrict__ gh_n) {
  for (int64_t j = 0; j < H; ++j) {
    const T through_h = g[j] * z[j];                        // through h' = z h + (1 - z) n
    const T g_z = g[j] * (h[j] - n[j]) * (1 - z[j]) * z[j];  // through z = sigmoid(.)
    const T g_n = (g[j] - through_h) * (1 - n[j] * n[j]);   // through n = tanh(.)
    const T g_r = g_n * h_n[j] * (1 - r[j]) * r[j];         // through r = sigmoid(.)
    kept[j] = through_h;
    gi_r[j] = g_r;
    gi_z[j] = g_z;
    gi_n[j] = g_n;
    gh_r[j] = g_r;
    gh_z[j] = g_z;
    gh_n[j] = g_n * r[j];
  }
}

// Rows of a GRU update's forward pass, elementwise, each array its own restrict pointer (as
// gru_row_backward): n before its tanh, i_n + r h_n, and h' = (h - n) z + n.
template <typename T>
void gru_row_candidate(const T* __restrict__ i_n, const T* __restrict__ r, const T* __restrict__ h_n, int64_t H,
                       T* __restrict__ out) {
  for (int64_t j = 0; j < H; ++j) out[j] = i_n[j] + r[j] * h_n[j];  // before the tanh
}

template <typename T>
void gru_row_update(const T* __restrict__ h, const T* __restrict__ n, const T* __restrict__ z, int64_t H,
                    T* __restrict__ out) {
  for (int64_t j = 0; j < H; ++j) out[j] = (h[j] - n[j]) * z[j] + n[j];  // h' = (h - n) z + n
}

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
