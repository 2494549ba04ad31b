"""One GRU step from its gates' pre-activations, with its derivative written out.

The decoder computes the gates' pre-activations itself (the embedding's share for every step at
once, the hidden state's together with the attention's readout), so it needs the cell's update
alone.  As one autograd node with a hand-written backward, a step records one node instead of
about ten, which is most of what a decoder step costs on a CPU.  The encoder's bidirectional GRU
(``bidirectional_gru``) steps through its sources the same way.  On the fast path
(``fast_path.py``) the encoder's plan and whole loop are C++ calls instead.
"""

import torch
import torch.nn.functional as F

from .positions import padding_mask, reversal_index
from .token_tables import TokenRows


class _GRUUpdate(torch.autograd.Function):
    """h' = (h - n) z + n with r = sigmoid(i_r + h_r), z = sigmoid(i_z + h_z),
    n = tanh(i_n + r h_n): torch's GRUCell, rows of the gates in its order [r | z | n]."""

    @staticmethod
    def forward(ctx, input_gates, hidden_gates, hidden):
        i_r, i_z, i_n = input_gates.chunk(3, dim=-1)
        h_r, h_z, h_n = hidden_gates.chunk(3, dim=-1)
        reset = torch.sigmoid(i_r + h_r)
        update = torch.sigmoid(i_z + h_z)
        new = torch.tanh(i_n + reset * h_n)
        ctx.save_for_backward(reset, update, new, hidden, h_n)
        return (hidden - new) * update + new

    @staticmethod
    def backward(ctx, grad):
        reset, update, new, hidden, h_n = ctx.saved_tensors
        # sigmoid_backward(g, y) = g y (1 - y) and tanh_backward(g, y) = g (1 - y^2), one kernel each
        grad_kept = grad * update  # dL/dh through h' = z h + (1 - z) n
        grad_update = torch.ops.aten.sigmoid_backward(grad * (hidden - new), update)  # through z = sigmoid(.)
        grad_new = torch.ops.aten.tanh_backward(grad - grad_kept, new)  # through n = tanh(.)
        grad_reset = torch.ops.aten.sigmoid_backward(grad_new * h_n, reset)
        input_grad = torch.cat([grad_reset, grad_update, grad_new], dim=-1)
        hidden_gates_grad = torch.cat([grad_reset, grad_update, grad_new * reset], dim=-1)
        return input_grad, hidden_gates_grad, grad_kept


