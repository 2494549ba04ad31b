// The pieces of a decoder step that the plugin writes as autograd nodes of its own, in C++: the GRU
// update, the softmax focus of the location attention, a step's whole location focus, the mix of
// the content and the location focus, and the per-step products whose fixed operand takes its
// gradient once after the last step (modules/step_linear.py).  Python's autograd.Function does the
// same with a fixed cost of its own a call, forward and backward, which is much of what these
// nodes cost on a batch of 32 rows (modules/gru.py, normalizations.py and step_linear.py hold the
// Python versions and say which runs when).  Forward makes the Python versions' operations with
// torch's own kernels, so its outputs are theirs to float rounding (the location focus uses the C
// library's exp, see there); the backward passes are plain loops.  The step parts are plain functions (step_parts.h),
// which decoder_loop.cpp also runs; each node is a torch::autograd::Function.

#include "kernels.h"
#include "step_parts.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace fairseq_monoattn {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void check_cpu_input(const Tensor& t, const std::string& name, const Tensor& like) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == like.scalar_type(), name, " must be a CPU tensor of ",
              like.scalar_type(), ", not a ", t.device().type(), " tensor of ", t.scalar_type());
}

void check_no_double_backward(const char* node) {
  TORCH_CHECK(!at::GradMode::is_enabled(), node,
              ": its backward is not differentiable (double backward); set FAIRSEQ_MONOATTN_COMPILED=0 to "
              "run the Python version");
}

void save_location_settings(AutogradContext* ctx, const LocationSettings& settings) {
  ctx->saved_data["step_kind"] = static_cast<int64_t>(settings.step_kind);
  ctx->saved_data["step_temperature"] = settings.step_temperature;
  ctx->saved_data["reference"] = static_cast<int64_t>(settings.reference);
  ctx->saved_data["sigma_min"] = settings.sigma_min;
  ctx->saved_data["clamp_slope"] = settings.clamp_slope;
}

LocationSettings saved_location_settings(AutogradContext* ctx) {
  return LocationSettings{static_cast<StepKind>(ctx->saved_data["step_kind"].toInt()),
                          ctx->saved_data["step_temperature"].toDouble(),
                          static_cast<ReferenceKind>(ctx->saved_data["reference"].toInt()),
                          ctx->saved_data["sigma_min"].toDouble(), ctx->saved_data["clamp_slope"].toDouble()};
}

namespace {

// rows of a 2-D tensor whose last dimension is contiguous (a view of wider rows is fine)
Tensor rows_of(const Tensor& t) { return t.stride(1) == 1 ? t : t.contiguous(); }


// The memory a focus node reads: positions and padding_mask (rows, source positions) alike, the mask
// a bool tensor on the CPU.
void check_focus_memory(const Tensor& positions, const Tensor& padding_mask, const char* node) {
  TORCH_CHECK(padding_mask.device().is_cpu() && padding_mask.scalar_type() == at::kBool, node,
              ": padding_mask must be a bool tensor on the CPU");
  TORCH_CHECK(positions.dim() == 2 && padding_mask.sizes() == positions.sizes(), node,
              ": positions and padding_mask must be (rows, source positions) alike");
}

// The gradient of an output, contiguous, or undefined where nobody used the output.
Tensor used_gradient(const Tensor& grad) { return grad.defined() ? grad.contiguous() : Tensor(); }

// The destination given (defined: of these sizes, contiguous), or a new tensor like ``like``.
Tensor given_or_empty(const Tensor& given, at::IntArrayRef sizes, const Tensor& like) {
  if (!given.defined()) return at::empty(sizes, like.options());
  TORCH_CHECK(given.sizes() == sizes && given.is_contiguous(), "a step part's destination must be ", sizes,
              " contiguous");
  return given;
}

// A contiguous tensor's numbers, or nullptr for an undefined one (read as zeros).
template <typename T>
const T* numbers_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// A step's parts as plain functions (step_parts.h); the nodes below wrap them.
// -- the GRU update
at::Tensor gru_forward_impl(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hidden,
                            GRUPass& pass, const Tensor& out_in) {
  const int64_t B = hidden.size(0), H = hidden.size(1);
  Tensor reset_update = given_or_empty(pass.reset_update, {B, 2 * H}, hidden);
  Tensor candidate = given_or_empty(pass.candidate, {B, H}, hidden);
  Tensor out = given_or_empty(out_in, {B, H}, hidden);
  const int64_t in_stride = input_gates.stride(0), hid_stride = hidden_gates.stride(0);
  AT_DISPATCH_FLOATING_TYPES(hidden.scalar_type(), "gru_step", [&] {
    for (int64_t i = 0; i < B; ++i) {  // i_r + h_r, i_z + h_z
      const scalar_t* __restrict__ ig = input_gates.data_ptr<scalar_t>() + i * in_stride;
      const scalar_t* __restrict__ hg = hidden_gates.data_ptr<scalar_t>() + i * hid_stride;
      scalar_t* __restrict__ rz = reset_update.data_ptr<scalar_t>() + i * 2 * H;
      for (int64_t j = 0; j < 2 * H; ++j) rz[j] = ig[j] + hg[j];
    }
  });
  reset_update.sigmoid_();  // r, z
  AT_DISPATCH_FLOATING_TYPES(hidden.scalar_type(), "gru_step", [&] {
    for (int64_t i = 0; i < B; ++i) {  // i_n + r h_n
      const scalar_t* __restrict__ i_n = input_gates.data_ptr<scalar_t>() + i * in_stride + 2 * H;
      const scalar_t* __restrict__ h_n = hidden_gates.data_ptr<scalar_t>() + i * hid_stride + 2 * H;
      const scalar_t* __restrict__ r = reset_update.data_ptr<scalar_t>() + i * 2 * H;
      gru_row_candidate(i_n, r, h_n, H, candidate.data_ptr<scalar_t>() + i * H);
    }
  });
  candidate.tanh_();  // n
  AT_DISPATCH_FLOATING_TYPES(hidden.scalar_type(), "gru_step", [&] {
    for (int64_t i = 0; i < B; ++i) {  // h' = (h - n) z + n
      const scalar_t* __restrict__ z = reset_update.data_ptr<scalar_t>() + i * 2 * H + H;
      const scalar_t* __restrict__ n = candidate.data_ptr<scalar_t>() + i * H;
      const scalar_t* __restrict__ h = hidden.data_ptr<scalar_t>() + i * H;
      gru_row_update(h, n, z, H, out.data_ptr<scalar_t>() + i * H);
    }
  });
  pass = GRUPass{reset_update, candidate, hidden, hidden_gates};
  return out;
}

}  // namespace

