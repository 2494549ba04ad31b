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
// kernel calls each way.  The node is a torch::autograd::Function: what the backward pass reads of
// the steps is kept in tensors of all the steps at once (ctx->save_for_backward), its settings in
// ctx->saved_data.

#include "kernels.h"
#include "step_parts.h"

#include <algorithm>
#include <limits>
#include <string>

namespace fairseq_monoattn {

using at::Tensor;
using torch::autograd::AutogradContext;
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

// What the loop reads besides the tensors it differentiates: the attention's memory, the readout's
// columns and the settings (one argument of the Function, not a differentiable input).
struct LoopInputs {
  FocusMemory memory;  // positions, step_size, lengths undefined without a location focus
  ReadoutColumns columns{};
  LoopSettings settings;
};

// What every step leaves for the backward pass, as tensors of all the steps (T, B, ...); step t's
// parts (step_parts.h) are their rows t.  The location focus's and the mix's are undefined where
// the attention has none.
struct LoopRecord {
  Tensor hidden_states;                 // (T + 1, B, H): h_0 ... h_T
  Tensor reads;                         // (T, B, R): r_1 ... r_T
  Tensor contexts;                      // (T, B, D): o_1 ... o_T
  Tensor weights;                       // (T, B, S): a_1 ... a_T
  Tensor reset_update, candidate;       // the GRU's [r | z] (T, B, 2H) and n (T, B, H)
  Tensor location_weights, z;           // lambda_t and its z (T, B, S); lambda_t is a_t without a mix
  Tensor sigma, unclamped, location_position;  // (T, B)
  Tensor content, mix, mix_position;    // softmax(c_t) (T, B, S), m_t (T, B, 1), pa_t of the mix (T, B)

  std::vector<Tensor> list() const {
    return {hidden_states, reads,     contexts,          weights, reset_update, candidate, location_weights, z,
            sigma,         unclamped, location_position, content, mix,          mix_position};
  }
  static LoopRecord of(const std::vector<Tensor>& t) {
    return {t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11], t[12], t[13]};
  }

  // pa_{t-1}, the reference of step t (pa_0 = 0)
  Tensor previous(int64_t t, const LoopSettings& settings) const {
    if (t == 0) return at::zeros({reads.size(1)}, reads.options());
    return (settings.location_reference || !settings.mixes ? location_position : mix_position)[t - 1];
  }
  GRUPass gru(int64_t t, const ReadoutColumns& columns) const {
    return GRUPass{reset_update[t], candidate[t], hidden_states[t], reads[t].narrow(1, columns.gates_at(), columns.gates)};
  }
  LocationPass location(int64_t t, const ReadoutColumns& columns, const LoopSettings& settings,
                        const Tensor& mono_gate) const {
    LocationPass pass;
    pass.heads = reads[t].narrow(1, columns.heads_at(), columns.heads);
    pass.previous = previous(t, settings);
    pass.mono_gate = mono_gate;
    pass.weights = location_weights[t];
    pass.z = z[t];
    pass.sigma = sigma[t];
    pass.unclamped = unclamped[t];
    pass.position = location_position[t];
    pass.first_step = t == 0;
    return pass;
  }
  MixPass mixed(int64_t t) const {
    MixPass pass;
    pass.content = content[t];
    pass.location = location_weights[t];
    pass.mix = mix[t];
    pass.weights = weights[t];
    pass.position = mix_position[t];
    return pass;
  }
};

