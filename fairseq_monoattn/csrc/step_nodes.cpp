// The pieces of a decoder step that the plugin writes as autograd nodes of its own, in C++: the GRU
// update, the softmax focus of the location attention, and the per-step products whose fixed
// operand takes its gradient once after the last step (modules/step_linear.py).  Python's
// autograd.Function does the same with about 25 microseconds more a call, forward and backward,
// which is much of what these nodes cost on a batch of 32 rows (modules/gru.py, normalizations.py
// and step_linear.py hold the Python versions and say which runs when).  Forward makes the Python
// versions' operations with torch's own kernels, so its outputs are theirs bit for bit; the
// backward passes of the GRU update and the focus are plain loops.

#include "kernels.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>

#include <limits>

namespace fairseq_monoattn {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

void check_step_input(const Tensor& t, const char* name, const Tensor& like) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be on the CPU");
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), name, " must have the dtype of the others (",
              like.scalar_type(), "), not ", t.scalar_type());
}

// rows of a 2-D tensor whose last dimension is contiguous (a view of wider rows is fine)
Tensor rows_of(const Tensor& t) { return t.stride(1) == 1 ? t : t.contiguous(); }

void check_no_double_backward(const char* node) {
  TORCH_CHECK(!at::GradMode::is_enabled(), node,
              ": its backward is not differentiable (double backward); set FAIRSEQ_MONOATTN_COMPILED=0 to "
              "run the Python version");
}

// h' = (h - n) z + n,  r = sigmoid(i_r + h_r),  z = sigmoid(i_z + h_z),  n = tanh(i_n + r h_n):
// torch's GRUCell from the gates' pre-activations (B, 3H) in its order [r | z | n].
struct GRUStep : public torch::autograd::Function<GRUStep> {
  static Tensor forward(AutogradContext* ctx, const Tensor& input_gates_in, const Tensor& hidden_gates_in,
                        const Tensor& hidden_in) {
    check_step_input(hidden_in, "gru_step: hidden", hidden_in);
    check_step_input(input_gates_in, "gru_step: input_gates", hidden_in);
    check_step_input(hidden_gates_in, "gru_step: hidden_gates", hidden_in);
    TORCH_CHECK(hidden_in.dim() >= 1, "gru_step: the hidden state must have a feature dimension");
    const int64_t H = hidden_in.size(-1);
    std::vector<int64_t> gate_shape = hidden_in.sizes().vec();
    gate_shape.back() = 3 * H;
    TORCH_CHECK(input_gates_in.sizes() == gate_shape && hidden_gates_in.sizes() == gate_shape, "gru_step: the gates must be ",
                at::IntArrayRef(gate_shape), " for a hidden state of ", hidden_in.sizes());
    // any leading dimensions as rows; a 2-D view of wider rows is read in place
    const Tensor input_gates = rows_of(input_gates_in.reshape({-1, 3 * H}));
    const Tensor hidden_gates = rows_of(hidden_gates_in.reshape({-1, 3 * H}));
    const Tensor hidden = hidden_in.reshape({-1, H}).contiguous();
    const int64_t B = hidden.size(0);
    Tensor reset_update = at::empty({B, 2 * H}, hidden.options());
    Tensor candidate = at::empty({B, H}, hidden.options());
    Tensor out = at::empty({B, H}, hidden.options());
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
        scalar_t* __restrict__ n = candidate.data_ptr<scalar_t>() + i * H;
        for (int64_t j = 0; j < H; ++j) n[j] = i_n[j] + r[j] * h_n[j];
      }
    });
    candidate.tanh_();  // n
    AT_DISPATCH_FLOATING_TYPES(hidden.scalar_type(), "gru_step", [&] {
      for (int64_t i = 0; i < B; ++i) {  // h' = (h - n) z + n
        const scalar_t* __restrict__ z = reset_update.data_ptr<scalar_t>() + i * 2 * H + H;
        const scalar_t* __restrict__ n = candidate.data_ptr<scalar_t>() + i * H;
        const scalar_t* __restrict__ h = hidden.data_ptr<scalar_t>() + i * H;
        scalar_t* __restrict__ h_new = out.data_ptr<scalar_t>() + i * H;
        for (int64_t j = 0; j < H; ++j) h_new[j] = (h[j] - n[j]) * z[j] + n[j];
      }
    });
    ctx->save_for_backward({reset_update, candidate, hidden, hidden_gates});
    ctx->saved_data["shape"] = hidden_in.sizes().vec();
    return out.view(hidden_in.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    check_no_double_backward("gru_step");
    const auto saved = ctx->get_saved_variables();
    const Tensor &reset_update = saved[0], &candidate = saved[1], &hidden = saved[2], &hidden_gates = saved[3];
    const int64_t B = hidden.size(0), H = hidden.size(1), hid_stride = hidden_gates.stride(0);
    const Tensor grad = grads[0].reshape({B, H}).contiguous();
    Tensor grad_input_gates = at::empty({B, 3 * H}, hidden.options());
    Tensor grad_hidden_gates = at::empty({B, 3 * H}, hidden.options());
    Tensor grad_hidden = at::empty({B, H}, hidden.options());
    AT_DISPATCH_FLOATING_TYPES(hidden.scalar_type(), "gru_step_backward", [&] {
      for (int64_t i = 0; i < B; ++i) {
        const scalar_t* __restrict__ g_out = grad.data_ptr<scalar_t>() + i * H;
        const scalar_t* __restrict__ r = reset_update.data_ptr<scalar_t>() + i * 2 * H;
        const scalar_t* __restrict__ z = r + H;
        const scalar_t* __restrict__ n = candidate.data_ptr<scalar_t>() + i * H;
        const scalar_t* __restrict__ h = hidden.data_ptr<scalar_t>() + i * H;
        const scalar_t* __restrict__ h_n = hidden_gates.data_ptr<scalar_t>() + i * hid_stride + 2 * H;
        scalar_t* __restrict__ gi = grad_input_gates.data_ptr<scalar_t>() + i * 3 * H;
        scalar_t* __restrict__ gh = grad_hidden_gates.data_ptr<scalar_t>() + i * 3 * H;
        scalar_t* __restrict__ gk = grad_hidden.data_ptr<scalar_t>() + i * H;
        for (int64_t j = 0; j < H; ++j) gru_element_backward(g_out[j], r[j], z[j], n[j], h[j], h_n[j], j, H, gk, gi, gh);
      }
    });
    std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector(), gate_shape = shape;
    gate_shape.back() = 3 * H;
    return {grad_input_gates.view(gate_shape), grad_hidden_gates.view(gate_shape), grad_hidden.view(shape)};
  }
};