Tensor gru_forward(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hidden, GRUPass& pass,
                   const Tensor& out) {
  return gru_forward_impl(rows_of(input_gates), rows_of(hidden_gates), hidden.contiguous(), pass, out);
}

void gru_backward(const Tensor& grad, const GRUPass& pass, Tensor& grad_input_gates, Tensor& grad_hidden_gates,
                  Tensor& grad_hidden) {
  const Tensor &reset_update = pass.reset_update, &candidate = pass.candidate, &hidden = pass.hidden;
  const Tensor& hidden_gates = pass.hidden_gates;
  const int64_t B = hidden.size(0), H = hidden.size(1), hid_stride = hidden_gates.stride(0);
  const int64_t gi_stride = grad_input_gates.stride(0), gh_stride = grad_hidden_gates.stride(0);
  TORCH_CHECK(grad_input_gates.stride(1) == 1 && grad_hidden_gates.stride(1) == 1 && grad_hidden.is_contiguous(),
              "gru_backward: the gradients' rows must be contiguous");
  AT_DISPATCH_FLOATING_TYPES(hidden.scalar_type(), "gru_step_backward", [&] {
    for (int64_t i = 0; i < B; ++i) {
      const scalar_t* __restrict__ g_out = grad.data_ptr<scalar_t>() + i * H;
      const scalar_t* __restrict__ r = reset_update.data_ptr<scalar_t>() + i * 2 * H;
      const scalar_t* __restrict__ z = r + H;
      const scalar_t* __restrict__ n = candidate.data_ptr<scalar_t>() + i * H;
      const scalar_t* __restrict__ h = hidden.data_ptr<scalar_t>() + i * H;
      const scalar_t* __restrict__ h_n = hidden_gates.data_ptr<scalar_t>() + i * hid_stride + 2 * H;
      scalar_t* gi = grad_input_gates.data_ptr<scalar_t>() + i * gi_stride;
      scalar_t* gh = grad_hidden_gates.data_ptr<scalar_t>() + i * gh_stride;
      gru_row_backward(g_out, r, z, n, h, h_n, H, grad_hidden.data_ptr<scalar_t>() + i * H, gi, gi + H, gi + 2 * H,
                       gh, gh + H, gh + 2 * H);
    }
  });
}

