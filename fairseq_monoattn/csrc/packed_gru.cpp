// The time loop of a (multi-direction) GRU over packed rows, forward and backward, as two calls.
//
// Called from fairseq_monoattn/modules/gru.py, which prepares what does not depend on the
// recurrence: the input gates W_ih x + b_ih of every step (one product before the loop) and the
// packing (rows sorted longest first; step t runs on the first sizes[t] rows, which are the
// first sizes[t] rows of step t - 1).  Per step and direction the loop makes one matrix product
// (W_hh h + b_hh forward, the hidden state's gradient backward), one sigmoid and one tanh over
// both directions' rows (torch's own vectorised kernels); the rest of a step is plain loops over
// the step's rows, where torch would record some twenty operator calls and autograd nodes a step.
//
// Gates in torch's order [r | z | n]:
//   r = sigmoid(i_r + h_r),  z = sigmoid(i_z + h_z),  n = tanh(i_n + r * h_n),
//   h' = (h - n) * z + n,    with h_* = (W_hh h + b_hh)_*.

#include "kernels.h"

#include <algorithm>

namespace fairseq_monoattn {

using at::Tensor;

namespace {

void check_input(const Tensor& t, const char* name, int64_t dims) {
  TORCH_CHECK(t.device().is_cpu(), "packed_gru: ", name, " must be on the CPU");
  TORCH_CHECK(t.dim() == dims, "packed_gru: ", name, " must have ", dims, " dimensions");
  TORCH_CHECK(t.is_contiguous(), "packed_gru: ", name, " must be contiguous");
}

std::vector<int64_t> step_starts(const std::vector<int64_t>& sizes, int64_t total) {
  std::vector<int64_t> starts(sizes.size());
  int64_t start = 0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    TORCH_CHECK(sizes[t] > 0 && (t == 0 || sizes[t] <= sizes[t - 1]),
                "packed_gru: sizes must be positive and non-increasing");
    starts[t] = start;
    start += sizes[t];
  }
  TORCH_CHECK(start == total, "packed_gru: sizes sum to ", start, ", the packed rows are ", total);
  return starts;
}

}  // namespace

// rows sorted by length, longest first (ties in batch order); step t runs on the first sizes[t] of
// them, packed row starts[t] + r is sorted row r at step t; the forward direction reads position t
// of its row there, the backward direction position length - 1 - t; output (b, p) reads the packed
// row of the step that computed it, and padding the row ``total`` (past the packed rows).
std::tuple<std::vector<int64_t>, std::vector<Tensor>> packing_plan(const Tensor& lengths_in, int64_t width) {
  TORCH_CHECK(lengths_in.device().is_cpu() && lengths_in.dim() == 1 && lengths_in.numel() > 0,
              "packing_plan: lengths must be a non-empty CPU vector");
  const Tensor lengths_tensor = lengths_in.to(at::kLong).contiguous();
  const int64_t* length = lengths_tensor.data_ptr<int64_t>();
  const int64_t B = lengths_tensor.numel();
  std::vector<int64_t> order(B), rank(B);
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(length[b] >= 1 && length[b] <= width, "packing_plan: row ", b, " has length ", length[b],
                ", outside 1 .. ", width);
    order[b] = b;
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return length[a] > length[b]; });
  for (int64_t r = 0; r < B; ++r) rank[order[r]] = r;
  const int64_t steps = length[order[0]];
  std::vector<int64_t> sizes(steps);
  int64_t total = 0;
  for (int64_t t = 0, rows = B; t < steps; ++t) {
    while (length[order[rows - 1]] <= t) --rows;  // rows longer than t
    sizes[t] = rows;
    total += rows;
  }
  const std::vector<int64_t> starts = step_starts(sizes, total);
  const auto options = lengths_tensor.options();
  Tensor forward_inputs = at::empty({total}, options), backward_inputs = at::empty({total}, options);
  Tensor forward_outputs = at::empty({B, width}, options), backward_outputs = at::empty({B, width}, options);
  Tensor finals = at::empty({B}, options);
  int64_t* fi = forward_inputs.data_ptr<int64_t>();
  int64_t* bi = backward_inputs.data_ptr<int64_t>();
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t r = 0; r < sizes[t]; ++r) {
      const int64_t row = order[r];
      fi[starts[t] + r] = row * width + t;
      bi[starts[t] + r] = row * width + length[row] - 1 - t;
    }
  int64_t* fo = forward_outputs.data_ptr<int64_t>();
  int64_t* bo = backward_outputs.data_ptr<int64_t>();
  int64_t* last = finals.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = length[b];
    for (int64_t p = 0; p < width; ++p) {
      fo[b * width + p] = p < n ? starts[p] + rank[b] : total;
      bo[b * width + p] = p < n ? starts[n - 1 - p] + rank[b] : total;
    }
    last[b] = starts[n - 1] + rank[b];
  }
  return {sizes, {forward_inputs, backward_inputs, forward_outputs, backward_outputs, finals}};
}

