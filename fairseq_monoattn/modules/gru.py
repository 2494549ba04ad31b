"""One GRU step from its gates' pre-activations, with its derivative written out.

The decoder computes the gates' pre-activations itself (the embedding's share for every step at
once, the hidden state's together with the attention's readout), so it needs the cell's update
alone.  As one autograd node with a hand-written backward, a step records one node instead of
about ten, which is most of what a decoder step costs on a CPU.  The encoder's bidirectional GRU
steps through its sources the same way (``bidirectional_gru``).
"""

import torch
import torch.nn.functional as F

from .positions import gather_positions, padding_mask, reversal_index


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


def bidirectional_gru(rnn: torch.nn.GRU, x: torch.Tensor, lengths: torch.Tensor):
    """What ``rnn(pack_padded_sequence(x, lengths))`` computes, for a batch-first bidirectional
    ``nn.GRU`` and right-padded x (B, T, D): outputs (B, T, 2H), zero past each row's length, and
    the final states (layers * 2, B, H), with rnn's own parameters.

    The backward direction runs forward over each row reversed within its length, so both
    directions step through the same padded time axis together: per step one batched product
    W_hh h + b_hh for the two directions and one GRU update node, the input gates W_ih x + b_ih of
    every step computed before the loop.  A packed ``nn.GRU`` on the CPU slices its batch and
    records about ten autograd nodes per step and direction."""
    batch, width, _ = x.shape
    lengths = lengths.to(x.device)
    real = ~padding_mask(lengths, width).unsqueeze(-1)  # (B, T, 1)
    reverse = reversal_index(lengths, width)  # the backward direction's order of each row
    last = (lengths - 1).view(1, batch, 1)
    finals = []
    for layer in range(rnn.num_layers):
        forward_ih, backward_ih = _both_directions(rnn, "weight_ih", layer)
        forward_bias, backward_bias = _both_directions(rnn, "bias_ih", layer)
        backward_input = gather_positions(x, reverse)
        input_gates = torch.stack(
            [F.linear(x, forward_ih, forward_bias), F.linear(backward_input, backward_ih, backward_bias)]
        )  # (2, B, T, 3H)
        hidden_weight = torch.stack(_both_directions(rnn, "weight_hh", layer)).transpose(1, 2)  # (2, H, 3H)
        hidden_bias = torch.stack(_both_directions(rnn, "bias_hh", layer)).unsqueeze(1)  # (2, 1, 3H)
        hidden = x.new_zeros(2, batch, rnn.hidden_size)
        states = []
        for gates in input_gates.unbind(2):
            hidden = gru_update(gates, torch.baddbmm(hidden_bias, hidden, hidden_weight), hidden)
            states.append(hidden)
        states = torch.stack(states, dim=2)  # (2, B, T, H)
        finals.append(states.gather(2, last.unsqueeze(-1).expand(2, batch, 1, rnn.hidden_size)).squeeze(2))
        x = torch.cat([states[0], gather_positions(states[1], reverse)], dim=-1) * real
    return x, torch.cat(finals)