namespace {

// h' = (h - n) z + n,  r = sigmoid(i_r + h_r),  z = sigmoid(i_z + h_z),  n = tanh(i_n + r h_n):
// torch's GRUCell from the gates' pre-activations (B, 3H) in its order [r | z | n].
struct GRUStep : public torch::autograd::Function<GRUStep> {
  static Tensor forward(AutogradContext* ctx, const Tensor& input_gates_in, const Tensor& hidden_gates_in,
                        const Tensor& hidden_in) {
    check_cpu_input(hidden_in, "gru_step: hidden", hidden_in);
    check_cpu_input(input_gates_in, "gru_step: input_gates", hidden_in);
    check_cpu_input(hidden_gates_in, "gru_step: hidden_gates", hidden_in);
    TORCH_CHECK(hidden_in.dim() >= 1, "gru_step: the hidden state must have a feature dimension");
    const int64_t H = hidden_in.size(-1);
    std::vector<int64_t> gate_shape = hidden_in.sizes().vec();
    gate_shape.back() = 3 * H;
    TORCH_CHECK(input_gates_in.sizes() == gate_shape && hidden_gates_in.sizes() == gate_shape, "gru_step: the gates must be ",
                at::IntArrayRef(gate_shape), " for a hidden state of ", hidden_in.sizes());
    // any leading dimensions as rows; a 2-D view of wider rows is read in place
    GRUPass pass;
    const Tensor out = gru_forward(input_gates_in.reshape({-1, 3 * H}), hidden_gates_in.reshape({-1, 3 * H}),
                                   hidden_in.reshape({-1, H}), pass);
    ctx->save_for_backward({pass.reset_update, pass.candidate, pass.hidden, pass.hidden_gates});
    ctx->saved_data["shape"] = hidden_in.sizes().vec();
    return out.view(hidden_in.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    check_no_double_backward("gru_step");
    const auto saved = ctx->get_saved_variables();
    const GRUPass pass{saved[0], saved[1], saved[2], saved[3]};
    const int64_t B = pass.hidden.size(0), H = pass.hidden.size(1);
    const Tensor grad = grads[0].reshape({B, H}).contiguous();
    Tensor grad_input_gates = at::empty({B, 3 * H}, pass.hidden.options());
    Tensor grad_hidden_gates = at::empty({B, 3 * H}, pass.hidden.options());
    Tensor grad_hidden = at::empty({B, H}, pass.hidden.options());
    gru_backward(grad, pass, grad_input_gates, grad_hidden_gates, grad_hidden);
    std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector(), gate_shape = shape;
    gate_shape.back() = 3 * H;
    return {grad_input_gates.view(gate_shape), grad_hidden_gates.view(gate_shape), grad_hidden.view(shape)};
  }
};

// lambda = softmax(-z^2 / 2) over the real positions, z = (positions - mu) / sigma: (lambda, z).
// positions and padding_mask (B, S), mu and sigma (B,) contiguous.
std::pair<Tensor, Tensor> gaussian_focus(const Tensor& positions_in, const Tensor& mu, const Tensor& sigma,
                                         const Tensor& padding_mask_in) {
  const Tensor positions = positions_in.contiguous(), padding_mask = padding_mask_in.contiguous();
  const int64_t B = positions.size(0), S = positions.size(1);
  Tensor z = at::empty({B, S}, positions.options());
  Tensor logits = at::empty({B, S}, positions.options());
  AT_DISPATCH_FLOATING_TYPES(positions.scalar_type(), "gaussian_focus", [&] {
    for (int64_t i = 0; i < B; ++i)
      gaussian_logits_row(positions.data_ptr<scalar_t>() + i * S, padding_mask.data_ptr<bool>() + i * S,
                          mu.data_ptr<scalar_t>()[i], sigma.data_ptr<scalar_t>()[i], S,
                          z.data_ptr<scalar_t>() + i * S, logits.data_ptr<scalar_t>() + i * S);
  });
  return {logits.softmax(-1), z};
}

// lambda = softmax(-z^2 / 2) over the real positions, z = (positions - mu) / sigma.  Backward:
// dL/dl = lambda (g - <lambda, g>) through the softmax, then dl/dmu = z / sigma, dl/dsigma = z^2 / sigma.
struct SoftmaxGaussian : public torch::autograd::Function<SoftmaxGaussian> {
  static Tensor forward(AutogradContext* ctx, const Tensor& positions_in, const Tensor& mu_in, const Tensor& sigma_in,
                        const Tensor& padding_mask_in) {
    check_cpu_input(positions_in, "softmax_gaussian: positions", positions_in);
    check_cpu_input(mu_in, "softmax_gaussian: mu", positions_in);
    check_cpu_input(sigma_in, "softmax_gaussian: sigma", positions_in);
    check_focus_memory(positions_in, padding_mask_in, "softmax_gaussian");
    const int64_t B = positions_in.size(0);
    TORCH_CHECK(mu_in.dim() == 1 && mu_in.size(0) == B && sigma_in.dim() == 1 && sigma_in.size(0) == B,
                "softmax_gaussian: mu and sigma must be (", B, ",), one a row");
    Tensor weights, z;
    std::tie(weights, z) = gaussian_focus(positions_in, mu_in.contiguous(), sigma_in.contiguous(), padding_mask_in);
    ctx->save_for_backward({weights, z, sigma_in.contiguous()});
    return weights;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    check_no_double_backward("softmax_gaussian");
    const auto saved = ctx->get_saved_variables();
    const Tensor &weights = saved[0], &z = saved[1], &sigma = saved[2];
    const Tensor grad = grads[0].contiguous();
    const int64_t B = weights.size(0), S = weights.size(1);
    Tensor grad_mu = at::empty({B}, weights.options());
    Tensor grad_sigma = at::empty({B}, weights.options());
    AT_DISPATCH_FLOATING_TYPES(weights.scalar_type(), "softmax_gaussian_backward", [&] {
      std::vector<scalar_t> scratch(S);
      for (int64_t i = 0; i < B; ++i)
        gaussian_focus_backward_row(weights.data_ptr<scalar_t>() + i * S, z.data_ptr<scalar_t>() + i * S,
                                    grad.data_ptr<scalar_t>() + i * S, sigma.data_ptr<scalar_t>()[i], S,
                                    scratch.data(), grad_mu.data_ptr<scalar_t>()[i], grad_sigma.data_ptr<scalar_t>()[i]);
    });
    return {Tensor(), grad_mu, grad_sigma, Tensor()};
  }
};

}  // namespace

// The location focus of one decoder step from its heads (location.py, with the step activations of
// steps.py and the references of references.py; step_parts.h has the equations), forward and
// backward each one loop over the rows.  Forward computes the Python code's function in its order
// of operations with the C library's exp (the Python code's outputs to float rounding: torch's
// vectorised exp and softmax round differently in the last bits).
StepKind step_kind_of(const std::string& name) {
  if (name == "sigmoid") return StepKind::sigmoid;
  if (name == "mono") return StepKind::mono;
  if (name == "relu") return StepKind::relu;
  if (name == "softstair") return StepKind::softstair;
  if (name == "none") return StepKind::none;
  TORCH_CHECK(false, "location_focus: unknown step activation '", name, "' (sigmoid, mono, relu, softstair, none)");
}

ReferenceKind reference_kind_of(const std::string& name) {
  if (name == "previous") return ReferenceKind::previous;
  if (name == "gated") return ReferenceKind::gated;
  if (name == "initial-bias") return ReferenceKind::initial_bias;
  TORCH_CHECK(false, "location_focus: unknown reference '", name, "' (previous, gated, initial-bias)");
}

int64_t reference_heads(ReferenceKind kind) { return kind == ReferenceKind::gated ? 2 : kind == ReferenceKind::initial_bias ? 1 : 0; }

void location_forward(const Tensor& heads_in, const Tensor& previous_in, const Tensor& mono_gate,
                      const FocusMemory& memory, const LocationSettings& settings, int64_t step, LocationPass& pass) {
  // one loop over the rows, reading the heads in place (a view of wider rows is fine)
  const Tensor heads = rows_of(heads_in), previous = previous_in.contiguous();
  const Tensor &positions = memory.positions, &padding_mask = memory.padding_mask;
  const int64_t B = positions.size(0), S = positions.size(1), heads_stride = heads.stride(0);
  pass.weights = given_or_empty(pass.weights, {B, S}, positions);
  pass.z = given_or_empty(pass.z, {B, S}, positions);
  for (Tensor* row : {&pass.mu, &pass.steps, &pass.position, &pass.sigma, &pass.unclamped})
    *row = given_or_empty(*row, {B}, positions);
  const StepKind step_kind = settings.step_kind;
  const ReferenceKind reference = settings.reference;
  const bool first_step = step == 1;
  AT_DISPATCH_FLOATING_TYPES(positions.scalar_type(), "location_focus", [&] {
    using T = scalar_t;
    const T temperature = static_cast<T>(settings.step_temperature), slope = static_cast<T>(settings.clamp_slope);
    const T sigma_min = static_cast<T>(settings.sigma_min);
    const T gate = step_kind == StepKind::mono ? scalar_sigmoid(mono_gate.item<T>()) : T(0);
    for (int64_t i = 0; i < B; ++i) {
      const T* h = heads.data_ptr<T>() + i * heads_stride;
      const T rho = h[0];
      T steps = rho;  // the step activations of steps.py
      switch (step_kind) {
        case StepKind::sigmoid:
          steps = scalar_sigmoid(temperature * rho);
          break;
        case StepKind::mono: {  // b + g (ReLU(rho) - b)
          const T bounded = scalar_sigmoid(temperature * rho);
          steps = bounded + gate * ((rho > 0 ? rho : T(0)) - bounded);
          break;
        }
        case StepKind::relu:
          steps = rho > 0 ? rho : T(0);
          break;
        case StepKind::softstair: {
          const T floor = std::floor(rho);
          steps = floor + scalar_sigmoid((rho - floor - T(0.5)) * temperature);
          break;
        }
        case StepKind::none:
          break;
      }
      const T before = previous.data_ptr<T>()[i];
      T origin = before;  // the references of references.py
      if (reference == ReferenceKind::gated)
        origin = scalar_sigmoid(h[3]) * before + scalar_sigmoid(h[2]);
      else if (reference == ReferenceKind::initial_bias && first_step)
        origin = scalar_sigmoid(h[2]);
      const T unclamped = origin + steps * memory.step_size.data_ptr<T>()[i];
      T mu = unclamped;
      if (settings.clamp_slope >= 0) {  // max(m mu, min(1 + m mu, mu))
        const T leak = unclamped * slope;
        mu = std::max(leak, std::min(leak + 1, unclamped));
      }
      const T sigma = ((h[1] > 0 ? h[1] : T(0)) + sigma_min) / memory.lengths.data_ptr<T>()[i];
      // lambda = softmax(-z^2 / 2) over the real positions, z = (positions - mu) / sigma
      const T* p = positions.data_ptr<T>() + i * S;
      const bool* pad = padding_mask.data_ptr<bool>() + i * S;
      T* w = pass.weights.data_ptr<T>() + i * S;
      gaussian_logits_row(p, pad, mu, sigma, S, pass.z.data_ptr<T>() + i * S, w);
      masked_softmax_row(w, pad, S, w);
      T position = 0;
      for (int64_t j = 0; j < S; ++j) position += w[j] * p[j];
      pass.steps.data_ptr<T>()[i] = steps;
      pass.unclamped.data_ptr<T>()[i] = unclamped;
      pass.mu.data_ptr<T>()[i] = mu;
      pass.sigma.data_ptr<T>()[i] = sigma;
      pass.position.data_ptr<T>()[i] = position;
    }
  });
  pass.heads = heads;
  pass.previous = previous;
  pass.mono_gate = mono_gate;
  pass.first_step = first_step;
}

double location_backward(const LocationPass& pass, const FocusMemory& memory, const LocationSettings& settings,
                         const Tensor& grad_weights, const Tensor& grad_mu_out, const Tensor& grad_steps_out,
                         const Tensor& grad_position, Tensor& grad_heads, Tensor& grad_previous) {
  const Tensor &heads = pass.heads, &weights = pass.weights, &z = pass.z, &sigma = pass.sigma;
  const Tensor &positions = memory.positions, &step_size = memory.step_size, &lengths = memory.lengths;
  const StepKind step_kind = settings.step_kind;
  const ReferenceKind reference = settings.reference;
  const int64_t B = weights.size(0), S = weights.size(1), heads_stride_in = heads.stride(0);
  const int64_t heads_stride = grad_heads.stride(0);
  TORCH_CHECK(grad_heads.stride(1) == 1 && grad_previous.is_contiguous() && grad_weights.is_contiguous(),
              "location_backward: the gradients' rows must be contiguous");
  double grad_gate = 0;
  AT_DISPATCH_FLOATING_TYPES(heads.scalar_type(), "location_focus_backward", [&] {
    using T = scalar_t;
    const T T_ = static_cast<T>(settings.step_temperature), m = static_cast<T>(settings.clamp_slope);
    const T gate = step_kind == StepKind::mono ? scalar_sigmoid(pass.mono_gate.item<T>()) : T(0);
    T grad_gate_sum = 0;
    std::vector<T> grad_row(S);
    const T* g_positions = numbers_or_null<T>(grad_position);
    const T *g_mus = numbers_or_null<T>(grad_mu_out), *g_steps_out = numbers_or_null<T>(grad_steps_out);
    for (int64_t i = 0; i < B; ++i) {
      const T* h = heads.data_ptr<T>() + i * heads_stride_in;
      const T* p = positions.data_ptr<T>() + i * S;
      const T* g = grad_weights.data_ptr<T>() + i * S;
      const T g_position = (g_positions ? g_positions[i] : T(0));
      for (int64_t j = 0; j < S; ++j) grad_row[j] = g[j] + g_position * p[j];  // position = <lambda, positions>
      T g_mu, g_sigma;
      gaussian_focus_backward_row(weights.data_ptr<T>() + i * S, z.data_ptr<T>() + i * S, grad_row.data(),
                                  sigma.data_ptr<T>()[i], S, grad_row.data(), g_mu, g_sigma);
      g_mu += (g_mus ? g_mus[i] : T(0));
      if (settings.clamp_slope >= 0) {  // mu = max(a, c), a = m x, c = min(d, x), d = a + 1
        const T x = pass.unclamped.data_ptr<T>()[i], a = x * m, d = a + 1, c = std::min(d, x);
        const T g_a = g_mu * share_of_max(a, c), g_c = g_mu * share_of_max(c, a);
        g_mu = m * g_a + m * (g_c * share_of_max(x, d)) + g_c * share_of_max(d, x);  // min: the smaller wins
      }
      const T g_steps = (g_steps_out ? g_steps_out[i] : T(0)) + g_mu * step_size.data_ptr<T>()[i];
      const T rho = h[0];
      T g_rho = 0;
      switch (step_kind) {
        case StepKind::sigmoid: {
          const T s = scalar_sigmoid(rho * T_);
          g_rho = g_steps * T_ * s * (1 - s);
          break;
        }
        case StepKind::mono: {  // b + g (ReLU(rho) - b), b = sigmoid(T rho), g = sigmoid(p)
          const T b = scalar_sigmoid(rho * T_);
          g_rho = g_steps * ((1 - gate) * T_ * b * (1 - b) + (rho > 0 ? gate : T(0)));
          grad_gate_sum += g_steps * gate * (1 - gate) * ((rho > 0 ? rho : T(0)) - b);
          break;
        }
        case StepKind::relu:
          g_rho = rho > 0 ? g_steps : T(0);
          break;
        case StepKind::softstair: {
          const T s = scalar_sigmoid((rho - std::floor(rho) - T(0.5)) * T_);
          g_rho = g_steps * T_ * s * (1 - s);
          break;
        }
        case StepKind::none:
          g_rho = g_steps;
          break;
      }
      T* gh = grad_heads.data_ptr<T>() + i * heads_stride;
      gh[0] = g_rho;
      gh[1] = h[1] > 0 ? g_sigma / lengths.data_ptr<T>()[i] : T(0);  // sigma = (ReLU(w) + sigma_min) / L
      T& g_previous = grad_previous.data_ptr<T>()[i];
      if (reference == ReferenceKind::gated) {  // ref = sigmoid(gate) previous + sigmoid(bias)
        const T sg = scalar_sigmoid(h[3]), sb = scalar_sigmoid(h[2]);
        g_previous = g_mu * sg;
        gh[2] = g_mu * sb * (1 - sb);
        gh[3] = g_mu * pass.previous.data_ptr<T>()[i] * sg * (1 - sg);
      } else if (reference == ReferenceKind::initial_bias) {  // ref = sigmoid(bias) at step 1, previous after
        const T sb = scalar_sigmoid(h[2]);
        g_previous = pass.first_step ? T(0) : g_mu;
        gh[2] = pass.first_step ? g_mu * sb * (1 - sb) : T(0);
      } else {
        g_previous = g_mu;
      }
    }
    grad_gate = static_cast<double>(grad_gate_sum);
  });
  return grad_gate;
}

namespace {

// The location focus of one decoder step from its heads, as one autograd node.
struct LocationFocus : public torch::autograd::Function<LocationFocus> {
  static variable_list forward(AutogradContext* ctx, const Tensor& heads_in, const Tensor& previous,
                               const Tensor& mono_gate, const Tensor& positions, const Tensor& step_size,
                               const Tensor& lengths, const Tensor& padding_mask, const std::string& step_name,
                               double step_temperature, const std::string& reference_name, int64_t step,
                               double sigma_min, double clamp_slope) {
    const LocationSettings settings{step_kind_of(step_name), step_temperature, reference_kind_of(reference_name),
                                    sigma_min, clamp_slope};
    for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{heads_in, "heads"}, {previous, "previous"},
                                  {step_size, "step_size"}, {lengths, "lengths"}})
      check_cpu_input(t, std::string("location_focus: ") + name, positions);
    check_focus_memory(positions, padding_mask, "location_focus");
    const int64_t B = positions.size(0), num_heads = 2 + reference_heads(settings.reference);
    TORCH_CHECK(heads_in.dim() == 2 && heads_in.size(0) == B && heads_in.size(1) == num_heads,
                "location_focus: heads must be (", B, ", ", num_heads, ") for the reference '", reference_name, "'");
    TORCH_CHECK(previous.dim() == 1 && previous.size(0) == B && step_size.sizes() == previous.sizes() &&
                    lengths.sizes() == previous.sizes(),
                "location_focus: previous, step_size and lengths must be (", B, ",), one a row");
    if (settings.step_kind == StepKind::mono) check_cpu_input(mono_gate, "location_focus: mono_gate", positions);
    const FocusMemory memory{positions.contiguous(), padding_mask.contiguous(), step_size.contiguous(),
                             lengths.contiguous()};
    LocationPass pass;
    location_forward(heads_in, previous, mono_gate, memory, settings, step, pass);
    // (the backward pass reads the rows in place)
    ctx->save_for_backward({pass.heads, pass.previous, mono_gate, memory.positions, memory.step_size,
                            memory.lengths, pass.weights, pass.z, pass.sigma, pass.unclamped});
    save_location_settings(ctx, settings);
    ctx->saved_data["first_step"] = pass.first_step;
    return {pass.weights, pass.mu, pass.steps, pass.position};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    check_no_double_backward("location_focus");
    const auto saved = ctx->get_saved_variables();
    LocationPass pass;
    pass.heads = saved[0];
    pass.previous = saved[1];
    pass.mono_gate = saved[2];
    pass.weights = saved[6];
    pass.z = saved[7];
    pass.sigma = saved[8];
    pass.unclamped = saved[9];
    pass.first_step = ctx->saved_data["first_step"].toBool();
    const FocusMemory memory{saved[3], Tensor(), saved[4], saved[5]};
    const LocationSettings settings = saved_location_settings(ctx);
    // an output nobody used has no gradient (read as zeros)
    const Tensor grad_weights = grads[0].defined() ? grads[0].contiguous() : at::zeros_like(pass.weights);
    Tensor grad_heads = at::empty(pass.heads.sizes(), pass.heads.options());
    Tensor grad_previous = at::empty({pass.heads.size(0)}, pass.heads.options());
    const double grad_gate = location_backward(pass, memory, settings, grad_weights, used_gradient(grads[1]),
                                               used_gradient(grads[2]), used_gradient(grads[3]), grad_heads,
                                               grad_previous);
    Tensor grad_gate_tensor;
    if (settings.step_kind == StepKind::mono) grad_gate_tensor = at::full({}, grad_gate, pass.heads.options());
    return {grad_heads, grad_previous, grad_gate_tensor, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(),
            Tensor(),   Tensor(),      Tensor(),         Tensor(), Tensor()};
  }
};

}  // namespace

