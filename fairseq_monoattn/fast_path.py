"""The fast path: everything the plugin has for speed on the CPU, behind one boundary.

The plugin's modules are the reference: they compute each equation once, in Python, on any device
and in any precision.  The fast path computes the same function (to float rounding) with the C++
kernels (``modules/compiled.py``) and the CPU tricks that go with them:

    the encoder       the packing plan and the whole bidirectional GRU loop, forward and back,
                      as C++ calls (``packing_plan``, ``encoder_loop``)
    the decoder       the GRU update as one C++ node; the attention's readout and the GRU's hidden
                      gates as one product; the values' output map folded into the context's input
                      gates where that costs less; the embedding's input gates through a table of
                      the vocabulary's rows; the per-step products with their weight gradients
                      taken once (step_linear.py, C++ nodes); in training, the whole time loop as
                      one C++ node where every attention entry has a C++ form
                      (``decoder_pass``)
    the attention     the location focus (built-in entries) and the mix as one C++ node each
                      (``location_focus``, ``mixed_focus``); a user's entry runs its own Python
                      in between

Which code a model runs is decided in one place, ``choose``, when the model is built
(``GRUSeq2SeqModel.build_model``) and again whenever it is moved or cast (``GRUSeq2SeqModel._apply``:
``.to()``, ``.cuda()``, ``.half()``), and installed on the model's encoder and decoder
(``install``): the fast path where the kernels are built, not switched off
(``FAIRSEQ_MONOATTN_COMPILED=0``) and every parameter is a CPU tensor of float32 or float64 (one
of them); the reference everywhere else.  Under autocast, whose precisions are not the kernels',
the fast path hands each pass to the reference (``serves``).  A training's log says which code its
decoder ran (``compiled.TRAINING_CODE_LINE``), and a run's record keeps that line.
"""

from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from .modules import compiled
from .modules.step_linear import StepLinear, with_feature_major, with_step_operands
from .modules.token_tables import table_applies, token_map, token_table
from .registry import compiled_form

LOOP = "C++ decoder loop"  # the training pass as one node
STEP_NODES = "C++ step nodes"  # step by step, each part with a C++ form as its node
REFERENCE = "Python"  # the reference: the plugin's modules


def choose(model: torch.nn.Module) -> Optional["FastPath"]:
    """The fast path for ``model`` as its parameters are now, or None for the reference: the one place
    that decides which code the model runs."""
    if not compiled.available():
        return None
    kinds = {(p.device.type, p.dtype) for p in model.parameters()}
    if len(kinds) != 1 or not kinds <= compiled.KINDS:
        return None
    return FastPath()


def install(model: torch.nn.Module, fast_path: Optional["FastPath"]) -> None:
    """Set the code every module of ``model`` with a ``fast_path`` attribute runs: ``fast_path``, or
    the reference (None)."""
    for module in model.modules():
        if hasattr(type(module), "fast_path"):
            module.fast_path = fast_path


def describe(fast_path: Optional["FastPath"]) -> str:
    """One line for the log: which code a model runs and why."""
    if fast_path is not None:
        return "the fast path (C++ kernels)"
    return f"the reference (Python): {compiled.describe()}" if not compiled.available() else "the reference (Python)"


class _PackedGRULoop(torch.autograd.Function):
    """The whole time loop of ``bidirectional_gru`` (every step, both directions) as one node,
    forward and backward in C++: the same function as its reference, ``gru._python_loop``."""

    @staticmethod
    def forward(ctx, input_gates, weight, bias, sizes, noise=None):
        states, saved = compiled.kernels.packed_gru_forward(input_gates, weight, bias, sizes, noise)
        ctx.sizes = sizes
        ctx.save_for_backward(states, saved, weight)
        return states

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        states, saved, weight = ctx.saved_tensors
        grad_input_gates, grad_weight, grad_bias = compiled.kernels.packed_gru_backward(
            grad, states, saved, weight, ctx.sizes
        )
        return grad_input_gates, grad_weight, grad_bias, None, None


