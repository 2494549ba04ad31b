"""encoder_settling: the drift of a GRU encoder's encodings over copies of one source, on
encoders whose memory is set by hand: none (every copy encoded alike) and a slow running
average (each copy encoded otherwise, less so copy after copy)."""

import pytest
import torch

from fairseq_monoattn.testing import build, digit_dictionary
from monoattn_lab.encoder_settling import settling


def _encoder_with_update_bias(model, bias: float):
    """h_t = z h_{t-1} + (1 - z) tanh(W_in x_t + b_in) with z = sigmoid(bias) for every unit:
    W_hh = 0 (the candidate does not read h), the update gate's biases set to ``bias``."""
    rnn = model.encoder.rnn
    hidden = rnn.hidden_size
    with torch.no_grad():
        for suffix in ("", "_reverse"):
            getattr(rnn, f"weight_hh_l0{suffix}").zero_()
            getattr(rnn, f"weight_ih_l0{suffix}")[hidden : 2 * hidden].zero_()
            getattr(rnn, f"bias_ih_l0{suffix}")[hidden : 2 * hidden].fill_(bias)
            getattr(rnn, f"bias_hh_l0{suffix}")[hidden : 2 * hidden].zero_()
    return model


def test_an_encoder_without_memory_settles_at_once_and_its_gate_does_not_count_copies():
    dictionary = digit_dictionary()
    model = _encoder_with_update_bias(build("gru_monoattn", dictionary).double(), -60.0)  # z = 1e-26
    report = settling(model, dictionary, "3 3 3 8 1 6 6 6 6 6", copies=6)
    assert report.copy_length == 10 and len(report.forward_drift) == len(report.backward_drift) == 5
    assert report.settled(tolerance=1e-12)
    assert max(report.forward_drift[1:] + report.backward_drift[1:]) < 1e-12
    assert max(report.gate_logits) - min(report.gate_logits) < 1e-12
    assert not model.training  # left as it was


def test_a_slow_encoder_drifts_less_and_less_copy_after_copy_and_its_gate_counts_them():
    dictionary = digit_dictionary()
    model = _encoder_with_update_bias(build("gru_monoattn", dictionary).double(), 5.0)  # z = 0.9933
    model.train()
    report = settling(model, dictionary, "3 3 3 8 1 6 6 6 6 6", copies=6)
    assert model.training  # left as it was
    assert not report.settled()
    for drift in (report.forward_drift, report.backward_drift):
        # the average forgets a copy's worth of its past by z ** 10 = 0.935
        assert all(later < earlier for earlier, later in zip(drift[1:], drift[2:]))
        assert drift[4] > 1e-3
        assert drift[4] / drift[3] == pytest.approx(
            torch.sigmoid(torch.tensor(5.0, dtype=torch.float64)).item() ** 10, rel=1e-6
        )
    assert len(set(round(x, 9) for x in report.gate_logits)) == 6


def test_one_copy_is_refused():
    dictionary = digit_dictionary()
    with pytest.raises(ValueError, match="copies must be at least 2, got 1"):
        settling(build("gru_monoattn", dictionary), dictionary, "1 2", copies=1)