// The mixed focus of one decoder step (cross_attention.py; step_parts.h has the equations), forward
// and backward each one loop over the rows (the Python code's outputs to float rounding, as the
// location focus).
void mixed_forward(const Tensor& scores_in, const Tensor& padding_mask_in, const Tensor& location_in,
                   const Tensor& mix_logit_in, double temperature, const Tensor& positions_in, MixPass& pass) {
  // one loop over the rows, with the C library's exp (as the location focus)
  const Tensor scores = rows_of(scores_in), location = location_in.contiguous(), mix_logit = rows_of(mix_logit_in);
  const Tensor positions = positions_in.contiguous(), padding_mask = padding_mask_in.contiguous();
  const int64_t B = positions.size(0), S = positions.size(1);
  const int64_t scores_stride = scores.stride(0), mix_stride = mix_logit.stride(0);
  pass.content = given_or_empty(pass.content, {B, S}, positions);
  pass.mix = given_or_empty(pass.mix, {B, 1}, positions);
  pass.weights = given_or_empty(pass.weights, {B, S}, positions);
  pass.position = given_or_empty(pass.position, {B}, positions);
  pass.location = location;
  AT_DISPATCH_FLOATING_TYPES(positions.scalar_type(), "mixed_focus", [&] {
    using T = scalar_t;
    const T beta = static_cast<T>(temperature);
    for (int64_t i = 0; i < B; ++i) {
      const T* s = scores.data_ptr<T>() + i * scores_stride;
      const T *l = location.data_ptr<T>() + i * S, *p = positions.data_ptr<T>() + i * S;
      const bool* pad = padding_mask.data_ptr<bool>() + i * S;
      T *c = pass.content.data_ptr<T>() + i * S, *w = pass.weights.data_ptr<T>() + i * S;
      const T m = scalar_sigmoid(beta * mix_logit.data_ptr<T>()[i * mix_stride]);
      masked_softmax_row(s, pad, S, c);  // content = softmax(scores) over the real positions
      T position = 0;
      for (int64_t j = 0; j < S; ++j) {
        w[j] = l[j] + m * (c[j] - l[j]);  // = m content + (1 - m) location
        position += w[j] * p[j];
      }
      pass.mix.data_ptr<T>()[i] = m;
      pass.position.data_ptr<T>()[i] = position;
    }
  });
}