// m (rows, cols), any strides, transposed into a new contiguous (cols, rows) matrix tile by tile, so
// that the rows read and the rows written stay in the cache (faster than torch's copy of the
// transposed view, the context's columns of the GRU's input weights, a slice, too).
Tensor transposed(const Tensor& m) {
  const int64_t rows = m.size(0), cols = m.size(1), row_stride = m.stride(0), col_stride = m.stride(1);
  Tensor out = at::empty({cols, rows}, m.options());
  AT_DISPATCH_FLOATING_TYPES(m.scalar_type(), "transposed", [&] {
    const scalar_t* in = m.data_ptr<scalar_t>();
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

// The loop's arguments, in order: its differentiable inputs, then the LoopInputs
enum Input : size_t { kInputGates, kHidden0, kReadWeight, kReadBias, kContextWeight, kValues, kKeys, kMonoGate, kArguments };
// the saved tensors: the inputs the backward pass reads, the memory, then the LoopRecord's
enum Saved : size_t { kSavedReadWeight, kSavedContextWeight, kSavedValues, kSavedKeys, kSavedMonoGate, kSavedPositions,
                      kSavedStepSize, kSavedLengths, kSavedRecord };

struct DecoderLoopBackward : public torch::autograd::Function<DecoderLoopBackward> {
  static variable_list forward(AutogradContext* ctx, const Tensor& input_gates, const Tensor& hidden0,
                               const Tensor& read_weight, const Tensor& read_bias, const Tensor& context_weight,
                               const Tensor& values, const std::optional<Tensor>& keys_in,
                               const std::optional<Tensor>& mono_gate_in, const LoopInputs& loop);
  static variable_list backward(AutogradContext* ctx, variable_list grads);
};

variable_list DecoderLoopBackward::forward(AutogradContext* ctx, const Tensor& input_gates, const Tensor& hidden0,
                                           const Tensor& read_weight, const Tensor& read_bias,
                                           const Tensor& context_weight, const Tensor& values,
                                           const std::optional<Tensor>& keys_in,
                                           const std::optional<Tensor>& mono_gate_in, const LoopInputs& loop) {
  const Tensor keys = keys_in.value_or(Tensor()), mono_gate = mono_gate_in.value_or(Tensor());
  const FocusMemory& memory = loop.memory;
  const ReadoutColumns& columns = loop.columns;
  const LoopSettings& settings = loop.settings;
  const Tensor& padding_mask = memory.padding_mask;
  const int64_t B = hidden0.size(0), H = hidden0.size(1), T = input_gates.size(1);
  const int64_t S = values.size(1), D = values.size(2), R = read_weight.size(0);
  const auto options = hidden0.options();
  LoopRecord record;
  record.hidden_states = at::empty({T + 1, B, H}, options);
  record.reads = at::empty({T, B, R}, options);
  record.contexts = at::empty({T, B, D}, options);
  record.weights = at::empty({T, B, S}, options);
  record.reset_update = at::empty({T, B, 2 * H}, options);
  record.candidate = at::empty({T, B, H}, options);
  Tensor mu, steps;  // the location focus's mu_t and step_t: not needed after the step
  if (settings.has_location) {
    record.location_weights = settings.mixes ? at::empty({T, B, S}, options) : record.weights;
    record.z = at::empty({T, B, S}, options);
    record.sigma = at::empty({T, B}, options);
    record.unclamped = at::empty({T, B}, options);
    record.location_position = at::empty({T, B}, options);
    mu = at::empty({B}, options);
    steps = at::empty({B}, options);
    if (settings.mixes) {
      record.content = at::empty({T, B, S}, options);
      record.mix = at::empty({T, B, 1}, options);
      record.mix_position = at::empty({T, B}, options);
    }
  }
  const Tensor keys_by_feature = keys.defined() ? keys.transpose(1, 2) : Tensor();
  record.hidden_states[0].copy_(hidden0);
  // the weights transposed once, contiguous: MKL multiplies 32 x 128 rows by a contiguous 128 x 517
  // matrix in three quarters of the time it takes for the same matrix read transposed
  const Tensor context_weight_t = transposed(context_weight), read_weight_t = transposed(read_weight);
  for (int64_t t = 0; t < T; ++t) {
    const Tensor hidden = record.hidden_states[t];
    Tensor read = record.reads[t], step_weights = record.weights[t];
    at::mm_out(read, hidden, read_weight_t);
    read.add_(read_bias);
    Tensor scores;
    if (keys.defined())  // c_t = K q_t
      scores = at::bmm(read.narrow(1, 0, columns.query).unsqueeze(1), keys_by_feature).squeeze(1);
    if (settings.has_location) {
      LocationPass location = record.location(t, columns, settings, mono_gate);
      location.mu = mu;
      location.steps = steps;
      location_forward(location.heads, location.previous, mono_gate, memory, settings.location, t + 1, location);
    }
    if (!settings.has_location) {
      step_weights.copy_(scores.masked_fill(padding_mask, -std::numeric_limits<double>::infinity()).softmax(-1));
    } else if (settings.mixes) {
      MixPass mix = record.mixed(t);
      mixed_forward(scores, memory.padding_mask, mix.location, read.narrow(1, columns.mix_at(), 1),
                    settings.mix_temperature, memory.positions, mix);
    }  // else: the location focus wrote a_t
    Tensor context = record.contexts[t], context_row = context.unsqueeze(1);
    at::bmm_out(context_row, step_weights.unsqueeze(1), values);  // o_t = sum_i a_ti V_i
    const Tensor gates = at::add(context.mm(context_weight_t), input_gates.select(1, t));
    GRUPass gru = record.gru(t, columns);
    gru_forward(gates, gru.hidden_gates, hidden, gru, record.hidden_states[t + 1]);
  }
  Tensor outputs = record.hidden_states.narrow(0, 1, T).transpose(0, 1).contiguous();  // (B, T, H)
  Tensor weights = record.weights.transpose(0, 1).contiguous();
  std::vector<Tensor> saved{read_weight,      context_weight,  values,         keys, mono_gate,
                            memory.positions, memory.step_size, memory.lengths};
  for (const Tensor& t : record.list()) saved.push_back(t);
  ctx->save_for_backward(saved);
  ctx->saved_data["query"] = columns.query;
  ctx->saved_data["heads"] = columns.heads;
  ctx->saved_data["mix"] = columns.mix;
  ctx->saved_data["has_keys"] = keys.defined();
  ctx->saved_data["has_mono_gate"] = mono_gate.defined();
  ctx->saved_data["has_location"] = settings.has_location;
  ctx->saved_data["mixes"] = settings.mixes;
  ctx->saved_data["mix_temperature"] = settings.mix_temperature;
  ctx->saved_data["location_reference"] = settings.location_reference;
  if (settings.has_location) save_location_settings(ctx, settings.location);
  ctx->set_materialize_grads(false);
  if (!settings.has_location) {
    ctx->mark_non_differentiable({weights});
    return {outputs, weights};
  }
  Tensor position = record.previous(T, settings).clone();
  ctx->mark_non_differentiable({weights, position});
  return {outputs, weights, position};
}

variable_list DecoderLoopBackward::backward(AutogradContext* ctx, variable_list grads) {
  check_no_double_backward("decoder_loop");
  variable_list out(kArguments + 1);
  if (!grads[0].defined()) return out;
  const auto saved = ctx->get_saved_variables();
  const Tensor &read_weight = saved[kSavedReadWeight], &context_weight = saved[kSavedContextWeight];
  const Tensor &values = saved[kSavedValues], &keys = saved[kSavedKeys], &mono_gate = saved[kSavedMonoGate];
  const FocusMemory memory{saved[kSavedPositions], Tensor(), saved[kSavedStepSize], saved[kSavedLengths]};
  const LoopRecord record = LoopRecord::of(std::vector<Tensor>(saved.begin() + kSavedRecord, saved.end()));
  LoopSettings settings;
  settings.has_location = ctx->saved_data["has_location"].toBool();
  settings.mixes = ctx->saved_data["mixes"].toBool();
  settings.mix_temperature = ctx->saved_data["mix_temperature"].toDouble();
  settings.location_reference = ctx->saved_data["location_reference"].toBool();
  if (settings.has_location) settings.location = saved_location_settings(ctx);
  const Tensor &reads = record.reads, &hidden_states = record.hidden_states, &weights = record.weights;
  const int64_t T = reads.size(0), B = reads.size(1), R = reads.size(2), H = hidden_states.size(2);
  const int64_t S = weights.size(2), D = record.contexts.size(2), G = 3 * H;
  const ReadoutColumns columns{ctx->saved_data["query"].toInt(), ctx->saved_data["heads"].toInt(),
                               ctx->saved_data["mix"].toInt(), G};
  // the differentiable inputs' edges: the optional keys and Mono's gate only where given
  const bool has_keys = ctx->saved_data["has_keys"].toBool();
  const size_t keys_edge = kKeys, mono_gate_edge = kKeys + (has_keys ? 1 : 0);
  const auto options = reads.options();
  const Tensor grad_hidden_states = grads[0].transpose(0, 1).contiguous();  // (T, B, H)
  Tensor grad_reads = at::empty({T, B, R}, options);
  Tensor grad_gates = at::empty({T, B, G}, options);
  Tensor grad_contexts = at::empty({T, B, D}, options);
  Tensor grad_scores = keys.defined() ? at::empty({T, B, S}, options) : Tensor();
  Tensor grad_hidden = at::zeros({B, H}, options), grad_through_gru = at::empty({B, H}, options);
  Tensor grad_position, grad_previous, grad_location;  // dL/dpa_t, dL/dpa_{t-1}, dL/dlambda_t
  if (settings.has_location) {
    grad_position = at::zeros({B}, options);
    grad_previous = at::empty({B}, options);
    if (settings.mixes) grad_location = at::empty({B, S}, options);
  }
  Tensor grad_weights = at::empty({B, S}, options), grad_weights_row = grad_weights.unsqueeze(1);  // dL/da_t
  const Tensor values_by_feature = values.transpose(1, 2);
  double grad_gate = 0;
  for (int64_t t = T - 1; t >= 0; --t) {
    grad_hidden.add_(grad_hidden_states[t]);  // dL/dh_t: its output's and the later steps'
    Tensor grad_read = grad_reads[t], grad_gate_rows = grad_gates[t], grad_context = grad_contexts[t];
    Tensor grad_hidden_gates = grad_read.narrow(1, columns.gates_at(), G);
    gru_backward(grad_hidden, record.gru(t, columns), grad_gate_rows, grad_hidden_gates, grad_through_gru);
    at::mm_out(grad_context, grad_gate_rows, context_weight);                     // dL/do_t
    at::bmm_out(grad_weights_row, grad_context.unsqueeze(1), values_by_feature);  // dL/da_t = V dL/do_t
    Tensor grad_heads = grad_read.narrow(1, columns.heads_at(), columns.heads);
    if (!settings.has_location) {
      Tensor grad_scores_t = grad_scores[t];
      softmax_backward(weights[t], grad_weights, grad_scores_t);
    } else if (settings.mixes) {
      Tensor grad_scores_t = grad_scores[t], grad_mix = grad_read.narrow(1, columns.mix_at(), 1);
      mixed_backward(record.mixed(t), memory.positions, settings.mix_temperature, grad_weights,
                     settings.location_reference ? Tensor() : grad_position, grad_scores_t, grad_location, grad_mix);
      grad_gate += location_backward(record.location(t, columns, settings, mono_gate), memory, settings.location,
                                     grad_location, Tensor(), Tensor(),
                                     settings.location_reference ? grad_position : Tensor(), grad_heads, grad_previous);
    } else {
      grad_gate += location_backward(record.location(t, columns, settings, mono_gate), memory, settings.location,
                                     grad_weights, Tensor(), Tensor(), grad_position, grad_heads, grad_previous);
    }
    if (keys.defined()) {  // dL/dq_t = K^T dL/dc_t
      grad_read.narrow(1, 0, columns.query).copy_(at::bmm(grad_scores[t].unsqueeze(1), keys).squeeze(1));
    }
    if (settings.has_location) std::swap(grad_position, grad_previous);
    at::addmm_out(grad_hidden, grad_through_gru, grad_read, read_weight);  // + W_r^T dL/dr_t
  }
  const Tensor read_rows = grad_reads.view({T * B, R}), gate_rows = grad_gates.view({T * B, G});
  if (ctx->needs_input_grad(kInputGates)) out[kInputGates] = grad_gates.transpose(0, 1);
  if (ctx->needs_input_grad(kHidden0)) out[kHidden0] = grad_hidden;
  if (ctx->needs_input_grad(kReadWeight))
    out[kReadWeight] = read_rows.t().mm(hidden_states.narrow(0, 0, T).reshape({T * B, H}));
  if (ctx->needs_input_grad(kReadBias)) out[kReadBias] = read_rows.sum(0);
  if (ctx->needs_input_grad(kContextWeight)) out[kContextWeight] = gate_rows.t().mm(record.contexts.view({T * B, D}));
  if (ctx->needs_input_grad(kValues))  // dL/dV = sum_t a_t^T dL/do_t
    out[kValues] = at::bmm(weights.permute({1, 2, 0}), grad_contexts.transpose(0, 1));
  if (has_keys && ctx->needs_input_grad(keys_edge))  // dL/dK = sum_t (dL/dc_t)^T q_t
    out[kKeys] = at::bmm(grad_scores.permute({1, 2, 0}), reads.narrow(2, 0, columns.query).transpose(0, 1));
  if (ctx->saved_data["has_mono_gate"].toBool() && settings.has_location &&
      settings.location.step_kind == StepKind::mono && ctx->needs_input_grad(mono_gate_edge))
    out[kMonoGate] = at::full({}, grad_gate, options);
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
  LoopInputs loop;
  loop.columns = columns;
  LoopSettings& settings = loop.settings;
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
  FocusMemory& memory = loop.memory;
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
  if (!settings.has_location) memory.padding_mask = padding_mask.contiguous();
  std::vector<Tensor> outputs = DecoderLoopBackward::apply(input_gates, hidden0, read_weight, read_bias, context_weight,
                                                           values, keys_in, mono_gate_in, loop);
  if (outputs.size() == 2) outputs.emplace_back();  // no location focus: no attended position
  return outputs;
}

}  // namespace fairseq_monoattn