// lambda = softmax(-z^2 / 2) over the real positions, z = (positions - mu) / sigma.  Backward:
// dL/dl = lambda (g - <lambda, g>) through the softmax, then dl/dmu = z / sigma, dl/dsigma = z^2 / sigma.
struct SoftmaxGaussian : public torch::autograd::Function<SoftmaxGaussian> {
  static Tensor forward(AutogradContext* ctx, const Tensor& positions_in, const Tensor& mu_in, const Tensor& sigma_in,
                        const Tensor& padding_mask_in) {
    check_step_input(positions_in, "softmax_gaussian: positions", positions_in);
    check_step_input(mu_in, "softmax_gaussian: mu", positions_in);
    check_step_input(sigma_in, "softmax_gaussian: sigma", positions_in);
    TORCH_CHECK(padding_mask_in.device().is_cpu() && padding_mask_in.scalar_type() == at::kBool,
                "softmax_gaussian: padding_mask must be a bool tensor on the CPU");
    TORCH_CHECK(positions_in.dim() == 2 && padding_mask_in.sizes() == positions_in.sizes(),
                "softmax_gaussian: positions and padding_mask must be (rows, source positions) alike");
    const int64_t B = positions_in.size(0), S = positions_in.size(1);
    TORCH_CHECK(mu_in.dim() == 1 && mu_in.size(0) == B && sigma_in.dim() == 1 && sigma_in.size(0) == B,
                "softmax_gaussian: mu and sigma must be (", B, ",), one a row");
    const Tensor positions = positions_in.contiguous(), mu = mu_in.contiguous(), sigma = sigma_in.contiguous();
    const Tensor padding_mask = padding_mask_in.contiguous();
    Tensor z = at::empty({B, S}, positions.options());
    Tensor logits = at::empty({B, S}, positions.options());
    AT_DISPATCH_FLOATING_TYPES(positions.scalar_type(), "softmax_gaussian", [&] {
      const scalar_t minus_infinity = -std::numeric_limits<scalar_t>::infinity();
      for (int64_t i = 0; i < B; ++i) {
        const scalar_t* __restrict__ p = positions.data_ptr<scalar_t>() + i * S;
        const bool* __restrict__ pad = padding_mask.data_ptr<bool>() + i * S;
        scalar_t* __restrict__ z_ = z.data_ptr<scalar_t>() + i * S;
        scalar_t* __restrict__ l = logits.data_ptr<scalar_t>() + i * S;
        const scalar_t m = mu.data_ptr<scalar_t>()[i], s = sigma.data_ptr<scalar_t>()[i];
        for (int64_t j = 0; j < S; ++j) {
          const scalar_t zj = (p[j] - m) / s;
          z_[j] = zj;
          l[j] = pad[j] ? minus_infinity : static_cast<scalar_t>(-0.5) * zj * zj;
        }
      }
    });
    Tensor weights = logits.softmax(-1);
    ctx->save_for_backward({weights, z, sigma});
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
      const scalar_t* w = weights.data_ptr<scalar_t>();
      const scalar_t* z_ = z.data_ptr<scalar_t>();
      const scalar_t* s = sigma.data_ptr<scalar_t>();
      const scalar_t* g = grad.data_ptr<scalar_t>();
      scalar_t* g_mu = grad_mu.data_ptr<scalar_t>();
      scalar_t* g_sigma = grad_sigma.data_ptr<scalar_t>();
      for (int64_t i = 0; i < B; ++i) {
        const scalar_t *wi = w + i * S, *zi = z_ + i * S, *gi = g + i * S;
        scalar_t expected = 0;  // <lambda, g>
        for (int64_t j = 0; j < S; ++j) expected += wi[j] * gi[j];
        scalar_t along = 0, along_z = 0;  // sum of dL/dl z and of dL/dl z^2
        for (int64_t j = 0; j < S; ++j) {
          const scalar_t grad_logit = wi[j] * (gi[j] - expected);
          along += grad_logit * zi[j];
          along_z += grad_logit * zi[j] * zi[j];
        }
        g_mu[i] = along / s[i];
        g_sigma[i] = along_z / s[i];
      }
    });
    return {Tensor(), grad_mu, grad_sigma, Tensor()};
  }
};

