"""Step activations (``--step-activation``): how far the location focus moves from its
reference, steps_t = act(rho_t), in source positions (one step = 1 / max(1, L - 1) of the
normalised positions).  Registered in ``STEP_ACTIVATIONS``.

    sigmoid     sigmoid(T rho): at most one position a step          (OneStep)
    mono        s ReLU(rho) + (1 - s) sigmoid(T rho), s = sigmoid(p)   (MonoAttn; p learned)
    relu        ReLU(rho): any number of positions forward            (RMonoAttn)
    softstair   floor(rho) + sigmoid(tau (rho - floor(rho) - 0.5))    (LocAttn)
    none        rho, the raw step                                     (OneStep - Sigmoid)
"""

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..registry import TEMPERATURE, StepActivation, register_step_activation


def softstair(x: torch.Tensor, temperature: float) -> torch.Tensor:
    """softstair(x) = floor(x) + sigmoid(tau * (x - floor(x) - 0.5)): pushes x to an integer."""
    floor = torch.floor(x)
    return floor + torch.sigmoid(temperature * (x - floor - 0.5))


@dataclass
class SigmoidStepSettings:
    step_temperature: float = field(default=5.0, metadata={"help": "T in sigmoid(T * rho) steps", **TEMPERATURE})


@dataclass
class MonoStepSettings(SigmoidStepSettings):
    mono_gate_init: float = field(default=20.0, metadata={"help": "initial logit p of Mono's ReLU gate s = sigmoid(p)"})


@dataclass
class SoftstairStepSettings:
    softstair_temperature: float = field(default=20.0, metadata={"help": "softstair temperature tau", **TEMPERATURE})


@register_step_activation("sigmoid", settings=SigmoidStepSettings)
class SigmoidStep(StepActivation):
    def __init__(self, settings: SigmoidStepSettings):
        super().__init__()
        self.temperature = settings.step_temperature

    def forward(self, rho: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.temperature * rho)

    def compiled_form(self):
        return "sigmoid", self.temperature, None


@register_step_activation("mono", settings=MonoStepSettings)
class MonoStep(StepActivation):
    def __init__(self, settings: MonoStepSettings):
        super().__init__()
        self.temperature = settings.step_temperature
        self.gate_logit = nn.Parameter(torch.tensor(float(settings.mono_gate_init)))  # p

    def forward(self, rho: torch.Tensor) -> torch.Tensor:
        bounded = torch.sigmoid(self.temperature * rho)
        return bounded + torch.sigmoid(self.gate_logit) * (F.relu(rho) - bounded)  # = s ReLU + (1 - s) sigmoid

    def compiled_form(self):
        return "mono", self.temperature, self.gate_logit


@register_step_activation("relu")
class ReluStep(StepActivation):
    def forward(self, rho: torch.Tensor) -> torch.Tensor:
        return F.relu(rho)

    def compiled_form(self):
        return "relu", 0.0, None


@register_step_activation("softstair", settings=SoftstairStepSettings)
class SoftstairStep(StepActivation):
    def __init__(self, settings: SoftstairStepSettings):
        super().__init__()
        self.temperature = settings.softstair_temperature

    def forward(self, rho: torch.Tensor) -> torch.Tensor:
        return softstair(rho, self.temperature)

    def compiled_form(self):
        return "softstair", self.temperature, None


@register_step_activation("none")
class RawStep(StepActivation):
    def forward(self, rho: torch.Tensor) -> torch.Tensor:
        return rho

    def compiled_form(self):
        return "none", 0.0, None
