"""Reference positions (``--reference``): where the location focus starts its step from, given
the previously attended position pa_{t-1} (pa_0 = 0, the START position).  Registered in
``REFERENCES``.

    previous       ref_t = pa_{t-1}                                      (OneStep, Mono, RMono)
    gated          ref_t = sigmoid(f_gate(l_t)) pa_{t-1} + sigmoid(f_bias(l_t))   (LocAttn)
    initial-bias   ref_1 = sigmoid(f_bias(l_1)), ref_t = pa_{t-1} after       (LocAttn S)
"""

from typing import Mapping

import torch

from ..registry import ReferencePosition, register_reference


@register_reference("previous")
class PreviousPosition(ReferencePosition):
    def forward(self, heads: Mapping[str, torch.Tensor], previous: torch.Tensor, step: int) -> torch.Tensor:
        return previous

    def compiled_form(self):
        return "previous"


@register_reference("gated")
class GatedPosition(ReferencePosition):
    heads = ("bias", "gate")

    def forward(self, heads: Mapping[str, torch.Tensor], previous: torch.Tensor, step: int) -> torch.Tensor:
        return torch.sigmoid(heads["gate"]) * previous + torch.sigmoid(heads["bias"])

    def compiled_form(self):
        return "gated"


@register_reference("initial-bias")
class InitialBiasPosition(ReferencePosition):
    heads = ("bias",)

    def forward(self, heads: Mapping[str, torch.Tensor], previous: torch.Tensor, step: int) -> torch.Tensor:
        return torch.sigmoid(heads["bias"]) if step == 1 else previous

    def compiled_form(self):
        return "initial-bias"