// The per-step products of modules/step_linear.py.  Each is a node of its own (torch's Node, not
// a custom Function, so that it can keep the shared PendingFactors): its backward pass gives the
// gradient the recurrence needs now and files the factors of the fixed operand's gradient.
using torch::autograd::Node;
using torch::autograd::SavedVariable;

// row_times: x_b M_b for each b, rows (B, K) times matrices (B, K, N), as a batch of row vectors
Tensor row_times(const Tensor& rows, const Tensor& matrices) { return at::bmm(rows.unsqueeze(1), matrices).squeeze(1); }

variable_list undefined_gradients(size_t count) { return variable_list(count); }

struct StepProductBackward : public Node {
  SavedVariable x, weight;
  std::shared_ptr<PendingFactors> pending;
  bool has_offset = false;

  variable_list apply(variable_list&& grads) override {
    check_no_double_backward("step_product");
    const Tensor& grad = grads[0];
    if (!grad.defined()) return undefined_gradients(4);
    const Tensor x_ = x.unpack(), weight_ = weight.unpack();
    pending->pairs.emplace_back(grad, x_);  // dL/dW += (dL/dy)^T x, dL/db += dL/dy: at the collector
    return {task_should_compute_output(0) ? grad.mm(weight_) : Tensor(), Tensor(), Tensor(),
            has_offset ? grad : Tensor()};
  }
  void release_variables() override {
    x.reset_data();
    weight.reset_data();
  }
};

