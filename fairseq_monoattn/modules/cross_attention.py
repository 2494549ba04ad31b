"""The decoder's cross-attention: content scores, location attention, or a mixture of both.

    keys   k_i = W_k e_i            values v_i = W_o W_v LeakyReLU(W_1 e_i)
    query  q_t = W_q h_{t-1}

    content only:   a_t = softmax(c_t)                       (c_t from a scorer in content.py)
    location only:  a_t = lambda_t                           (location.py)
    mixed:          a_t = m_t softmax(c_t) + (1 - m_t) lambda_t,  m_t = sigmoid(beta f_mix(h_{t-1}))

    context o_t = sum_i a_ti v_i;   pa_t = sum_i a_ti norm(i)
    (or, "position reference" PR, pa_t = sum_i lambda_ti norm(i): the location-only focus)

The paper's output map o_t = f_o(sum_i a_ti v_i) is folded into the values: attention
weights sum to one, so f_o(sum a v) = sum a f_o(v), computed once per sequence.
Everything a step reads off h_{t-1} (q_t, the location heads, the mixing logit) comes from
one linear map, split afterwards: one matrix product per step instead of three.
With a direction gate (direction_gate.py) keys and values read e_dir instead of e.
"""
from typing import Dict, Optional

import torch
from torch import nn

from .content import SCORERS
from .direction_gate import DirectionGate
from .location import LocationAttention
from .positions import padding_mask

POSITION_REFERENCES = ("mixed", "location")


class CrossAttention(nn.Module):
    def __init__(
        self,
        encoder_dim: int,
        query_dim: int,
        attention_dim: int,
        scoring: Optional[str] = "content",
        location: Optional[LocationAttention] = None,
        direction_gate: Optional[DirectionGate] = None,
        position_reference: str = "mixed",
        mix_temperature: float = 5.0,
    ):
        super().__init__()
        if scoring is None and location is None:
            raise ValueError("cross-attention needs content scores (--attention-scoring) or location attention")
        if scoring is not None and scoring not in SCORERS:
            raise ValueError(f"--attention-scoring must be one of none, {', '.join(SCORERS)}, got {scoring!r}")
        if position_reference not in POSITION_REFERENCES:
            raise ValueError(
                f"--position-reference must be one of {', '.join(POSITION_REFERENCES)}, got {position_reference!r}"
            )
        self.direction_gate = direction_gate
        self.location = location
        self.position_reference = position_reference
        self.mix_temperature = mix_temperature
        self.values = nn.Sequential(
            nn.Linear(encoder_dim, attention_dim),
            nn.LeakyReLU(),
            nn.Linear(attention_dim, attention_dim),
        )
        self.scorer = None
        if scoring is not None:
            self.keys = nn.Linear(encoder_dim, attention_dim)
            self.scorer = SCORERS[scoring](attention_dim)
        self.mixes = self.scorer is not None and location is not None
        # readout of h_{t-1}: [query (content) | location heads | mixing logit]
        self.readout_sizes = [
            attention_dim if self.scorer is not None else 0,
            location.num_heads if location is not None else 0,
            1 if self.mixes else 0,
        ]
        self.readout = nn.Linear(query_dim, sum(self.readout_sizes))

    @property
    def tracks_position(self) -> bool:
        return self.location is not None

    def prepare(self, encodings, summary, lengths) -> Dict[str, torch.Tensor]:
        """Per-sequence work, done once before decoding: everything a step needs, batch-first."""
        width = encodings.size(1)
        memory = {"padding_mask": padding_mask(lengths, width)}
        if self.direction_gate is not None:
            encodings, memory["direction"] = self.direction_gate(encodings, summary, lengths)
        memory["values"] = self.values(encodings)
        if self.location is not None:
            memory.update(self.location.prepare(lengths, width))
        if self.scorer is not None:
            memory.update(self.scorer.prepare(self.keys(encodings)))  # "keys" (and "key_bias")
        return memory

    def initial_position(self, memory) -> torch.Tensor:
        """pa_0 = 0: the first reference is the START position."""
        return memory["values"].new_zeros(memory["values"].size(0))

    def forward(self, hidden, memory, previous_position, step: int):
        """hidden (B, Dq) = h_{t-1}; returns context (B, Da), weights (B, S), pa_t (B,) or None."""
        mask = memory["padding_mask"]
        query, heads, mix_logit = self.readout(hidden).split(self.readout_sizes, dim=-1)
        content = location = None
        if self.scorer is not None:
            content = self.scorer(query, memory, step).masked_fill(mask, float("-inf")).softmax(dim=-1)
        if self.location is not None:
            location, _ = self.location(heads, previous_position, memory, mask, step)
        if content is None:
            weights = location
        elif location is None:
            weights = content
        else:
            m = torch.sigmoid(self.mix_temperature * mix_logit)
            weights = location + m * (content - location)  # = m * content + (1 - m) * location
        context = torch.bmm(weights.unsqueeze(1), memory["values"]).squeeze(1)
        position = None
        if self.location is not None:
            focus = location if self.position_reference == "location" else weights
            position = (focus * memory["positions"]).sum(dim=-1)
        return context, weights, position
