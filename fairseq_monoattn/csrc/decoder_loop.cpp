// The GRU decoder's whole time loop in training, as one autograd node (models/gru_seq2seq.py, one
// layer, a built-in cross-attention: content scores, the location focus, or their mix).  Step t:
//
//   r_t = W_r h_{t-1} + b_r = [q_t | location heads_t | mix logit_t | hidden gates_t]
//   c_t = K q_t                                     (the content scores; the keys come scaled)
//   a_t = softmax(c_t),  or lambda_t,  or lambda_t + m_t (softmax(c_t) - lambda_t)
//   o_t = sum_i a_ti V_i,   input gates_t = E_t + W_c o_t,   h_t = GRU(input gates_t, hidden gates_t, h_{t-1})
//   pa_t = sum_i a_ti norm(i) (or of lambda_t: the location reference), the next step's reference
//
// Forward makes the operations of the per-step nodes (step_nodes.cpp) and of the Python decoder in
// their order, so h_t and a_t are theirs to float rounding.  Backward goes through the steps in reverse
// with the same step parts (step_parts.h) and takes the gradients of what every step read (W_r, b_r,
// W_c, V, K) once, after the first step, as one product each over the stacked steps.  Per step the
// per-step nodes cost some ten operator calls and six autograd nodes more; here a step is a few
// kernel calls each way.

#include "kernels.h"
#include "step_parts.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>

#include <algorithm>
#include <limits>
#include <string>

namespace fairseq_monoattn {

using at::Tensor;
using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;

namespace {

// the readout's columns: [query | location heads | mix logit | hidden gates]
struct ReadoutColumns {
  int64_t query, heads, mix, gates;
  int64_t heads_at() const { return query; }
  int64_t mix_at() const { return query + heads; }
  int64_t gates_at() const { return query + heads + mix; }
};

struct LoopSettings {
  bool has_location = false;
  LocationSettings location{};
  bool mixes = false;
  double mix_temperature = 1.0;
  bool location_reference = false;  // pa_t from the location focus (PR), not from the weights a_t
};

struct StepRecord {
  GRUPass gru;
  LocationPass location;
  MixPass mix;
};

enum Input : size_t { kInputGates, kHidden0, kReadWeight, kReadBias, kContextWeight, kValues, kKeys, kMonoGate, kInputs };

struct DecoderLoopBackward : public Node {
  SavedVariable read_weight, context_weight, values, keys, mono_gate;
  FocusMemory memory;
  LoopSettings settings;
  ReadoutColumns columns{};
  Tensor hidden_states;  // (T + 1, B, H): h_0 ... h_T
  Tensor reads;          // (T, B, R): r_1 ... r_T
  Tensor contexts;       // (T, B, D): o_1 ... o_T
  Tensor weights;        // (T, B, S): a_1 ... a_T
  std::vector<StepRecord> steps;

