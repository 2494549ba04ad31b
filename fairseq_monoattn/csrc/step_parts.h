// The decoder step's parts as plain functions, forward and backward, with no autograd in them:
// step_nodes.cpp wraps each in an autograd node of its own (one node a step), decoder_loop.cpp
// runs them all, step after step, inside one node for the decoder's whole time loop.  A pass's
// outputs go into the tensors its struct holds on entry where they are defined (the decoder loop's
// rows of one tensor for all its steps), else into new ones.
#pragma once

#include <torch/extension.h>

#include <string>

namespace fairseq_monoattn {

// -- the GRU update: h' = (h - n) z + n, r = sigmoid(i_r + h_r), z = sigmoid(i_z + h_z),
//    n = tanh(i_n + r h_n), from the gates' pre-activations (B, 3H) in torch's order [r | z | n]
struct GRUPass {
  at::Tensor reset_update, candidate, hidden, hidden_gates;  // [r | z] (B, 2H), n (B, H), h, and h's gates
};

// h' (B, H) from input and hidden gates (B, 3H; rows may be views of wider rows) and h (B, H), into
// out where it is defined ((B, H) contiguous); pass.reset_update (B, 2H) and pass.candidate (B, H),
// where defined, contiguous.
at::Tensor gru_forward(const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& hidden,
                       GRUPass& pass, const at::Tensor& out = at::Tensor());

// From g = dL/dh' (B, H) contiguous: the gates' gradients into grad_input_gates and grad_hidden_gates
// (B, 3H; rows may be views of wider rows) and dL/dh through h' itself into grad_hidden (B, H) contiguous.
void gru_backward(const at::Tensor& grad, const GRUPass& pass, at::Tensor& grad_input_gates,
                  at::Tensor& grad_hidden_gates, at::Tensor& grad_hidden);

// -- the location focus of one step (location.py, steps.py, references.py):
//    steps = act(rho), mu = ref(previous, heads) + steps * step_size (leaky-clamped),
//    sigma = (ReLU(width) + sigma_min) / L, lambda = softmax(-z^2 / 2), z = (positions - mu) / sigma,
//    position = sum_i lambda_i positions_i
enum class StepKind { sigmoid, mono, relu, softstair, none };
enum class ReferenceKind { previous, gated, initial_bias };

StepKind step_kind_of(const std::string& name);
ReferenceKind reference_kind_of(const std::string& name);
int64_t reference_heads(ReferenceKind kind);  // heads beyond the step and the width

struct LocationSettings {
  StepKind step_kind;
  double step_temperature;
  ReferenceKind reference;
  double sigma_min;
  double clamp_slope;  // < 0: no clamp
};

// A focus's per-sequence memory: positions and padding mask (B, S), step sizes and lengths (B,).
struct FocusMemory {
  at::Tensor positions, padding_mask, step_size, lengths;
};

struct LocationPass {
  at::Tensor heads, previous, mono_gate;     // its inputs (heads contiguous)
  at::Tensor weights, mu, steps, position;   // its outputs
  at::Tensor z, sigma, unclamped;            // for the backward pass
  bool first_step = false;
};

// Its outputs into pass.weights, z (B, S), mu, steps, position, sigma, unclamped (B,) where defined
// (contiguous).
void location_forward(const at::Tensor& heads, const at::Tensor& previous, const at::Tensor& mono_gate,
                      const FocusMemory& memory, const LocationSettings& settings, int64_t step, LocationPass& pass);

// From dL/dweights (B, S) contiguous and dL/dmu, dL/dsteps, dL/dposition (B,) contiguous or undefined
// (zeros): dL/dheads into grad_heads (B, heads; rows may be views of wider rows), dL/dprevious into
// grad_previous (B,) contiguous; returns dL/d(Mono's gate logit) (0 for other steps).
double location_backward(const LocationPass& pass, const FocusMemory& memory, const LocationSettings& settings,
                         const at::Tensor& grad_weights, const at::Tensor& grad_mu, const at::Tensor& grad_steps,
                         const at::Tensor& grad_position, at::Tensor& grad_heads, at::Tensor& grad_previous);

// -- the mix of the content and the location focus (cross_attention.py):
//    content = softmax(scores) over the real positions, m = sigmoid(T mix_logit),
//    weights = location + m (content - location), position = sum_i weights_i positions_i
struct MixPass {
  at::Tensor content, location, mix, weights, position;
};

// Its outputs into pass.content, weights (B, S), mix (B, 1) and position (B,) where defined (contiguous).
void mixed_forward(const at::Tensor& scores, const at::Tensor& padding_mask, const at::Tensor& location,
                   const at::Tensor& mix_logit, double temperature, const at::Tensor& positions, MixPass& pass);

// From dL/dweights (B, S) contiguous and dL/dposition (B,) contiguous or undefined: dL/dscores and
// dL/dlocation into (B, S) contiguous tensors, dL/dmix_logit into grad_mix (B, 1; a view is fine).
void mixed_backward(const MixPass& pass, const at::Tensor& positions, double temperature,
                    const at::Tensor& grad_weights, const at::Tensor& grad_position, at::Tensor& grad_scores,
                    at::Tensor& grad_location, at::Tensor& grad_mix);

// -- a masked softmax's backward pass: dL/dscores = w (g - <w, g>) row by row, w the softmax
//    (B, S) and g = dL/dw, both contiguous, into grad_scores (B, S) contiguous
void softmax_backward(const at::Tensor& weights, const at::Tensor& grad, at::Tensor& grad_scores);

// -- a node's backward pass is plain loops, not differentiable: refused where autograd records it
//    (create_graph=True), with a message naming the node and the way to the Python code
void check_no_double_backward(const char* node);

// -- the location settings in a node's ctx->saved_data, and back
void save_location_settings(torch::autograd::AutogradContext* ctx, const LocationSettings& settings);
LocationSettings saved_location_settings(torch::autograd::AutogradContext* ctx);

// -- an input of a node or of the loop: a CPU tensor of like's dtype, or an error naming it
//    ("<node>: <name> must be a CPU tensor of Float, not a cuda tensor of Float")
void check_cpu_input(const at::Tensor& t, const std::string& name, const at::Tensor& like);

}  // namespace fairseq_monoattn
