"""The attention's orthogonal choices, each a registry of named entries a user can add to.

A cross-attention of this plugin is put together from a few independent choices:

=====================  ==========================  ==========================================
registry               model option                what an entry computes
=====================  ==========================  ==========================================
``SCORERS``            ``--attention-scoring``     content scores c_t (B, S) of a query and the keys
``STEP_ACTIVATIONS``   ``--step-activation``       the step taken from the reference, act(rho_t)
``REFERENCES``         ``--reference``             the reference position ref_t the step starts from
``NORMALIZATIONS``     ``--location-normalization``  location weights lambda_t from the log-Gaussian
=====================  ==========================  ==========================================

An entry is a small ``nn.Module`` registered by name, optionally with a dataclass of settings
of its own::

    @dataclass
    class TanhStepSettings:
        tanh_step_scale: float = field(default=1.0, metadata={"help": "the largest step: scale * (1 + tanh(rho)) / 2"})

    @register_step_activation("tanh", settings=TanhStepSettings)
    class TanhStep(StepActivation):
        def __init__(self, settings: TanhStepSettings):
            super().__init__()
            self.scale = settings.tanh_step_scale

        def forward(self, rho):
            return self.scale * (1 + torch.tanh(rho)) / 2

Every field of a settings dataclass becomes a model option (``--tanh-step-scale``, hydra
``+model.tanh_step_scale=2``), recorded in checkpoints like every other option.  Option names
are shared by the whole model, so a field name may be declared by two entries only with the
same type and default (``step_temperature`` is read by the sigmoid and the mono steps).  The
model config holds the chosen *names*; they are checked against the registries when a model
is built, so an entry registered by a user's own package (imported through ``--user-dir``)
is accepted by fairseq-train, fairseq-hydra-train, fairseq-generate and the plugin's commands.
"""

import dataclasses
import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import torch
from torch import nn

from .errors import PluginError


class UnknownChoice(PluginError, ValueError):
    """A name no registry entry has; the message names the option and the known names."""


class SettingsError(PluginError, ValueError):
    """An entry's settings dataclass refused its values; the message names the entry and the option."""


def positive_finite(value) -> bool:
    """A temperature's test: > 0 and finite (0 makes the sigmoid a constant 1/2, a negative one
    turns it around, inf gives NaN gradients once training starts)."""
    return value > 0 and math.isfinite(value)


# a settings field's metadata may carry a test of its values (as the model's own options do):
# ``field(default=5.0, metadata={"help": ..., **TEMPERATURE})``; every value of the option, from
# the command line, hydra or a preset, must pass it when the model is built
TEMPERATURE = {"check": positive_finite, "requirement": "> 0 and finite"}


# --- the interfaces ---------------------------------------------------------------------------