// A node of ``Kind`` for ``output`` with ``inputs``' edges, when any input needs a gradient.
template <typename Kind, typename... Inputs>
c10::intrusive_ptr<Kind> record_node(const Tensor& output, const Inputs&... inputs) {
  if (!torch::autograd::compute_requires_grad(inputs...)) return nullptr;
  auto node = c10::make_intrusive<Kind>();
  node->set_next_edges(torch::autograd::collect_next_edges(inputs...));
  torch::autograd::set_history(output, node);
  return node;
}

// The two products of a row vector with a per-example matrix M: a read, y = w M, which files
// (w, dL/dy) for dL/dM = w^T dL/dy, and a score, s = M q (q M^T as a row), which files (dL/ds, q)
// for dL/dM = (dL/ds)^T q.  Either way the row's gradient is the output's gradient times M
// transposed the other way.
struct StepOperandBackward : public Node {
  SavedVariable row, operand;
  std::shared_ptr<PendingFactors> pending;
  bool is_score = false;

  variable_list apply(variable_list&& grads) override {
    check_no_double_backward(is_score ? "step_score" : "step_read");
    const Tensor& grad = grads[0];
    if (!grad.defined()) return undefined_gradients(2);
    const Tensor row_ = row.unpack(), operand_ = operand.unpack();
    if (is_score)
      pending->pairs.emplace_back(grad, row_);
    else
      pending->pairs.emplace_back(row_, grad);
    if (!task_should_compute_output(0)) return {Tensor(), Tensor()};
    return {row_times(grad, is_score ? operand_ : operand_.transpose(1, 2)), Tensor()};
  }
  std::string name() const override { return is_score ? "StepScoreBackward" : "StepReadBackward"; }
  void release_variables() override {
    row.reset_data();
    operand.reset_data();
  }
};

void check_pending(const std::shared_ptr<PendingFactors>& pending, const char* node) {
  TORCH_CHECK(pending != nullptr, node, ": no PendingFactors to file the gradient's factors in");
}

}  // namespace

Tensor step_product(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                    const std::optional<Tensor>& offset, const std::shared_ptr<PendingFactors>& pending) {
  check_pending(pending, "step_product");
  const Tensor bias_ = bias.value_or(Tensor()), offset_ = offset.value_or(Tensor());
  Tensor out;
  {
    at::NoGradGuard no_grad;  // the same operations as the Python node, for the same rounding
    out = x.mm(weight.t());
    if (bias_.defined()) out = out + bias_;
    if (offset_.defined()) out = out + offset_;
  }
  if (auto node = record_node<StepProductBackward>(out, x, weight, bias_, offset_)) {
    node->x = SavedVariable(x, false);
    node->weight = SavedVariable(weight, false);
    node->pending = pending;
    node->has_offset = offset_.defined();
  }
  return out;
}

namespace {
Tensor step_operand(const Tensor& row, const Tensor& operand, bool is_score,
                    const std::shared_ptr<PendingFactors>& pending) {
  check_pending(pending, is_score ? "step_score" : "step_read");
  Tensor out;
  {
    at::NoGradGuard no_grad;
    out = row_times(row, is_score ? operand.transpose(1, 2) : operand);
  }
  if (auto node = record_node<StepOperandBackward>(out, row, operand)) {
    node->row = SavedVariable(row, false);
    node->operand = SavedVariable(operand, false);
    node->pending = pending;
    node->is_score = is_score;
  }
  return out;
}
}  // namespace

Tensor step_read(const Tensor& weights, const Tensor& operand, const std::shared_ptr<PendingFactors>& pending) {
  return step_operand(weights, operand, /*is_score=*/false, pending);
}

Tensor step_score(const Tensor& query, const Tensor& operand, const std::shared_ptr<PendingFactors>& pending) {
  return step_operand(query, operand, /*is_score=*/true, pending);
}

Tensor gru_step(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hidden) {
  return GRUStep::apply(input_gates, hidden_gates, hidden);
}

Tensor softmax_gaussian(const Tensor& positions, const Tensor& mu, const Tensor& sigma, const Tensor& padding_mask) {
  return SoftmaxGaussian::apply(positions, mu, sigma, padding_mask);
}

}  // namespace fairseq_monoattn