void mixed_backward(const MixPass& pass, const Tensor& positions, double temperature, const Tensor& grad_weights,
                    const Tensor& grad_position, Tensor& grad_scores, Tensor& grad_location, Tensor& grad_mix) {
  const Tensor &content = pass.content, &location = pass.location, &mix = pass.mix;
  const int64_t B = content.size(0), S = content.size(1), mix_stride = grad_mix.stride(0);
  TORCH_CHECK(grad_weights.is_contiguous() && grad_scores.is_contiguous() && grad_location.is_contiguous(),
              "mixed_backward: the gradients must be contiguous");
  AT_DISPATCH_FLOATING_TYPES(content.scalar_type(), "mixed_focus_backward", [&] {
    using T = scalar_t;
    const T* g_positions = numbers_or_null<T>(grad_position);
    std::vector<T> grad_content(S);
    for (int64_t i = 0; i < B; ++i) {
      const T *c = content.data_ptr<T>() + i * S, *l = location.data_ptr<T>() + i * S;
      const T *p = positions.data_ptr<T>() + i * S, *g = grad_weights.data_ptr<T>() + i * S;
      const T m = mix.data_ptr<T>()[i], g_position = g_positions ? g_positions[i] : T(0);
      T* g_l = grad_location.data_ptr<T>() + i * S;
      T g_m = 0;  // dL/dm
      for (int64_t j = 0; j < S; ++j) {
        const T g_w = g[j] + g_position * p[j];  // position = <weights, positions>
        g_m += g_w * (c[j] - l[j]);
        grad_content[j] = g_w * m;
        g_l[j] = g_w - grad_content[j];
      }
      softmax_row_backward(c, grad_content.data(), S, grad_scores.data_ptr<T>() + i * S);  // content = softmax(scores)
      grad_mix.data_ptr<T>()[i * mix_stride] = g_m * static_cast<T>(temperature) * m * (1 - m);
    }
  });
}