// Forward.  input_gates (D, total, 3H), weight (D, 3H, H) = W_hh, bias (D, 3H) = b_hh; noise
// (D, total, H) or None: added to each state after its step, h' = (h - n) z + n + noise, the
// state the next step reads (the backward reads the states as stored, so it needs nothing more:
// the noise is a constant of the loop).  Returns the states (D, total, H) and what the backward
// pass needs: the gates r, z, n and h_n (D, total, 4H).
std::vector<Tensor> packed_gru_forward(const Tensor& input_gates, const Tensor& weight, const Tensor& bias,
                                       const std::vector<int64_t>& sizes, const std::optional<Tensor>& noise) {
  check_input(input_gates, "input_gates", 3);
  check_input(weight, "weight", 3);
  check_input(bias, "bias", 2);
  if (noise.has_value()) {
    check_input(*noise, "noise", 3);
    TORCH_CHECK(noise->size(0) == input_gates.size(0) && noise->size(1) == input_gates.size(1) &&
                    noise->size(2) == weight.size(2) && noise->scalar_type() == input_gates.scalar_type(),
                "packed_gru: noise must be (directions, total, hidden) of the gates' type");
  }
  const int64_t directions = input_gates.size(0), total = input_gates.size(1), hidden = weight.size(2);
  TORCH_CHECK(input_gates.size(2) == 3 * hidden && weight.size(1) == 3 * hidden && bias.size(1) == 3 * hidden,
              "packed_gru: the gates must have 3 * hidden = ", 3 * hidden, " features");
  TORCH_CHECK(weight.size(0) == directions && bias.size(0) == directions, "packed_gru: one weight and bias a direction");
  const auto starts = step_starts(sizes, total);
  const int64_t batch = sizes.empty() ? 0 : sizes[0], H = hidden;

  Tensor states = at::empty({directions, total, H}, input_gates.options());
  Tensor saved = at::empty({directions, total, 4 * H}, input_gates.options());
  Tensor zeros = at::zeros({batch, H}, input_gates.options());
  Tensor hidden_gates = at::empty({directions, batch, 3 * H}, input_gates.options());
  Tensor reset_update = at::empty({directions, batch, 2 * H}, input_gates.options());
  Tensor candidate = at::empty({directions, batch, H}, input_gates.options());
  std::vector<Tensor> state_of, gates_of, weight_of;
  for (int64_t d = 0; d < directions; ++d) {
    state_of.push_back(states[d]);
    gates_of.push_back(hidden_gates[d]);
    weight_of.push_back(weight[d].t());
  }

  AT_DISPATCH_FLOATING_TYPES(input_gates.scalar_type(), "packed_gru_forward", [&] {
    const scalar_t* input_gates_ = input_gates.data_ptr<scalar_t>();
    const scalar_t* bias_ = bias.data_ptr<scalar_t>();
    const scalar_t* zeros_ = zeros.data_ptr<scalar_t>();
    scalar_t* hidden_gates_ = hidden_gates.data_ptr<scalar_t>();
    scalar_t* reset_update_ = reset_update.data_ptr<scalar_t>();
    scalar_t* candidate_ = candidate.data_ptr<scalar_t>();
    scalar_t* states_ = states.data_ptr<scalar_t>();
    scalar_t* saved_ = saved.data_ptr<scalar_t>();
    const scalar_t* noise_ = noise.has_value() ? noise->data_ptr<scalar_t>() : nullptr;
    for (size_t t = 0; t < sizes.size(); ++t) {
      const int64_t rows = sizes[t], start = starts[t];
      for (int64_t d = 0; d < directions; ++d) {  // W_hh h (the bias is added below)
        Tensor previous = t == 0 ? zeros.narrow(0, 0, rows) : state_of[d].narrow(0, starts[t - 1], rows);
        Tensor out = gates_of[d].narrow(0, 0, rows);
        at::mm_out(out, previous, weight_of[d]);
      }
      for (int64_t d = 0; d < directions; ++d) {  // r, z before the sigmoid; h_n = W_hn h + b_hn
        const scalar_t* __restrict__ b = bias_ + d * 3 * H;
        for (int64_t i = 0; i < rows; ++i) {
          const scalar_t* __restrict__ ig = input_gates_ + (d * total + start + i) * 3 * H;
          scalar_t* __restrict__ hg = hidden_gates_ + (d * batch + i) * 3 * H;
          scalar_t* __restrict__ out = reset_update_ + (d * batch + i) * 2 * H;
          for (int64_t j = 0; j < 2 * H; ++j) out[j] = ig[j] + (hg[j] + b[j]);
          for (int64_t j = 2 * H; j < 3 * H; ++j) hg[j] += b[j];
        }
      }
      reset_update.narrow(1, 0, rows).sigmoid_();  // r, z
      for (int64_t d = 0; d < directions; ++d) {  // n before the tanh
        for (int64_t i = 0; i < rows; ++i) {
          const scalar_t* __restrict__ ig = input_gates_ + (d * total + start + i) * 3 * H + 2 * H;
          const scalar_t* __restrict__ h_n = hidden_gates_ + (d * batch + i) * 3 * H + 2 * H;
          const scalar_t* __restrict__ r = reset_update_ + (d * batch + i) * 2 * H;
          gru_row_candidate(ig, r, h_n, H, candidate_ + (d * batch + i) * H);
        }
      }
      candidate.narrow(1, 0, rows).tanh_();  // n
      for (int64_t d = 0; d < directions; ++d) {  // h' = (h - n) z + n, and what the backward needs
        for (int64_t i = 0; i < rows; ++i) {
          const scalar_t* __restrict__ h_n = hidden_gates_ + (d * batch + i) * 3 * H + 2 * H;
          const scalar_t* __restrict__ r = reset_update_ + (d * batch + i) * 2 * H;
          const scalar_t* __restrict__ z = r + H;
          const scalar_t* __restrict__ n = candidate_ + (d * batch + i) * H;
          const scalar_t* __restrict__ h =
              t == 0 ? zeros_ : states_ + (d * total + starts[t - 1] + i) * H;
          scalar_t* __restrict__ h_new = states_ + (d * total + start + i) * H;
          scalar_t* __restrict__ keep = saved_ + (d * total + start + i) * 4 * H;
          gru_row_update(h, n, z, H, h_new);
          if (noise_ != nullptr) {
            const scalar_t* __restrict__ e = noise_ + (d * total + start + i) * H;
            for (int64_t j = 0; j < H; ++j) h_new[j] += e[j];
          }
          std::copy_n(r, 2 * H, keep);  // r, z
          std::copy_n(n, H, keep + 2 * H);
          std::copy_n(h_n, H, keep + 3 * H);
        }
      }
    }
  });
  return {states, saved};
}