def gru_update(input_gates: torch.Tensor, hidden_gates: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """One GRU step from its gates' pre-activations W_i x + b_i (B, 3H) and W_h h + b_h (B, 3H)."""
    return _GRUUpdate.apply(input_gates, hidden_gates, hidden)


def _both_directions(rnn: torch.nn.GRU, name: str, layer: int):
    """rnn's parameter ``name`` of ``layer`` for the forward and the backward direction."""
    return getattr(rnn, f"{name}_l{layer}"), getattr(rnn, f"{name}_l{layer}_reverse")


class _Packing:
    """Where each (row, position) of a right-padded batch goes when the batch is stepped as
    torch packs it: rows sorted by length, longest first, and step t runs on the first
    ``sizes[t]`` of them, the rows longer than t.  Packed row k stands for (step t, sorted row r),
    step-major, as in ``PackedSequence.data``; the forward direction reads position t of the row
    at step t, the backward direction position length - 1 - t."""

    def __init__(self, lengths: torch.Tensor, width: int, fast_path=None):
        if fast_path is not None:  # the same plan in one call
            self.sizes, indices = fast_path.packing_plan(lengths, width)
            self.total = sum(self.sizes)
            (self.forward_inputs, self.backward_inputs, self.forward_outputs, self.backward_outputs,
             self.finals) = indices  # fmt: skip
        else:
            self._plan(lengths, width)

    def _plan(self, lengths: torch.Tensor, width: int):
        device = lengths.device
        batch = lengths.numel()
        sorted_lengths, order = torch.sort(lengths, descending=True, stable=True)
        steps = torch.arange(int(sorted_lengths[0]), device=device)
        sizes = (sorted_lengths.unsqueeze(0) > steps.unsqueeze(1)).sum(dim=1)  # rows longer than t
        self.sizes = sizes.tolist()
        self.total = sum(self.sizes)
        starts = torch.cumsum(sizes, 0) - sizes  # the first packed row of each step
        rank = torch.empty_like(order)
        rank[order] = torch.arange(batch, device=device)  # sorted place of each row
        step = torch.repeat_interleave(steps, sizes)  # (total,) the step of each packed row
        row = order[torch.arange(self.total, device=device) - starts[step]]
        # rows of x seen as (B * width, D) that feed each packed row
        self.forward_inputs = row * width + step
        self.backward_inputs = row * width + lengths[row] - 1 - step
        # the packed row of each output (b, p), whose state is that of step step_of[b, p]; padding
        # reads the zero row at ``total``
        padding = padding_mask(lengths, width)

        def packed_rows(step_of: torch.Tensor) -> torch.Tensor:
            return torch.where(padding, self.total, starts[step_of.clamp(max=steps.numel() - 1)] + rank.unsqueeze(1))

        self.forward_outputs = packed_rows(torch.arange(width, device=device).expand(batch, width))
        self.backward_outputs = packed_rows(reversal_index(lengths, width))  # position p: step length - 1 - p
        self.finals = starts[lengths - 1] + rank  # each row's last step


def bidirectional_gru(
    rnn: torch.nn.GRU, x: torch.Tensor, lengths: torch.Tensor, state_noise: float = 0.0, fast_path=None
):
    """What ``rnn(pack_padded_sequence(x, lengths))`` computes, for a batch-first bidirectional
    ``nn.GRU`` and right-padded x (B, T, D): outputs (B, T, 2H), zero past each row's length, and
    the final states (layers * 2, B, H), with rnn's own parameters.

    The backward direction runs forward over each row reversed within its length, so both
    directions step together: per step one batched product W_hh h + b_hh for the two directions
    and one GRU update node, the input gates W_ih x + b_ih of every step computed before the
    loop.  As in a packed sequence, step t computes only the rows longer than t (no work on
    padding, which is about 40 % of a batch of mixed lengths); a packed ``nn.GRU`` on the CPU
    records about ten autograd nodes per step and direction.  The lengths are read on the host
    (one synchronisation per call on an accelerator, as ``pack_padded_sequence`` needs).

    With ``fast_path`` (``fast_path.FastPath``, the caller's choice) the plan and the loop are C++
    calls, one forward and one backward instead of a node per step.

    x may also be ``TokenRows(ids, table)``, rows table[ids] not made: the first layer's input gates
    are then W_ih table + b_ih, once per table row, read by each packed row (token_tables.py).

    state_noise s > 0: every state, after its step, gets N(0, s^2) noise added, h_t = GRU(x_t,
    h_{t-1}) + s eps_t, which the next step reads (the noise of a layer is one draw of torch's
    generator, (2, packed rows, H), the same in both loops)."""
    batch, width = x.ids.shape if isinstance(x, TokenRows) else x.shape[:2]
    device = x.ids.device if isinstance(x, TokenRows) else x.device
    packing = _Packing(lengths.to(device), width, fast_path)
    finals = []
    for layer in range(rnn.num_layers):
        directions = zip(
            (packing.forward_inputs, packing.backward_inputs),
            _both_directions(rnn, "weight_ih", layer),
            _both_directions(rnn, "bias_ih", layer),
        )
        if isinstance(x, TokenRows):
            ids = x.ids.reshape(-1)
            gates = [
                F.linear(x.table, weight, bias).index_select(0, ids.index_select(0, inputs))
                for inputs, weight, bias in directions
            ]
        else:
            rows = x.reshape(batch * width, -1)
            gates = [F.linear(rows.index_select(0, inputs), weight, bias) for inputs, weight, bias in directions]
        input_gates = torch.stack(gates)  # (2, total, 3H)
        hidden_weight = torch.stack(_both_directions(rnn, "weight_hh", layer))  # (2, 3H, H)
        hidden_bias = torch.stack(_both_directions(rnn, "bias_hh", layer))  # (2, 3H)
        padding_state = input_gates.new_zeros(2, 1, rnn.hidden_size)  # what padding positions read
        noise = None
        if state_noise > 0:
            noise = torch.randn(2, packing.total, rnn.hidden_size, dtype=input_gates.dtype, device=input_gates.device)
            noise.mul_(state_noise)
        if fast_path is not None:
            states = [fast_path.encoder_loop(input_gates, hidden_weight, hidden_bias, packing.sizes, noise)]
        else:
            states = _python_loop(input_gates, hidden_weight, hidden_bias, packing.sizes, noise)
        states = torch.cat(states + [padding_state], dim=1)  # (2, total + 1, H)
        finals.append(states.index_select(1, packing.finals))
        x = torch.cat(
            [
                states[0].index_select(0, packing.forward_outputs.flatten()),
                states[1].index_select(0, packing.backward_outputs.flatten()),
            ],
            dim=-1,
        ).view(batch, width, -1)
    return x, torch.cat(finals)


def _python_loop(input_gates, hidden_weight, hidden_bias, sizes, noise=None):
    """The states of each step of ``bidirectional_gru``'s loop: per step one batched product
    W_hh h + b_hh for both directions and one ``gru_update`` node (and the step's rows of
    ``noise`` added, when given)."""
    hidden_weight, hidden_bias = hidden_weight.transpose(1, 2), hidden_bias.unsqueeze(1)  # (2, H, 3H), (2, 1, 3H)
    hidden = input_gates.new_zeros(2, sizes[0], hidden_weight.size(1))
    step_noise = noise.split(sizes, dim=1) if noise is not None else [None] * len(sizes)
    states = []
    for gates, size, added in zip(input_gates.split(sizes, dim=1), sizes, step_noise):
        if size != hidden.size(1):
            hidden = hidden[:, :size]  # the rows that ended at the last step leave the batch
        hidden = gru_update(gates, torch.baddbmm(hidden_bias, hidden, hidden_weight), hidden)
        if added is not None:
            hidden = hidden + added
        states.append(hidden)
    return states