void softmax_backward(const Tensor& weights, const Tensor& grad, Tensor& grad_scores) {
  const int64_t B = weights.size(0), S = weights.size(1);
  AT_DISPATCH_FLOATING_TYPES(weights.scalar_type(), "softmax_backward", [&] {
    using T = scalar_t;
    for (int64_t i = 0; i < B; ++i)
      softmax_row_backward(weights.data_ptr<T>() + i * S, grad.data_ptr<T>() + i * S, S,
                           grad_scores.data_ptr<T>() + i * S);
  });
}

namespace {

// The mixed focus of one decoder step, as one autograd node.
struct MixedFocus : public torch::autograd::Function<MixedFocus> {
  static variable_list forward(AutogradContext* ctx, const Tensor& scores, const Tensor& padding_mask,
                               const Tensor& location, const Tensor& mix_logit, double temperature,
                               const Tensor& positions) {
    for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{scores, "scores"}, {location, "location"},
                                  {mix_logit, "mix_logit"}})
      check_cpu_input(t, std::string("mixed_focus: ") + name, positions);
    check_focus_memory(positions, padding_mask, "mixed_focus");
    TORCH_CHECK(scores.sizes() == positions.sizes() && location.sizes() == positions.sizes(),
                "mixed_focus: scores and location must be (rows, source positions) like positions");
    const int64_t B = positions.size(0);
    TORCH_CHECK(mix_logit.dim() == 2 && mix_logit.size(0) == B && mix_logit.size(1) == 1,
                "mixed_focus: mix_logit must be (", B, ", 1), one a row");
    MixPass pass;
    mixed_forward(scores, padding_mask, location, mix_logit, temperature, positions, pass);
    ctx->save_for_backward({pass.content, pass.location, pass.mix, positions.contiguous()});
    ctx->saved_data["temperature"] = temperature;
    return {pass.weights, pass.position};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    check_no_double_backward("mixed_focus");
    const auto saved = ctx->get_saved_variables();
    MixPass pass;
    pass.content = saved[0];
    pass.location = saved[1];
    pass.mix = saved[2];
    const int64_t B = pass.content.size(0), S = pass.content.size(1);
    const Tensor grad_weights = grads[0].defined() ? grads[0].contiguous() : at::zeros_like(pass.content);
    Tensor grad_scores = at::empty({B, S}, pass.content.options());
    Tensor grad_location = at::empty({B, S}, pass.content.options());
    Tensor grad_mix = at::empty({B, 1}, pass.content.options());
    mixed_backward(pass, saved[3], ctx->saved_data["temperature"].toDouble(), grad_weights, used_gradient(grads[1]),
                   grad_scores, grad_location, grad_mix);
    return {grad_scores, Tensor(), grad_location, grad_mix, Tensor(), Tensor()};
  }
};