class FastPath:
    """The C++ kernels and the CPU tricks, as the model's encoder and decoder call them.  Each method
    names the reference it stands in for."""

    @property
    def kernels(self):
        """The C++ kernels (``compiled.kernels``), looked up rather than held, so that a model holding
        its fast path can be copied and pickled (fairseq's EMA copies the model)."""
        return compiled.kernels

    def __repr__(self) -> str:
        return "FastPath(C++ kernels)"

    @staticmethod
    def serves() -> bool:
        """Whether this pass runs here: not under autocast (whose precisions the kernels do not take;
        the reference runs the pass instead)."""
        return not compiled.autocast_on_cpu()

    # -- the encoder ---------------------------------------------------------------------------
    def packing_plan(self, lengths: torch.Tensor, width: int):
        """``gru._Packing._plan`` in one call: (sizes, (forward inputs, backward inputs, forward
        outputs, backward outputs, finals))."""
        return self.kernels.packing_plan(lengths, width)

    def encoder_loop(self, input_gates, hidden_weight, hidden_bias, sizes, noise=None) -> torch.Tensor:
        """``gru._python_loop``'s states, (2, packed rows, H), as one node forward and back."""
        return _PackedGRULoop.apply(input_gates, hidden_weight, hidden_bias, sizes, noise)

    # -- the attention's nodes -------------------------------------------------------------------
    def gru_update(self, input_gates, hidden_gates, hidden) -> torch.Tensor:
        """``gru.gru_update`` as one C++ node."""
        return self.kernels.gru_step(input_gates, hidden_gates, hidden)

    def softmax_focus(self, positions, mu, sigma, padding_mask) -> torch.Tensor:
        """``normalizations.SoftmaxFocus.focus`` as one C++ node."""
        return self.kernels.softmax_gaussian(positions, mu, sigma, padding_mask)

    @staticmethod
    def location_form(location) -> Optional[Tuple[Tuple[str, float, Optional[torch.Tensor]], str]]:
        """((step activation, temperature, gate logit), reference) of the C++ location node for
        ``location``'s entries, or None where an entry has no C++ form (a user's entry, or a subclass
        of a built-in: ``registry.compiled_form``) or the focus counts its dwell."""
        if location.dwell_weight is not None or compiled_form(location.normalization) != "softmax":
            return None
        step, reference = compiled_form(location.step), compiled_form(location.reference)
        return None if step is None or reference is None else (step, reference)

    def location_focus(self, location, head_logits, previous_position, memory, padding_mask, step, dwell=None):
        """``LocationAttention.focus_step`` as one C++ node where its entries have a C++ form (the
        attended position computed too), else the reference (a user's entry in its own Python)."""
        form = self.location_form(location) if dwell is None else None
        if form is None:
            return location.focus_step(head_logits, previous_position, memory, padding_mask, step, dwell)
        (step_name, temperature, gate), reference = form
        return self.kernels.location_focus(
            head_logits, previous_position, gate, memory["positions"], memory["step_size"], memory["lengths"],
            padding_mask, step_name, temperature, reference, step, location.sigma_min, location.clamp_slope,
        )  # fmt: skip

    def mixed_focus(self, scores, padding_mask, location, mix_logit, mix_temperature, positions):
        """The mix m softmax(c) + (1 - m) lambda and the position it attends as one C++ node
        (``CrossAttention.attend_parts``'s reference mix)."""
        return self.kernels.mixed_focus(scores, padding_mask, location, mix_logit, mix_temperature, positions)

    def loop_form(self, attention) -> Optional[Dict[str, Any]]:
        """The options of the C++ decoder loop (csrc/decoder_loop.cpp) that compute ``attention``, or
        None where an entry has no C++ form: a scorer other than the built-in content scorer, or a
        location focus the C++ location node does not know (``location_form``)."""
        if attention.scorer is not None and compiled_form(attention.scorer) != "content":
            return None
        form = dict(mono_gate=None, step_activation=None, step_temperature=0.0, reference=None, sigma_min=0.0,
                    clamp_slope=None, mix_temperature=attention.mix_temperature,
                    location_reference=attention.position_reference == "location")  # fmt: skip
        if attention.location is not None:
            location = self.location_form(attention.location)
            if location is None:
                return None
            (step, temperature, gate), reference = location
            form.update(mono_gate=gate, step_activation=step, step_temperature=temperature, reference=reference,
                        sigma_min=attention.location.sigma_min, clamp_slope=attention.location.clamp_slope)  # fmt: skip
        return form

    # -- the GRU decoder ---------------------------------------------------------------------------
    def training_code(self, decoder) -> str:
        """What a training pass of ``decoder`` runs here: the loop node or the step nodes."""
        return LOOP if decoder.num_layers == 1 and self.loop_form(decoder.attention) is not None else STEP_NODES

    @staticmethod
    def folds_value_output(decoder, encoder_out, incremental_state=None) -> bool:
        """Whether the values' output map v = A u + b is left to the context's input gates, W_c (A r_t +
        b s_t) with W_c A multiplied out (``step_maps``), instead of applied at every source position:
        the one product of the weights (3H x D x D) against the product over every source position
        of the batch (B S x D x D), whichever is smaller (the same function either way).  Decoding
        always folds (once per decoding, and a decision that cannot change between its steps)."""
        if incremental_state is not None:
            return True
        positions = encoder_out["order"].numel() * encoder_out["encodings"].size(1)  # B S, after reordering
        return positions > decoder.cells[0].weight_ih.size(0)

    def decoder_pass(self, decoder, tokens, encoder_out, incremental_state, first_step):
        """``GRUDecoder.reference_pass``: (outputs h_1..h_T of the last layer (B, T, H), attention
        (B, T, S), the memory), with the weights folded, the embedding's gates through a table, and
        in training the loop node or the step nodes."""
        fold = self.folds_value_output(decoder, encoder_out, incremental_state)
        memory, state = decoder.begin_pass(encoder_out, incremental_state, fold_value_output=fold)
        hidden = list(state["hidden"].unbind(0))
        location = state.get("location")  # pa_{t-1} (and the dwell count), or None
        # the first layer's input gates W_i [y_{t-1}; c_t] + b_i: the embedding's part for every step
        # at once (it does not depend on the recurrence), the context's part step by step
        input_gates = self.embedding_gates(decoder, tokens, incremental_state)  # (B, T, 3H)
        maps = self.step_maps(decoder, incremental_state, fold)
        steps = None
        if incremental_state is None and torch.is_grad_enabled() and maps[0].requires_grad:
            steps = self.loop(decoder, input_gates, hidden, *maps, memory)
        if steps is None:
            steps = self.steps(decoder, input_gates, hidden, location, *maps, memory, first_step, incremental_state)
        outputs, attention, hidden, location, memory = steps
        decoder.end_pass(incremental_state, memory, hidden, location)
        return outputs, attention, memory

    @staticmethod
    def embedding_gates(decoder, tokens, incremental_state=None):
        """The embedding's part of the first layer's input gates, W_e e(y) + b_i, for every token
        (token_tables.py).  Decoding keeps the table of every vocabulary row in its state once a
        step has made it: the weights do not change between the steps of one decoding."""
        cell = decoder.cells[0]
        weight, bias = cell.weight_ih[:, : decoder.embed_tokens.embedding_dim], cell.bias_ih
        if incremental_state is None:
            return token_map(decoder.embed_tokens, tokens, weight, bias)
        table = decoder.get_incremental_state(incremental_state, "token_table")
        if table is None and table_applies(decoder.embed_tokens, tokens.numel()):
            table = token_table(decoder.embed_tokens, weight, bias)
            decoder.set_incremental_state(incremental_state, "token_table", table)
        return F.linear(decoder.embed_tokens(tokens), weight, bias) if table is None else F.embedding(tokens, table)

    def steps(self, decoder, input_gates, hidden, location, read_weight, read_bias, sizes, context_weight, memory,
              first_step, incremental_state):  # fmt: skip
        """The decoder's steps, one after the other: from the embedding's share of the first layer's
        input gates (B, T, 3H), the hidden states [h_0 of each layer], the location state, the weights
        of ``step_maps`` and the attention's memory, (outputs h_1..h_T of the last layer (B, T, H),
        attention (B, T, S), the hidden states and the location state after the last step, the memory
        to keep for the next call)."""
        cell = decoder.cells[0]
        merged = decoder.num_layers == 1
        step_memory = memory
        if torch.is_grad_enabled() and read_weight.requires_grad:  # weight gradients once, after every step
            read_map = StepLinear(read_weight, read_bias, kernels=self.kernels)
            context_map = StepLinear(context_weight, kernels=self.kernels)
            # the values each step reads and the keys it scores: their gradients once, too
            step_memory = with_step_operands(memory, ("values", "keys"), kernels=self.kernels)
        else:
            # decoding: the keys also feature-major, for streamed scores (made once, kept in the state)
            memory = step_memory = with_feature_major(memory, ("keys",))
            read_map = lambda h: F.linear(h, read_weight, read_bias)  # noqa: E731
            context_map = lambda c, gates: torch.addmm(gates, c, context_weight.t())  # noqa: E731
        outputs, weights = [], []
        for j, gates in enumerate(input_gates.unbind(1)):
            read = read_map(hidden[-1])
            if merged:  # one split of the one product: the attention's parts and the hidden gates
                *parts, hidden_gates = read.split(sizes + [cell.weight_hh.size(0)], dim=-1)
            else:
                parts, hidden_gates = read.split(sizes, dim=-1), F.linear(hidden[0], cell.weight_hh, cell.bias_hh)
            context, step_weights, location = decoder.attention.attend_parts(
                *parts, step_memory, location, first_step + j, fast_path=self
            )
            hidden[0] = self.gru_update(context_map(context, gates), hidden_gates, hidden[0])
            for layer in range(1, decoder.num_layers):
                hidden[layer] = decoder.cells[layer](hidden[layer - 1], hidden[layer])
            outputs.append(hidden[-1])
            weights.append(step_weights)
        return torch.stack(outputs, dim=1), torch.stack(weights, dim=1), hidden, location, memory

    def loop(self, decoder, input_gates, hidden, read_weight, read_bias, sizes, context_weight, memory):
        """``steps`` of a training pass (from the first step, pa_0 = 0; one layer) as one C++ autograd
        node for the whole time loop (csrc/decoder_loop.cpp; the same function as ``steps`` with the
        C++ step nodes to float rounding: h_t, the attention and the gradients), or None where it
        does not apply: more layers, or an attention entry without a C++ form (``loop_form``)."""
        form = self.loop_form(decoder.attention) if decoder.num_layers == 1 else None
        if form is None:
            return None
        outputs, attention, position = self.kernels.decoder_loop(
            input_gates, hidden[0], read_weight, read_bias, context_weight, memory["values"], memory.get("keys"),
            form["mono_gate"], memory.get("positions"), memory.get("step_size"),
            memory.get("lengths"), memory["padding_mask"], sizes, form["step_activation"], form["step_temperature"],
            form["reference"], form["sigma_min"], form["clamp_slope"], form["mix_temperature"],
            form["location_reference"],
        )  # fmt: skip
        return outputs, attention, [outputs[:, -1]], (None if position is None else {"position": position}), memory

    @staticmethod
    def step_maps(decoder, incremental_state, fold_value_output: bool) -> Tuple[Any, Any, List[int], Any]:
        """The weights of a step's two products: (weight, bias, sizes) of what it reads off h_{t-1}
        in one product, the attention's readout (its rows of ``sizes``) and, with one layer, the
        GRU's hidden gates W_h h_{t-1} + b_h below it; and the context's share of the first layer's
        input gates, W_c, or with ``fold_value_output`` W_c (A r_t + b s_t) = [W_c A | W_c b] [r_t;
        s_t], which applies the values' output map v = A u + b to the read r_t = sum_i a_ti u_i
        (s_t = sum_i a_ti, the values' last entry; ``CrossAttention.prepare``).  Decoding keeps
        them in the incremental state (made at its first step, with the memory they read): the
        weights do not change between the steps of one decoding, and making them (concatenating
        the matrices, multiplying out the location heads and the output map) is a fixed cost."""
        if incremental_state is not None:
            kept = decoder.get_incremental_state(incremental_state, "step_maps")
            if kept is not None:
                return kept["read_weight"], kept["read_bias"], kept["sizes"], kept["context_weight"]
        read_weight, read_bias, sizes = decoder.attention.step_readout()
        cell = decoder.cells[0]
        if decoder.num_layers == 1:
            read_weight = torch.cat([read_weight, cell.weight_hh])
            read_bias = torch.cat([read_bias, cell.bias_hh])
        context_weight = cell.weight_ih[:, decoder.embed_tokens.embedding_dim :]
        if fold_value_output:
            context_weight = context_weight @ decoder.attention.value_output_map()
        if incremental_state is not None:
            kept = dict(read_weight=read_weight, read_bias=read_bias, sizes=sizes, context_weight=context_weight)
            decoder.set_incremental_state(incremental_state, "step_maps", kept)
        return read_weight, read_bias, sizes, context_weight
