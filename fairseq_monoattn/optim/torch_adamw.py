"""``--optimizer torch_adamw``: torch's own AdamW, the optimizer the authors' release trains with.

fairseq's ``adam`` and torch's ``AdamW`` take the same decoupled update but add ε in different
places. With the bias corrections c₁ = 1 − β₁ᵗ and c₂ = 1 − β₂ᵗ after t steps::

    fairseq's adam:  p ← p − λ·√c₂/c₁ · m / (√v + ε)
    torch's AdamW:   p ← p − λ/c₁ · m / (√v/√c₂ + ε)  =  p − λ·√c₂/c₁ · m / (√v + ε·√c₂)

So torch's ε weighs √c₂ times less: about 30 times less at the first step, 2 times less after
300 steps, the same after a few thousand. The two differ only where √v is near ε, that is for
parameters whose gradients are about 1e-8 or smaller (a saturated sigmoid's, say): early in
training torch's rule still steps them by about λ, fairseq's by less.

This is torch.optim.AdamW as torch ships it (its defaults otherwise), behind fairseq's usual
options: ``--lr``, ``--adam-betas``, ``--adam-eps``, ``--weight-decay``.
"""

from dataclasses import dataclass, field
from typing import Any, List

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim import FairseqOptimizer, register_optimizer
from fairseq.optim.adam import FairseqAdam
from omegaconf import II


@dataclass
class TorchAdamWConfig(FairseqDataclass):
    adam_betas: Any = field(default=(0.9, 0.999), metadata={"help": "betas (β₁, β₂) of AdamW"})
    adam_eps: float = field(default=1e-8, metadata={"help": "ε of AdamW, added after the bias correction"})
    weight_decay: float = field(default=0.0, metadata={"help": "decoupled weight decay"})
    lr: List[float] = II("optimization.lr")


@register_optimizer("torch_adamw", dataclass=TorchAdamWConfig)
class TorchAdamW(FairseqOptimizer):
    def __init__(self, cfg: TorchAdamWConfig, params):
        super().__init__(cfg)
        self._optimizer = torch.optim.AdamW(params, **self.optimizer_config)

    @property
    def optimizer_config(self):
        """The keyword arguments of torch.optim.AdamW, read from the options as fairseq's adam reads
        them (lr, betas, eps, weight_decay); fairseq also uses them to override the values stored
        in a checkpoint when training resumes."""
        config = FairseqAdam.optimizer_config.fget(self)
        return dict(config, betas=tuple(config["betas"]))

    @property
    def supports_flat_params(self):
        return True