  variable_list apply(variable_list&& grads) override;
  std::string name() const override { return "DecoderLoopBackward"; }
  void release_variables() override {
    for (SavedVariable* saved : {&read_weight, &context_weight, &values, &keys, &mono_gate}) saved->reset_data();
    memory = FocusMemory{};
    hidden_states = reads = contexts = weights = Tensor();
    steps.clear();
  }
};

variable_list DecoderLoopBackward::apply(variable_list&& grads) {
  TORCH_CHECK(!at::GradMode::is_enabled(), "decoder_loop: its backward is not differentiable (double backward); "
              "set FAIRSEQ_MONOATTN_COMPILED=0 to run the Python version");
  TORCH_CHECK(reads.defined(), "decoder_loop: a second backward pass through the loop needs retain_graph=True");
  if (!grads[0].defined()) return variable_list(kInputs);
  const Tensor read_weight_ = read_weight.unpack(), context_weight_ = context_weight.unpack();
  const Tensor values_ = values.unpack(), keys_ = keys.unpack();
  const int64_t T = reads.size(0), B = reads.size(1), R = reads.size(2), H = hidden_states.size(2);
  const int64_t S = weights.size(2), D = contexts.size(2), G = columns.gates;
  const auto options = reads.options();
  const Tensor grad_hidden_states = grads[0].transpose(0, 1).contiguous();  // (T, B, H)
  Tensor grad_reads = at::empty({T, B, R}, options);
  Tensor grad_gates = at::empty({T, B, G}, options);
  Tensor grad_contexts = at::empty({T, B, D}, options);
  Tensor grad_scores = keys_.defined() ? at::empty({T, B, S}, options) : Tensor();
  Tensor grad_hidden = at::zeros({B, H}, options), grad_through_gru = at::empty({B, H}, options);
  Tensor grad_position, grad_previous, grad_location;  // dL/dpa_t, dL/dpa_{t-1}, dL/dlambda_t
  if (settings.has_location) {
    grad_position = at::zeros({B}, options);
    grad_previous = at::empty({B}, options);
    if (settings.mixes) grad_location = at::empty({B, S}, options);
  }
  Tensor grad_weights = at::empty({B, S}, options), grad_weights_row = grad_weights.unsqueeze(1);  // dL/da_t
  const Tensor values_by_feature = values_.transpose(1, 2);
  double grad_gate = 0;
  for (int64_t t = T - 1; t >= 0; --t) {
    const StepRecord& step = steps[t];
    grad_hidden.add_(grad_hidden_states[t]);  // dL/dh_t: its output's and the later steps'
    Tensor grad_read = grad_reads[t], grad_gate_rows = grad_gates[t], grad_context = grad_contexts[t];
    Tensor grad_hidden_gates = grad_read.narrow(1, columns.gates_at(), G);
    gru_backward(grad_hidden, step.gru, grad_gate_rows, grad_hidden_gates, grad_through_gru);
    at::mm_out(grad_context, grad_gate_rows, context_weight_);                                  // dL/do_t
    at::bmm_out(grad_weights_row, grad_context.unsqueeze(1), values_by_feature);  // dL/da_t = V dL/do_t
    Tensor grad_heads = grad_read.narrow(1, columns.heads_at(), columns.heads);
    if (!settings.has_location) {
      Tensor grad_scores_t = grad_scores[t];
      softmax_backward(weights[t], grad_weights, grad_scores_t);
    } else if (settings.mixes) {
      Tensor grad_scores_t = grad_scores[t], grad_mix = grad_read.narrow(1, columns.mix_at(), 1);
      mixed_backward(step.mix, memory.positions, settings.mix_temperature, grad_weights,
                     settings.location_reference ? Tensor() : grad_position, grad_scores_t, grad_location, grad_mix);
      grad_gate += location_backward(step.location, memory, settings.location, grad_location, Tensor(), Tensor(),
                                     settings.location_reference ? grad_position : Tensor(), grad_heads, grad_previous);
    } else {
      grad_gate += location_backward(step.location, memory, settings.location, grad_weights, Tensor(), Tensor(),
                                     grad_position, grad_heads, grad_previous);
    }
    if (keys_.defined()) {  // dL/dq_t = K^T dL/dc_t
      grad_read.narrow(1, 0, columns.query).copy_(at::bmm(grad_scores[t].unsqueeze(1), keys_).squeeze(1));
    }
    if (settings.has_location) std::swap(grad_position, grad_previous);
    at::addmm_out(grad_hidden, grad_through_gru, grad_read, read_weight_);  // + W_r^T dL/dr_t
  }
  variable_list out(kInputs);
  const Tensor read_rows = grad_reads.view({T * B, R}), gate_rows = grad_gates.view({T * B, G});
  if (task_should_compute_output(kInputGates)) out[kInputGates] = grad_gates.transpose(0, 1);
  if (task_should_compute_output(kHidden0)) out[kHidden0] = grad_hidden;
  if (task_should_compute_output(kReadWeight))
    out[kReadWeight] = read_rows.t().mm(hidden_states.narrow(0, 0, T).reshape({T * B, H}));
  if (task_should_compute_output(kReadBias)) out[kReadBias] = read_rows.sum(0);
  if (task_should_compute_output(kContextWeight)) out[kContextWeight] = gate_rows.t().mm(contexts.view({T * B, D}));
  if (task_should_compute_output(kValues))  // dL/dV = sum_t a_t^T dL/do_t
    out[kValues] = at::bmm(weights.permute({1, 2, 0}), grad_contexts.transpose(0, 1));
  if (keys_.defined() && task_should_compute_output(kKeys))  // dL/dK = sum_t (dL/dc_t)^T q_t
    out[kKeys] = at::bmm(grad_scores.permute({1, 2, 0}), reads.narrow(2, 0, columns.query).transpose(0, 1));
  if (settings.location.step_kind == StepKind::mono && settings.has_location && task_should_compute_output(kMonoGate))
    out[kMonoGate] = at::full({}, grad_gate, options);
  return out;
}

// m (rows, cols), any strides, transposed into a new contiguous (cols, rows) matrix tile by tile, so
// that the rows read and the rows written stay in the cache (faster than torch's copy of the
// transposed view, the context's columns of the GRU's input weights, a slice, too).
Tensor transposed(const Tensor& m) {
  const int64_t rows = m.size(0), cols = m.size(1), row_stride = m.stride(0), col_stride = m.stride(1);
  Tensor out = at::empty({cols, rows}, m.options());
  AT_DISPATCH_FLOATING_TYPES(m.scalar_type(), "transposed", [&] {
    const scalar_t* in = m.const_data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    constexpr int64_t tile = 16;
    for (int64_t i0 = 0; i0 < rows; i0 += tile)
      for (int64_t j0 = 0; j0 < cols; j0 += tile) {
        const int64_t i1 = std::min(rows, i0 + tile), j1 = std::min(cols, j0 + tile);
        for (int64_t j = j0; j < j1; ++j)
          for (int64_t i = i0; i < i1; ++i) o[j * rows + i] = in[i * row_stride + j * col_stride];
      }
  });
  return out;
}

}  // namespace

std::vector<Tensor> decoder_loop(const Tensor& input_gates, const Tensor& hidden0, const Tensor& read_weight,
                                 const Tensor& read_bias, const Tensor& context_weight, const Tensor& values,
                                 const std::optional<Tensor>& keys_in, const std::optional<Tensor>& mono_gate_in,
                                 const std::optional<Tensor>& positions, const std::optional<Tensor>& step_size,
                                 const std::optional<Tensor>& lengths, const Tensor& padding_mask,
                                 const std::vector<int64_t>& readout_sizes,
                                 const std::optional<std::string>& step_activation, double step_temperature,
                                 const std::optional<std::string>& reference, double sigma_min,
                                 std::optional<double> clamp_slope, double mix_temperature, bool location_reference) {
  const Tensor keys = keys_in.value_or(Tensor()), mono_gate = mono_gate_in.value_or(Tensor());
  for (const auto& [t, name] :
       {std::pair<const Tensor&, const char*>{input_gates, "input_gates"}, {read_weight, "read_weight"},
        {read_bias, "read_bias"}, {context_weight, "context_weight"}, {values, "values"}})
    check_cpu_input(t, std::string("decoder_loop: ") + name, hidden0);
  TORCH_CHECK(hidden0.dim() == 2 && input_gates.dim() == 3 && values.dim() == 3 && read_weight.dim() == 2,
              "decoder_loop: hidden0 (B, H), input_gates (B, T, 3H), values (B, S, D), read_weight (R, H)");
  const int64_t B = hidden0.size(0), H = hidden0.size(1), T = input_gates.size(1), G = 3 * H;
  const int64_t S = values.size(1), D = values.size(2), R = read_weight.size(0);
  TORCH_CHECK(readout_sizes.size() == 3, "decoder_loop: readout_sizes [query, location heads, mix logit]");
  const ReadoutColumns columns{readout_sizes[0], readout_sizes[1], readout_sizes[2], G};
  TORCH_CHECK(input_gates.size(0) == B && input_gates.size(2) == G && values.size(0) == B && read_weight.size(1) == H &&
                  read_bias.dim() == 1 && read_bias.size(0) == R && R == columns.gates_at() + G &&
                  context_weight.sizes() == at::IntArrayRef({G, D}),
              "decoder_loop: inconsistent sizes (B ", B, ", H ", H, ", T ", T, ", S ", S, ", D ", D, ", R ", R, ")");
  TORCH_CHECK(padding_mask.scalar_type() == at::kBool && padding_mask.sizes() == at::IntArrayRef({B, S}),
              "decoder_loop: padding_mask must be a bool (B, S)");
  LoopSettings settings;
  settings.has_location = positions.has_value();
  settings.mixes = settings.has_location && keys.defined();
  settings.mix_temperature = mix_temperature;
  settings.location_reference = location_reference;
  TORCH_CHECK(keys.defined() == (columns.query > 0) && settings.mixes == (columns.mix == 1) &&
                  (keys.defined() || settings.has_location),
              "decoder_loop: the readout's sizes do not fit the keys and the location memory given");
  if (keys.defined()) {
    check_cpu_input(keys, "decoder_loop: keys", hidden0);
    TORCH_CHECK(keys.dim() == 3 && keys.size(0) == B && keys.size(1) == S && keys.size(2) == columns.query,
                "decoder_loop: keys must be (B, S, query size)");
  }
  FocusMemory memory;
  if (settings.has_location) {
    TORCH_CHECK(step_size && lengths && step_activation && reference,
                "decoder_loop: the location focus needs step_size, lengths, its step activation and reference");
    settings.location = LocationSettings{step_kind_of(*step_activation), step_temperature,
                                         reference_kind_of(*reference), sigma_min, clamp_slope.value_or(-1.0)};
    TORCH_CHECK(!clamp_slope || *clamp_slope >= 0, "decoder_loop: clamp_slope must be >= 0 (or None: no clamp)");
    TORCH_CHECK(columns.heads == 2 + reference_heads(settings.location.reference),
                "decoder_loop: ", columns.heads, " location heads for the reference '", *reference, "'");
    for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{*positions, "positions"},
                                  {*step_size, "step_size"}, {*lengths, "lengths"}})
      check_cpu_input(t, std::string("decoder_loop: ") + name, hidden0);
    TORCH_CHECK(positions->sizes() == at::IntArrayRef({B, S}) && step_size->sizes() == at::IntArrayRef({B}) &&
                    lengths->sizes() == at::IntArrayRef({B}),
                "decoder_loop: positions (B, S), step_size and lengths (B,)");
    if (settings.location.step_kind == StepKind::mono) {
      TORCH_CHECK(mono_gate.defined() && mono_gate.dim() == 0, "decoder_loop: mono needs its gate logit (a scalar)");
      check_cpu_input(mono_gate, "decoder_loop: mono_gate", hidden0);
    }
    memory = FocusMemory{positions->contiguous(), padding_mask.contiguous(), step_size->contiguous(),
                         lengths->contiguous()};
  }
  const auto options = hidden0.options();
  Tensor hidden_states = at::empty({T + 1, B, H}, options), reads = at::empty({T, B, R}, options);
  Tensor contexts = at::empty({T, B, D}, options), weights = at::empty({T, B, S}, options);
  std::vector<StepRecord> steps(T);
  Tensor previous = settings.has_location ? at::zeros({B}, options) : Tensor();  // pa_0 = 0
  {
    at::NoGradGuard no_grad;
    const Tensor keys_by_feature = keys.defined() ? keys.transpose(1, 2) : Tensor();
    hidden_states[0].copy_(hidden0);
    // the weights transposed once, contiguous: MKL multiplies rows by a contiguous matrix faster than
    // by the same matrix read transposed
    const Tensor context_weight_t = transposed(context_weight), read_weight_t = transposed(read_weight);
    for (int64_t t = 0; t < T; ++t) {
      StepRecord& step = steps[t];
      const Tensor hidden = hidden_states[t];
      Tensor read = reads[t];
      at::mm_out(read, hidden, read_weight_t);
      read.add_(read_bias);
      Tensor scores, step_weights;
      if (keys.defined())  // c_t = K q_t
        scores = at::bmm(read.narrow(1, 0, columns.query).unsqueeze(1), keys_by_feature).squeeze(1);
      if (settings.has_location)
        step.location = location_forward(read.narrow(1, columns.heads_at(), columns.heads), previous, mono_gate,
                                         memory, settings.location, t + 1);
      if (!settings.has_location) {
        step_weights = scores.masked_fill(padding_mask, -std::numeric_limits<double>::infinity()).softmax(-1);
      } else if (settings.mixes) {
        step.mix = mixed_forward(scores, memory.padding_mask, step.location.weights,
                                 read.narrow(1, columns.mix_at(), 1), mix_temperature, memory.positions);
        step_weights = step.mix.weights;
      } else {
        step_weights = step.location.weights;
      }
      weights[t].copy_(step_weights);
      Tensor context = contexts[t], context_row = context.unsqueeze(1);
      at::bmm_out(context_row, step_weights.unsqueeze(1), values);  // o_t = sum_i a_ti V_i
      const Tensor gates = at::add(context.mm(context_weight_t), input_gates.select(1, t));
      hidden_states[t + 1].copy_(gru_forward(gates, read.narrow(1, columns.gates_at(), G), hidden, step.gru));
      if (settings.has_location)
        previous = (settings.location_reference || !settings.mixes) ? step.location.position : step.mix.position;
    }
  }
  Tensor outputs = hidden_states.narrow(0, 1, T).transpose(0, 1).contiguous();  // (B, T, H)
  if (torch::autograd::compute_requires_grad(input_gates, hidden0, read_weight, read_bias, context_weight, values,
                                             keys, mono_gate)) {
    auto node = c10::make_intrusive<DecoderLoopBackward>();
    node->set_next_edges(torch::autograd::collect_next_edges(input_gates, hidden0, read_weight, read_bias,
                                                             context_weight, values, keys, mono_gate));
    torch::autograd::set_history(outputs, node);
    node->read_weight = SavedVariable(read_weight, false);
    node->context_weight = SavedVariable(context_weight, false);
    node->values = SavedVariable(values, false);
    node->keys = SavedVariable(keys, false);
    node->mono_gate = SavedVariable(mono_gate, false);
    node->memory = memory;
    node->settings = settings;
    node->columns = columns;
    node->hidden_states = hidden_states;
    node->reads = reads;
    node->contexts = contexts;
    node->weights = weights;
    node->steps = std::move(steps);
  }
  return {outputs, weights.transpose(0, 1).contiguous(), previous};
}

}  // namespace fairseq_monoattn
