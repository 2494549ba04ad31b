"""One GRU step from its gates' pre-activations, with its derivative written out.

The decoder computes the gates' pre-activations itself (the embedding's share for every step at
once, the hidden state's together with the attention's readout), so it needs the cell's update
alone.  As one autograd node with a hand-written backward, a step records one node instead of
about ten, which is most of what a decoder step costs on a CPU.
"""

import torch


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
        grad_update = grad * (hidden - new) * update * (1 - update)  # through z = sigmoid(.)
        grad_new = grad * (1 - update) * (1 - new * new)  # through n = tanh(.)
        grad_reset = grad_new * h_n * reset * (1 - reset)
        input_grad = torch.cat([grad_reset, grad_update, grad_new], dim=-1)
        hidden_gates_grad = torch.cat([grad_reset, grad_update, grad_new * reset], dim=-1)
        return input_grad, hidden_gates_grad, grad * update


def gru_update(input_gates: torch.Tensor, hidden_gates: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """One GRU step from its gates' pre-activations W_i x + b_i (B, 3H) and W_h h + b_h (B, 3H)."""
    return _GRUUpdate.apply(input_gates, hidden_gates, hidden)
