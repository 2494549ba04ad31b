"""Whether a GRU encoder's states settle: the encodings of one source repeated k times.

A source x repeated k times, x x .. x, gives the encoder the same local input in every copy.
An encoder whose state forgets its start within one copy gives every copy after the first the
same encodings; one with a slow state (a count of the steps, a value that creeps) gives each copy
other encodings, and its encodings of a long input are unlike any it saw in training:

    drift_k = mean over the positions p of one copy of || e[copy k + 1, p] - e[copy k, p] ||

for the forward half of the encodings (read left to right, so copy k + 1 follows copy k) and the
backward half (read right to left: copy k follows copy k + 1).  With a direction gate, the gate's
logit beta f_dir(e_cls) (g = sigmoid(logit)) is given for 1 .. k copies: the summary e_cls of a
settled encoder does not change with the number of copies.

    from fairseq_monoattn.attention_maps import load_checkpoint
    from monoattn_lab.encoder_settling import settling
    loaded = load_checkpoint("checkpoints/checkpoint_best.pt", "data/bin")
    report = settling(loaded.model, loaded.task.source_dictionary, "1 1 1 4 7 7 7", copies=8)
    report.forward_drift      # [drift_0, .., drift_6]
"""

from dataclasses import dataclass
from typing import List, Optional

import torch

from fairseq_monoattn.attention_maps import encode


@dataclass
class SettlingReport:
    copies: int
    copy_length: int  # tokens in one copy of the source
    forward_drift: List[float]  # drift_k of the forward half, k = 0 .. copies - 2
    backward_drift: List[float]  # drift_k of the backward half, counted from the source's end
    gate_logits: Optional[List[float]]  # beta f_dir(e_cls) of 1 .. copies copies, or None without a gate

    def settled(self, tolerance: float = 1e-3) -> bool:
        """Every drift after the first copy's is below ``tolerance`` (both halves)."""
        return all(d < tolerance for d in self.forward_drift[1:] + self.backward_drift[1:])


def _encode(model, ids: torch.Tensor) -> dict:
    return model.encoder(ids.unsqueeze(0), torch.tensor([ids.numel()]))


def settling(model, dictionary, source: str, copies: int = 8) -> SettlingReport:
    """The drift of ``model``'s encodings (a GRU encoder-decoder of this plugin, e.g. a loaded
    checkpoint) over ``copies`` copies of ``source`` (space-separated tokens), in eval mode."""
    if copies < 2:
        raise ValueError(f"copies must be at least 2, got {copies}")
    one = encode(dictionary, source, "source")[:-1]  # the tokens, without </s>
    eos = torch.tensor([dictionary.eos()])
    n = one.numel()
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            encoded = [_encode(model, torch.cat([one.repeat(k), eos])) for k in range(1, copies + 1)]
            encodings = encoded[-1]["encodings"][0].double()
            half = encodings.size(-1) // 2
            tokens = encodings[1 : 1 + copies * n].view(copies, n, -1)  # skip START; copy k, position p
            forward, backward = tokens[..., :half], tokens[..., half:]
            forward_drift = [float((forward[k + 1] - forward[k]).norm(dim=-1).mean()) for k in range(copies - 1)]
            # the backward half reads from the end: its k-th copy from the end is tokens[copies - 1 - k]
            backward_drift = [
                float((backward[copies - 2 - k] - backward[copies - 1 - k]).norm(dim=-1).mean())
                for k in range(copies - 1)
            ]
            gate = getattr(model.decoder.attention, "direction_gate", None)
            logits = None if gate is None else [float(gate.logit(out["summary"][-1])) for out in encoded]
    finally:
        model.train(was_training)
    return SettlingReport(
        copies=copies,
        copy_length=n,
        forward_drift=forward_drift,
        backward_drift=backward_drift,
        gate_logits=logits,
    )