class Scorer(nn.Module):
    """Content scores of the decoder's query against the keys, before the softmax.

    ``prepare(keys)`` runs once per sequence (keys (B, S, D), batch-first) and returns the
    per-sequence tensors the scorer needs, cached while decoding; ``forward(query, memory,
    step)`` gives the (B, S) scores of decoder step ``step`` (1-based) for the query (B, D).
    Key position i is the 0-based index in the wrapped source (START at 0)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def prepare(self, keys: torch.Tensor) -> Dict[str, torch.Tensor]:
        raise NotImplementedError

    def forward(self, query: torch.Tensor, memory: Dict[str, torch.Tensor], step: int) -> torch.Tensor:
        raise NotImplementedError

    def forward_all(self, queries: torch.Tensor, memory: Dict[str, torch.Tensor], first_step: int) -> torch.Tensor:
        """Scores of many steps at once, queries (B, T, D) -> (B, T, S), the t-th being step first_step + t
        (a Transformer decoder has every step's query at once).  This default calls ``forward``
        step by step; a scorer may compute them together."""
        return torch.stack([self(q, memory, first_step + t) for t, q in enumerate(queries.unbind(1))], dim=1)

    def compiled_form(self) -> Optional[str]:
        """The name of the same scorer in the C++ decoder loop (csrc/decoder_loop.cpp), which knows the
        built-in content scorer; None: the decoder runs its steps in Python (as for steps)."""
        return None

    def xavier_init(self) -> None:
        """``--scorer-init xavier``: draw the scorer's own weights as the authors' release draws every
        projection of its attention, Xavier-uniform on each weight's own shape.  This default draws
        every parameter of two or more dimensions and leaves vectors (the relative scorer's u and v)
        as they are; a scorer whose weights need another draw overrides it."""
        with torch.no_grad():
            for parameter in self.parameters():
                if parameter.dim() >= 2:
                    nn.init.xavier_uniform_(parameter)


class StepActivation(nn.Module):
    """steps_t = act(rho_t): how far (in source positions) the focus moves from its reference."""

    def forward(self, rho: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def compiled_form(self) -> Optional[Tuple[str, float, Optional[torch.Tensor]]]:
        """(name, temperature, gate logit or None) of the same activation in the C++ location node
        (csrc/step_nodes.cpp), which knows the built-in entries; None: ``forward`` runs.  Only a class
        that defines it itself is asked (see ``compiled_form``), so a subclass that changes
        ``forward`` runs it."""
        return None


class ReferencePosition(nn.Module):
    """ref_t, the position the step starts from, from the previously attended position
    pa_{t-1} (B,) and, if the reference needs them, scalar heads read off the query state:
    ``heads`` names them (beyond the step and width heads every location focus reads)."""

    heads: Tuple[str, ...] = ()

    def forward(self, heads: Mapping[str, torch.Tensor], previous: torch.Tensor, step: int) -> torch.Tensor:
        raise NotImplementedError

    def compiled_form(self) -> Optional[str]:
        """The name of the same reference in the C++ location node, or None (as for steps)."""
        return None


class FocusNormalization(nn.Module):
    """lambda_t (B, S) from the log-Gaussian -(norm(i) - mu_t)^2 / (2 sigma_t^2) over the
    positions, ``padding_mask`` (B, S) True on padding (which must get weight 0)."""

    def forward(self, log_gaussian: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def focus(
        self, positions: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor, padding_mask: torch.Tensor
    ) -> torch.Tensor:
        """lambda_t from the Gaussian's centre mu (B,) and width sigma (B,) over the positions
        (B, S): ``forward`` of -(norm(i) - mu)^2 / (2 sigma^2).  An entry may compute both at once."""
        z = (positions - mu.unsqueeze(1)) / sigma.unsqueeze(1)
        return self(-0.5 * z * z, padding_mask)

    def compiled_form(self) -> Optional[str]:
        """The name of the same normalisation in the C++ location node, or None (as for steps)."""
        return None


def compiled_form(entry: nn.Module):
    """``entry.compiled_form()`` where the entry's own class defines it, else None: a subclass of a
    built-in entry may compute something else, so it does not inherit the built-in's C++ form."""
    return entry.compiled_form() if "compiled_form" in type(entry).__dict__ else None


# --- registries -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    cls: type
    settings: Optional[type]  # a dataclass of the entry's own options, or None

    @property
    def option_names(self) -> Tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.settings)) if self.settings else ()


# every option declared by a registered entry: name -> its dataclass field (for clash checks and
# for the model config, which takes these fields as options of its own)
ENTRY_OPTIONS: Dict[str, dataclasses.Field] = {}
# names the model config itself uses, which no entry may declare
RESERVED_OPTIONS: set = set()
# called after every registration (the model config adds the new entry's options)
_LISTENERS: List[Callable[[], None]] = []


def on_registration(listener: Callable[[], None]) -> None:
    _LISTENERS.append(listener)


def _same_field(a: dataclasses.Field, b: dataclasses.Field) -> bool:
    return a.type == b.type and a.default == b.default and a.default_factory == b.default_factory