// The per-step products of modules/step_linear.py, each a Function whose backward pass gives the
// gradient the recurrence needs now and files the factors of the fixed operand's gradient in the
// PendingFactors the steps share (kept in ctx->saved_data: a registered custom class).  The fixed
// operand is an input, so that its collector's node runs after every step's (it gets no gradient
// here).

// row_times: x_b M_b for each b, rows (B, K) times matrices (B, K, N), as a batch of row vectors
Tensor row_times(const Tensor& rows, const Tensor& matrices) { return at::bmm(rows.unsqueeze(1), matrices).squeeze(1); }

void check_pending(const c10::intrusive_ptr<PendingFactors>& pending, const char* node) {
  TORCH_CHECK(pending, node, ": no PendingFactors to file the gradient's factors in");
}

c10::intrusive_ptr<PendingFactors> pending_of(AutogradContext* ctx) {
  return ctx->saved_data["pending"].toCustomClass<PendingFactors>();
}

// offset + x W^T + b, filing (dL/dy, x) for dL/dW = sum_t (dL/dy_t)^T x_t and dL/db = sum_t dL/dy_t.
struct StepProductBackward : public torch::autograd::Function<StepProductBackward> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                        const std::optional<Tensor>& offset, const c10::intrusive_ptr<PendingFactors>& pending) {
    check_pending(pending, "step_product");
    Tensor out = x.mm(weight.t());  // the same operations as the Python node, for the same rounding
    if (bias && bias->defined()) out = out + *bias;
    const bool has_offset = offset && offset->defined();
    if (has_offset) out = out + *offset;
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x, weight});
    ctx->saved_data["pending"] = pending;
    ctx->saved_data["has_offset"] = has_offset;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    check_no_double_backward("step_product");
    const Tensor& grad = grads[0];
    if (!grad.defined()) return variable_list(5);
    const auto saved = ctx->get_saved_variables();
    pending_of(ctx)->pairs.emplace_back(grad, saved[0]);  // dL/dW += (dL/dy)^T x, dL/db += dL/dy: at the collector
    return {ctx->needs_input_grad(0) ? grad.mm(saved[1]) : Tensor(), Tensor(), Tensor(),
            ctx->saved_data["has_offset"].toBool() ? grad : Tensor(), Tensor()};
  }
};