// Backward.  grad_states (D, total, H): dL/d(states) from outside the loop.  Returns the
// gradients of input_gates (D, total, 3H), weight (D, 3H, H) and bias (D, 3H).
std::vector<Tensor> packed_gru_backward(const Tensor& grad_states_in, const Tensor& states, const Tensor& saved,
                                        const Tensor& weight, const std::vector<int64_t>& sizes) {
  const Tensor grad_states = grad_states_in.contiguous();
  check_input(states, "states", 3);
  check_input(saved, "saved", 3);
  check_input(weight, "weight", 3);
  const int64_t directions = states.size(0), total = states.size(1), H = states.size(2);
  const auto starts = step_starts(sizes, total);
  const int64_t batch = sizes.empty() ? 0 : sizes[0];

  Tensor grad_input_gates = at::empty({directions, total, 3 * H}, states.options());
  Tensor grad_hidden_gates = at::empty({directions, total, 3 * H}, states.options());
  Tensor previous = at::empty({directions, total, H}, states.options());  // h_{t-1} of each packed row
  // dL/dh_{t-1} = g z + (dL/dh_hat) W_hh, its two terms kept apart until the step before reads them
  Tensor through_weight = at::empty({directions, batch, H}, states.options());
  Tensor through_update = at::empty({directions, batch, H}, states.options());
  std::vector<Tensor> carry_of, gates_of, weight_of;
  for (int64_t d = 0; d < directions; ++d) {
    carry_of.push_back(through_weight[d]);
    gates_of.push_back(grad_hidden_gates[d]);
    weight_of.push_back(weight[d]);
  }

  AT_DISPATCH_FLOATING_TYPES(states.scalar_type(), "packed_gru_backward", [&] {
    const scalar_t* grad_states_ = grad_states.data_ptr<scalar_t>();
    const scalar_t* states_ = states.data_ptr<scalar_t>();
    const scalar_t* saved_ = saved.data_ptr<scalar_t>();
    const scalar_t* through_weight_ = through_weight.data_ptr<scalar_t>();
    scalar_t* through_update_ = through_update.data_ptr<scalar_t>();
    scalar_t* previous_ = previous.data_ptr<scalar_t>();
    scalar_t* grad_input_gates_ = grad_input_gates.data_ptr<scalar_t>();
    scalar_t* grad_hidden_gates_ = grad_hidden_gates.data_ptr<scalar_t>();
    std::vector<scalar_t> g_sum_row(H);
    scalar_t* __restrict__ g_sum = g_sum_row.data();
    for (int64_t t = static_cast<int64_t>(sizes.size()) - 1; t >= 0; --t) {
      const int64_t rows = sizes[t], start = starts[t];
      const int64_t carried = t + 1 < static_cast<int64_t>(sizes.size()) ? sizes[t + 1] : 0;
      for (int64_t d = 0; d < directions; ++d) {
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t row = d * total + start + i;
          const scalar_t* __restrict__ g_out = grad_states_ + row * H;
          const scalar_t* __restrict__ g_weight = through_weight_ + (d * batch + i) * H;
          scalar_t* __restrict__ g_update = through_update_ + (d * batch + i) * H;
          const scalar_t* __restrict__ r = saved_ + row * 4 * H;
          const scalar_t* __restrict__ z = r + H;
          const scalar_t* __restrict__ n = r + 2 * H;
          const scalar_t* __restrict__ h_n = r + 3 * H;
          scalar_t* __restrict__ h = previous_ + row * H;
          scalar_t* __restrict__ gi = grad_input_gates_ + row * 3 * H;
          scalar_t* __restrict__ gh = grad_hidden_gates_ + row * 3 * H;
          if (t == 0) {
            for (int64_t j = 0; j < H; ++j) h[j] = 0;
          } else {
            const scalar_t* __restrict__ h_before = states_ + (d * total + starts[t - 1] + i) * H;
            for (int64_t j = 0; j < H; ++j) h[j] = h_before[j];
          }
          const scalar_t* g = g_out;
          if (i < carried) {  // the row goes on to step t + 1: dL/dh' also from there
            for (int64_t j = 0; j < H; ++j) g_sum[j] = g_out[j] + (g_weight[j] + g_update[j]);
            g = g_sum;
          }
          gru_row_backward(g, r, z, n, h, h_n, H, g_update, gi, gi + H, gi + 2 * H, gh, gh + H, gh + 2 * H);
        }
        Tensor out = carry_of[d].narrow(0, 0, rows);
        at::mm_out(out, gates_of[d].narrow(0, start, rows), weight_of[d]);
      }
    }
  });
  // dL/dW_hh = sum over rows of (dL/dh_hat)^T h_{t-1}, dL/db_hh = sum over rows of dL/dh_hat
  Tensor grad_weight = at::bmm(grad_hidden_gates.transpose(1, 2), previous);
  Tensor grad_bias = grad_hidden_gates.sum(1);
  return {grad_input_gates, grad_weight, grad_bias};
}

}  // namespace fairseq_monoattn
