"""An extension of fairseq-monoattn from a package of your own: a new step activation and a new
content scorer, each registered by name with settings of its own, and presets that use them: two
over the GRU model, one over the Transformer; and a position scheme for the Transformer models
(``--positions kerple-log``).  The plugin does not import this package; fairseq does, through
--user-dir:

    fairseq-train DATA --user-dir examples/extension/attention_extras --arch gru_tanh_onestep ...
    fairseq-train DATA --user-dir examples/extension/attention_extras --arch transformer_tanh_onestep ...
    fairseq-train DATA --user-dir examples/extension/attention_extras --arch gru_onestep \\
        --step-activation tanh --tanh-step-scale 2 --attention-scoring additive --additive-hidden 16 ...

    fairseq-train DATA --user-dir examples/extension/attention_extras --arch transformer_small \\
        --positions kerple-log --kerple-init 0.5 ...

docs/extending.md walks through it.
"""

from dataclasses import dataclass, field

import torch
from torch import nn

from fairseq_monoattn import register_preset  # importing the plugin registers its models, presets, task ...
from fairseq_monoattn.models.presets import PRESETS
from fairseq_monoattn.models.transformer_monoattn import TRANSFORMER_PRESETS
from fairseq_monoattn.modules.position_schemes import PositionScheme, register_position_scheme
from fairseq_monoattn.registry import Scorer, StepActivation, register_scorer, register_step_activation


@dataclass
class TanhStepSettings:
    tanh_step_scale: float = field(default=1.0, metadata={"help": "the largest step: scale * (1 + tanh(rho)) / 2"})


@register_step_activation("tanh", settings=TanhStepSettings)
class TanhStep(StepActivation):
    """steps = scale * (1 + tanh(rho)) / 2: between 0 and ``scale`` positions forward a step."""

    def __init__(self, settings: TanhStepSettings):
        super().__init__()
        self.scale = settings.tanh_step_scale

    def forward(self, rho: torch.Tensor) -> torch.Tensor:
        return self.scale * (1 + torch.tanh(rho)) / 2


@dataclass
class AdditiveSettings:
    additive_hidden: int = field(default=32, metadata={"help": "hidden size of the additive scorer"})


@register_scorer("additive", settings=AdditiveSettings)
class AdditiveScores(Scorer):
    """Bahdanau's additive scores: c_ti = v . tanh(W_k k_i + W_q q_t)."""

    def __init__(self, settings: AdditiveSettings, dim: int):
        super().__init__(dim)
        self.key_proj = nn.Linear(dim, settings.additive_hidden, bias=False)
        self.query_proj = nn.Linear(dim, settings.additive_hidden)
        self.v = nn.Linear(settings.additive_hidden, 1, bias=False)

    def prepare(self, keys: torch.Tensor):
        return {"additive_keys": self.key_proj(keys)}  # once per sequence: (B, S, hidden)

    def forward(self, query: torch.Tensor, memory, step: int) -> torch.Tensor:
        hidden = torch.tanh(memory["additive_keys"] + self.query_proj(query).unsqueeze(1))
        return self.v(hidden).squeeze(-1)


register_preset("gru_tanh_onestep", dict(PRESETS["gru_onestep"], step_activation="tanh"))
register_preset(
    "gru_mix_additive_tanh", dict(PRESETS["gru_mix_onestep"], step_activation="tanh", attention_scoring="additive")
)
register_preset(
    "transformer_tanh_onestep",
    dict(TRANSFORMER_PRESETS["transformer_onestep"], step_activation="tanh", decoder_layers=2),
    model="transformer_location",
)


@dataclass
class KerpleSettings:
    kerple_init: float = field(default=1.0, metadata={"help": "KERPLE's r1 and r2 of every head at first"})

    def __post_init__(self):
        if not self.kerple_init > 0:
            raise ValueError(f"kerple_init must be > 0, got {self.kerple_init}")


@register_position_scheme("kerple-log", settings=KerpleSettings)
class KerpleLogPositions(PositionScheme):
    """KERPLE's logarithmic bias (Chi et al., NeurIPS 2022): head h's score of query i for key j
    loses r1_h log(1 + r2_h |i - j|), r1_h, r2_h > 0 learned (kept positive as exponentials)."""

    in_attention = True  # a bias of the scores: the plugin's self-attention runs it

    def __init__(self, settings: KerpleSettings, **sizes):
        super().__init__(**sizes)  # heads, head_dim, embed_dim, padding_idx, max_positions, causal
        start = torch.full((self.heads,), float(settings.kerple_init)).log()
        self.log_r1 = nn.Parameter(start.clone())
        self.log_r2 = nn.Parameter(start.clone())

    def bias(self, query_positions, key_positions):  # (B, T), (B, S) -> (B, H, T, S)
        distance = (query_positions.unsqueeze(2) - key_positions.unsqueeze(1)).abs().unsqueeze(1)
        r1, r2 = self.log_r1.exp().view(1, -1, 1, 1), self.log_r2.exp().view(1, -1, 1, 1)
        return -r1 * torch.log1p(r2 * distance.to(r1.dtype))