// The two products of a row vector with a per-example matrix M: a read, y = w M, which files
// (w, dL/dy) for dL/dM = w^T dL/dy, and a score, s = M q (q M^T as a row), which files (dL/ds, q)
// for dL/dM = (dL/ds)^T q.  Either way the row's gradient is the output's gradient times M
// transposed the other way.
Tensor step_operand_forward(AutogradContext* ctx, const Tensor& row, const Tensor& operand, bool is_score,
                            const c10::intrusive_ptr<PendingFactors>& pending) {
  check_pending(pending, is_score ? "step_score" : "step_read");
  ctx->set_materialize_grads(false);
  ctx->save_for_backward({row, operand});
  ctx->saved_data["pending"] = pending;
  return row_times(row, is_score ? operand.transpose(1, 2) : operand);
}

variable_list step_operand_backward(AutogradContext* ctx, const variable_list& grads, bool is_score) {
  check_no_double_backward(is_score ? "step_score" : "step_read");
  const Tensor& grad = grads[0];
  if (!grad.defined()) return variable_list(3);
  const auto saved = ctx->get_saved_variables();
  const Tensor &row = saved[0], &operand = saved[1];
  if (is_score)
    pending_of(ctx)->pairs.emplace_back(grad, row);
  else
    pending_of(ctx)->pairs.emplace_back(row, grad);
  if (!ctx->needs_input_grad(0)) return variable_list(3);
  return {row_times(grad, is_score ? operand : operand.transpose(1, 2)), Tensor(), Tensor()};
}

struct StepReadBackward : public torch::autograd::Function<StepReadBackward> {
  static Tensor forward(AutogradContext* ctx, const Tensor& weights, const Tensor& operand,
                        const c10::intrusive_ptr<PendingFactors>& pending) {
    return step_operand_forward(ctx, weights, operand, /*is_score=*/false, pending);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return step_operand_backward(ctx, grads, /*is_score=*/false);
  }
};

struct StepScoreBackward : public torch::autograd::Function<StepScoreBackward> {
  static Tensor forward(AutogradContext* ctx, const Tensor& query, const Tensor& operand,
                        const c10::intrusive_ptr<PendingFactors>& pending) {
    return step_operand_forward(ctx, query, operand, /*is_score=*/true, pending);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return step_operand_backward(ctx, grads, /*is_score=*/true);
  }
};

}  // namespace

Tensor step_product(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                    const std::optional<Tensor>& offset, const c10::intrusive_ptr<PendingFactors>& pending) {
  return StepProductBackward::apply(x, weight, bias, offset, pending);
}

Tensor step_read(const Tensor& weights, const Tensor& operand, const c10::intrusive_ptr<PendingFactors>& pending) {
  return StepReadBackward::apply(weights, operand, pending);
}

Tensor step_score(const Tensor& query, const Tensor& operand, const c10::intrusive_ptr<PendingFactors>& pending) {
  return StepScoreBackward::apply(query, operand, pending);
}

Tensor gru_step(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hidden) {
  return GRUStep::apply(input_gates, hidden_gates, hidden);
}

Tensor softmax_gaussian(const Tensor& positions, const Tensor& mu, const Tensor& sigma, const Tensor& padding_mask) {
  return SoftmaxGaussian::apply(positions, mu, sigma, padding_mask);
}

std::vector<Tensor> mixed_focus(const Tensor& scores, const Tensor& padding_mask, const Tensor& location,
                                const Tensor& mix_logit, double temperature, const Tensor& positions) {
  return MixedFocus::apply(scores, padding_mask, location, mix_logit, temperature, positions);
}

std::vector<Tensor> location_focus(const Tensor& heads, const Tensor& previous, const std::optional<Tensor>& mono_gate,
                                   const Tensor& positions, const Tensor& step_size, const Tensor& lengths,
                                   const Tensor& padding_mask, const std::string& step_activation,
                                   double step_temperature, const std::string& reference, int64_t step,
                                   double sigma_min, std::optional<double> clamp_slope) {
  TORCH_CHECK(!clamp_slope || *clamp_slope >= 0, "location_focus: clamp_slope must be >= 0 (or None: no clamp)");
  TORCH_CHECK(step_activation != "mono" || (mono_gate && mono_gate->dim() == 0),
              "location_focus: mono needs its gate logit (a scalar)");
  // an undefined tensor cannot be a Function's input: a scalar stands in for a missing gate
  return LocationFocus::apply(heads, previous, mono_gate ? *mono_gate : at::zeros({}, positions.options()), positions, step_size, lengths,
                              padding_mask, step_activation, step_temperature, reference, step, sigma_min,
                              clamp_slope.value_or(-1.0));
}

}  // namespace fairseq_monoattn