class Registry:
    """Named entries of one choice, in registration order."""

    def __init__(
        self,
        option: str,
        description: str,
        base_class: type,
        extra_names: Tuple[str, ...] = (),
        entry_options: Optional[Dict[str, dataclasses.Field]] = None,
    ):
        """``entry_options``: where the entries' settings fields are collected; by default the
        attention's ``ENTRY_OPTIONS``, which the models take as options (and whose listeners run
        on each registration).  A registry of another part of a model (the Transformer's position
        schemes, ``modules/position_schemes.py``) keeps a table of its own."""
        self.option = option  # the model option that holds the chosen name
        self.description = description
        self.base_class = base_class
        self.extra_names = extra_names  # names the model handles itself (e.g. scoring "none")
        self.entries: Dict[str, Entry] = {}
        self.entry_options = ENTRY_OPTIONS if entry_options is None else entry_options

    @property
    def flag(self) -> str:
        return "--" + self.option.replace("_", "-")

    def names(self) -> List[str]:
        return [*self.extra_names, *self.entries]

    def __contains__(self, name: str) -> bool:
        return name in self.entries or name in self.extra_names

    def check(self, name: str) -> str:
        if name not in self:
            raise UnknownChoice(f"{self.flag} must be one of {', '.join(self.names())}, got {name!r}")
        return name

    def entry(self, name: str) -> Entry:
        self.check(name)
        return self.entries[name]

    def register(self, name: str, settings: Optional[type] = None):
        """Class decorator: register ``cls`` under ``name``, with ``settings`` (a dataclass whose
        fields become model options) or none."""

        def register_class(cls):
            if name in self:
                raise ValueError(f"{self.flag}: {name!r} is registered already")
            if not issubclass(cls, self.base_class):
                raise TypeError(f"{cls.__name__} must extend {self.base_class.__name__} to be a {self.description}")
            if settings is not None:
                if not dataclasses.is_dataclass(settings):
                    raise TypeError(f"the settings of {self.flag} {name!r} must be a dataclass")
                for f in dataclasses.fields(settings):
                    if f.name in RESERVED_OPTIONS:
                        raise ValueError(f"{settings.__name__}.{f.name}: the model has an option of that name")
                    known = self.entry_options.get(f.name)
                    if known is not None and not _same_field(known, f):
                        raise ValueError(
                            f"{settings.__name__}.{f.name}: another entry declares the option "
                            f"{f.name!r} with another type or default"
                        )
                for f in dataclasses.fields(settings):
                    self.entry_options.setdefault(f.name, f)
            self.entries[name] = Entry(name, cls, settings)
            if self.entry_options is ENTRY_OPTIONS:
                for listener in _LISTENERS:
                    listener()
            return cls

        return register_class

    def settings_for(self, name: str, options: Any) -> Optional[Any]:
        """The entry's settings, read off ``options`` (a model config: attributes or a mapping;
        a missing value takes the field's default)."""
        entry = self.entry(name)
        if entry.settings is None:
            return None
        values = {}
        for f in dataclasses.fields(entry.settings):
            value = options.get(f.name) if isinstance(options, Mapping) else getattr(options, f.name, None)
            if value is not None:
                values[f.name] = value
        try:
            return entry.settings(**values)
        except (TypeError, ValueError, AssertionError) as error:  # a user's __post_init__ refusing a value
            raise SettingsError(f"{self.flag} {name}: {settings_message(entry, values, error)}") from None

    def build(self, name: str, options: Any, **kwargs) -> nn.Module:
        """An instance of the entry ``name``: ``cls(settings, **kwargs)`` when it has settings,
        else ``cls(**kwargs)``."""
        entry = self.entry(name)
        settings = self.settings_for(name, options)
        return entry.cls(**kwargs) if settings is None else entry.cls(settings, **kwargs)


def settings_message(entry: Entry, values: Mapping[str, Any], error: Exception) -> str:
    """``error`` of ``entry``'s settings as one line naming the option it is about: the first of
    the entry's options that the message names, else every option given."""
    text = " ".join(str(error).split()) or type(error).__name__
    flags = {name: "--" + name.replace("_", "-") for name in entry.option_names}
    named = [name for name in flags if name in text or flags[name] in text]
    if named:
        return f"{flags[named[0]]} {values.get(named[0])!r}: {text}"
    given = ", ".join(f"{flags[name]} {value!r}" for name, value in values.items() if name in flags)
    return f"{entry.settings.__name__} refuses {given or 'its defaults'}: {text}"


SCORERS = Registry("attention_scoring", "content scorer", Scorer, extra_names=("none",))
STEP_ACTIVATIONS = Registry("step_activation", "step activation", StepActivation)
REFERENCES = Registry("reference", "reference position", ReferencePosition)
NORMALIZATIONS = Registry("location_normalization", "focus normalisation", FocusNormalization)
REGISTRIES: Dict[str, Registry] = {r.option: r for r in (SCORERS, STEP_ACTIVATIONS, REFERENCES, NORMALIZATIONS)}

register_scorer = SCORERS.register
register_step_activation = STEP_ACTIVATIONS.register
register_reference = REFERENCES.register
register_normalization = NORMALIZATIONS.register


def entry_options_read(choices: Mapping[str, str]) -> set:
    """The entry options the chosen entries read: ``choices`` maps a registry's model option to
    the chosen name (a registry left out, or a name it does not know, reads none)."""
    read = set()
    for option, name in choices.items():
        registry = REGISTRIES.get(option)
        if registry is not None and name in registry.entries:
            read.update(registry.entries[name].option_names)
    return read


__all__ = [
    "Scorer",
    "StepActivation",
    "ReferencePosition",
    "FocusNormalization",
    "Registry",
    "Entry",
    "UnknownChoice",
    "SCORERS",
    "STEP_ACTIVATIONS",
    "REFERENCES",
    "NORMALIZATIONS",
    "REGISTRIES",
    "register_scorer",
    "register_step_activation",
    "register_reference",
    "register_normalization",
    "on_registration",
]
