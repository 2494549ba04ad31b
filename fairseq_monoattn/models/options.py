"""Every option of the GRU encoder-decoder, its default and its allowed values, in one place.

This module does not import fairseq (the commands that read records, ``aggregate`` and
``sweep status``, use it to tell which model a command builds); ``gru_seq2seq.py`` turns the
options into the model's ``FairseqDataclass``.

The options are the fields of :class:`GRUSeq2SeqOptions` followed by the settings of every
entry registered in the attention's registries (``registry.py``): registering an entry adds
its settings as options.  A choice option holds a name; which names are valid is read from
its registry (or its fixed list) when the model is built, so a user's entries count.
"""

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence

from .. import modules  # noqa: F401  (registers the plugin's own attention entries)
from ..errors import PluginError, install_excepthook
from ..limits import NO_LENGTH_LIMIT
from ..modules.cross_attention import LINEAR_INITS, LOCATION_HEAD_INITS, POSITION_REFERENCES, SCORER_INITS, VALUE_PATHS
from ..registry import ENTRY_OPTIONS, REGISTRIES, RESERVED_OPTIONS, TEMPERATURE, entry_options_read

EMBEDDING_INITS = ("scaled-normal", "kaiming-fan-out")
DECODER_STARTS = ("eos", "bos")
BOUNDARY_INITS = ("normal", "zeros")


class OptionError(PluginError, ValueError):
    """A model option with a value it cannot take; the message names the option."""


def option(
    default,
    help: str,
    choices: Optional[Sequence[str]] = None,
    registry: Optional[str] = None,
    check: Optional[Callable[[Any], bool]] = None,
    requirement: str = "",
):
    """A field with its help text; ``choices`` (a fixed list) or ``registry`` (the name of the
    registry whose entries are the valid values); ``check``: a test every value must pass,
    described by ``requirement`` (e.g. "> 0")."""
    return field(
        default=default,
        metadata={"help": help, "choices": choices, "registry": registry, "check": check, "requirement": requirement},
    )


def positive(value) -> bool:
    return value > 0


def non_negative(value) -> bool:
    return value >= 0


def probability(value) -> bool:
    return 0 <= value < 1


@dataclass
class GRUSeq2SeqOptions:
    # sizes
    encoder_embed_dim: int = option(64, "encoder embedding size", check=positive, requirement="> 0")
    encoder_hidden_size: int = option(64, "GRU size per direction", check=positive, requirement="> 0")
    encoder_layers: int = option(1, "bidirectional GRU layers", check=positive, requirement="> 0")
    decoder_embed_dim: int = option(64, "decoder embedding size", check=positive, requirement="> 0")
    decoder_hidden_size: Optional[int] = option(
        None, "decoder GRU size (default: 2 x --encoder-hidden-size)", check=positive, requirement="> 0"
    )
    decoder_layers: Optional[int] = option(
        None, "decoder GRU layers (default: --encoder-layers)", check=positive, requirement="> 0"
    )
    attention_dim: Optional[int] = option(
        None, "key/query/value size (default: the decoder hidden size)", check=positive, requirement="> 0"
    )
    dropout: float = option(0.5, "dropout on the encoder outputs", check=probability, requirement="in [0, 1)")
    encoder_state_noise: float = option(
        0.0,
        "in training, Gaussian noise of this standard deviation added to the encoder GRUs' state after every "
        "step (beyond the paper: a state that integrates over the steps, such as a count of them, cannot carry "
        "it through the noise; docs/results/headline.md)",
        check=non_negative,
        requirement=">= 0",
    )
    decoder_dropout: float = option(0.0, "dropout on the decoder outputs", check=probability, requirement="in [0, 1)")
    # embeddings and initialisation
    share_decoder_input_output_embed: bool = option(True, "tie the output projection to the target embeddings")
    share_all_embeddings: bool = option(
        False,
        "one embedding matrix for the source, the decoder input and the output (needs one dictionary "
        "for source and target, see the data's joined dictionary)",
    )
    embedding_init: str = option(
        "scaled-normal",
        "scaled-normal: N(0, 1/dim) (fairseq's habit); kaiming-fan-out: N(0, 2/vocabulary size) (the authors' release)",
        choices=EMBEDDING_INITS,
    )
    boundary_init: str = option(
        "normal", "initial START / END vectors: N(0, 1/dim) or zeros (the authors' release)", choices=BOUNDARY_INITS
    )
    linear_init: str = option(
        "pytorch",
        "attention and output layers: torch's default init, or Xavier-uniform without the biases "
        "the authors' release leaves out",
        choices=LINEAR_INITS,
    )
    scorer_init: str = option(
        "pytorch",
        "the content scorer's own weights (the relative scorer's W_r): torch's default init, or Xavier-uniform "
        "as the authors' release draws them",
        choices=SCORER_INITS,
    )
    source_eos: bool = option(True, "keep fairseq's source </s> as an encoder position between the tokens and END")
    decoder_start: str = option(
        "eos",
        "the decoder's first input: eos, fairseq's </s> (the row that also scores EOS when the output is tied to the "
        "embeddings), or bos, <s>, a row of its own as the authors' release's <sos>",
        choices=DECODER_STARTS,
    )
    # cross-attention
    attention_scoring: str = option(
        "content", "query-key scores (none: location attention alone)", registry="attention_scoring"
    )
    location_attention: bool = option(False, "use Gaussian location attention (mixed with the scores if both are on)")
    direction_gate: bool = option(False, "attend to g*e + (1-g)*reverse(e) instead of e")
    reference: str = option("previous", "reference position of the location focus", registry="reference")
    step_activation: str = option(
        "sigmoid", "activation of the step taken from the reference position", registry="step_activation"
    )
    clamp_center: bool = option(False, "leaky-clamp the location centre into [0, 1]")
    position_reference: str = option(
        "mixed", "previous position from the mixed attention or the location-only one (PR)", choices=POSITION_REFERENCES
    )
    location_normalization: str = option(
        "softmax",
        "softmax over real positions, or the release's exp / (sum + 1e-20), whose weights "
        "underflow to zero (and reset the focus to START) far past the last position",
        registry="location_normalization",
    )
    location_projection: bool = option(
        False,
        "read the location heads off the paper's intermediate l_t = f_l(h) (a d x d layer) instead of directly off h",
    )
    location_head_init: str = option(
        "per-head",
        "with --linear-init xavier: draw each location head vector on its own fan, or the "
        "step/gate/bias vectors as one (d, k) tensor as the release's LocAttn",
        choices=LOCATION_HEAD_INITS,
    )
    dwell_count: bool = option(
        False,
        "add w * c_{t-1} to the step logit, c the (soft) number of steps since the focus last stepped, w "
        "learned: the location focus counts how long it has stayed on a position (beyond the paper)",
    )
    dwell_init: float = option(
        0.0,
        "initial w of --dwell-count (0: the model starts as the one without the count; w > 0 starts it "
        "stepping once it has stayed)",
    )
    sigma_min: float = option(0.27, "minimum width of the location focus", check=positive, requirement="> 0")
    clamp_slope: float = option(0.01, "leaky slope of the centre clamp", check=non_negative, requirement=">= 0")
    mix_temperature: float = option(5.0, "beta in the content/location mix", **TEMPERATURE)
    attention_query_bias: bool = option(
        True, "the content query q = W_q h + b_q has a trainable bias (False: none, as the authors' release)"
    )
    value_path: str = option(
        "folded",
        "after LeakyReLU(W_1 e): one matrix (folded: W_o W_v multiplied out) or W_v then W_o as the authors' "
        "release (two: the same function, trained differently)",
        choices=VALUE_PATHS,
    )
    direction_temperature: float = option(5.0, "beta in the direction gate", **TEMPERATURE)
    direction_gate_hard: bool = option(
        False, "the direction gate's forward pass uses g rounded to 0 or 1 (straight-through: the soft g's gradient)"
    )
    direction_gate_keep_end: bool = option(
        False, "reverse(e) keeps the last encoder position (the source's </s>) last and reverses the ones before it"
    )
    max_source_positions: int = option(NO_LENGTH_LIMIT, "maximum source length", check=positive, requirement="> 0")
    max_target_positions: int = option(NO_LENGTH_LIMIT, "maximum target length", check=positive, requirement="> 0")


BASE_FIELDS: Dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(GRUSeq2SeqOptions)}
RESERVED_OPTIONS.update(BASE_FIELDS)
# read only with location attention (the entries' own settings follow their entry)
LOCATION_OPTIONS = (
    "reference",
    "step_activation",
    "clamp_center",
    "location_normalization",
    "location_projection",
    "location_head_init",
    "dwell_count",
    "dwell_init",
    "sigma_min",
    "clamp_slope",
)


def option_fields() -> Dict[str, dataclasses.Field]:
    """Every option, in order: the base options, then the settings of every registered entry."""
    return {**BASE_FIELDS, **{name: f for name, f in ENTRY_OPTIONS.items() if name not in BASE_FIELDS}}


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def option_defaults() -> Dict[str, Any]:
    """{option: default} of every option."""
    return {name: _default(f) for name, f in option_fields().items()}


def valid_choices(name: str) -> Optional[List[str]]:
    """The values a choice option takes now (a registry's entries, the user's included), or None."""
    f = option_fields().get(name)
    if f is None:
        return None
    if f.metadata.get("registry"):
        return REGISTRIES[f.metadata["registry"]].names()
    choices = f.metadata.get("choices")
    return list(choices) if choices else None


def check_options(values: Mapping[str, Any]) -> None:
    """Raise OptionError naming the first option whose value is not allowed (an unknown name of a
    choice, a value out of range), or SettingsError where a chosen entry's settings dataclass
    refuses its values; options ``values`` lacks are not checked."""
    for name, f in option_fields().items():
        value = values.get(name)
        if value is None:  # unset, or an optional size left to its rule
            continue
        flag = "--" + name.replace("_", "-")
        choices = valid_choices(name)
        if choices is not None and value not in choices:
            raise OptionError(f"{flag} must be one of {', '.join(choices)}, got {value!r}")
        check = f.metadata.get("check")
        if check is not None and not check(value):
            raise OptionError(f"{flag} must be {f.metadata['requirement']}, got {value!r}")
    for option_name, registry in REGISTRIES.items():  # the chosen entries' own tests of their settings
        if values.get(option_name) in registry.entries:
            registry.settings_for(values[option_name], values)  # SettingsError names the entry and option


def preset_error(name: str, message: str) -> "OptionError":
    """The OptionError refusing preset ``name``, its message naming the preset.  A package registering
    a preset uses the plugin, so this installs the plugin's one-line error hook first: under fairseq's
    commands (``--user-dir`` imports the package) the refusal is one line."""
    install_excepthook()
    return OptionError(f"preset {name!r}: {message}")


def check_preset(name: str, values: Mapping[str, Any], known: Optional[Iterable[str]] = None) -> None:
    """``check_options`` of a preset's values when it is registered (an unknown entry name, a value
    out of range would otherwise wait until the preset is used), and, given the options its model
    has (``known``), that it sets no other; the error names the preset."""
    if known is not None:
        unknown = sorted(set(values) - set(known))
        if unknown:
            flags = ", ".join("--" + option.replace("_", "-") for option in unknown)
            raise preset_error(name, f"unknown options {flags}")
    try:
        check_options(values)
    except PluginError as error:  # OptionError, or an entry's SettingsError
        raise preset_error(name, str(error)) from None


def resolved_options(values: Mapping[str, Any]) -> Dict[str, Any]:
    """Every option: the given values (None counts as unset) over the defaults."""
    resolved = option_defaults()
    resolved.update({k: v for k, v in values.items() if v is not None or k not in resolved})
    return resolved


def unused_options(cfg: Mapping[str, Any]) -> set:
    """The options of ``cfg`` (a model config as a dict) that the model it describes never reads,
    so that no value of theirs changes it: the location options of a content-only model, the mix
    temperature and position reference of a model that mixes nothing, the settings of entries not
    chosen, the head init where every location vector keeps its own fan, ..."""
    cfg = resolved_options(cfg)  # a checkpoint older than an option held its default
    unused = set()
    location = cfg["location_attention"]
    mixes = location and cfg["attention_scoring"] != "none"
    chosen = {"attention_scoring": cfg["attention_scoring"]}
    if location:
        chosen.update({key: cfg[key] for key in ("step_activation", "reference", "location_normalization")})
    else:
        unused.update(LOCATION_OPTIONS)
    unused.update(set(ENTRY_OPTIONS) - entry_options_read(chosen))
    if not mixes:
        unused.update(("mix_temperature", "position_reference"))
    if cfg["attention_scoring"] == "none":
        unused.update(("attention_query_bias", "scorer_init"))
    if not cfg["clamp_center"]:
        unused.add("clamp_slope")
    # "joint" and "per-head" differ only for xavier and more than the step vector (a reference
    # that reads heads of its own)
    reference = REGISTRIES["reference"].entries.get(cfg["reference"])
    if cfg["linear_init"] != "xavier" or reference is None or not reference.cls.heads:
        unused.add("location_head_init")
    if not cfg["direction_gate"]:
        unused.update(("direction_temperature", "direction_gate_hard", "direction_gate_keep_end"))
    if not cfg.get("dwell_count"):
        unused.add("dwell_init")
    return unused


# --- the command line ---------------------------------------------------------------------------


def _checked(convert: Callable[[str], Any], f: dataclasses.Field) -> Callable[[str], Any]:
    """``convert``, refusing a value the option's check rejects (argparse names the option)."""
    check = f.metadata.get("check")
    if check is None:
        return convert

    def converter(text: str):
        value = convert(text)
        if not check(value):
            raise argparse.ArgumentTypeError(f"must be {f.metadata['requirement']}, got {text}")
        return value

    converter.__name__ = getattr(convert, "__name__", "value")  # argparse names the type in its messages
    return converter


def add_option_arguments(
    parser: argparse.ArgumentParser, eval_bool: Callable[[str], Any], only: Optional[set] = None
) -> None:
    """Every option as a command-line argument without a default (so that a preset can set it).
    Booleans take a value (``--direction-gate False``) so that a preset's True can be switched
    off; a choice lists the names registered when the parser is made; a value out of range is
    refused by the parser, naming the option.  ``only``: these options alone."""
    for name, f in option_fields().items():
        if only is not None and name not in only:
            continue
        flag = "--" + name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        default = _default(f)
        help_text += f" (default: {default})" if help_text else ""
        choices = valid_choices(name)
        kind = f.type
        if kind is bool:
            parser.add_argument(flag, type=eval_bool, metavar="BOOL", help=help_text)
        elif choices is not None:
            parser.add_argument(flag, choices=choices, help=help_text)
        else:
            inner = getattr(kind, "__args__", (kind,))[0]  # Optional[int] -> int
            parser.add_argument(flag, type=_checked(inner, f), metavar="N" if inner is int else "F", help=help_text)


def parse_bool(text: str) -> bool:
    """fairseq's eval_bool for the options it reads: True/False (and 1/0)."""
    value = {"true": True, "false": False, "1": True, "0": False}.get(str(text).strip().lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected True or False, got {text!r}")
    return value


def explicit_options(argv: Iterable[str]) -> Dict[str, Any]:
    """The model options a fairseq-train option list sets explicitly ({option: value}); other
    options are ignored.  Parsed as fairseq parses them (no abbreviations, the last value wins)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_option_arguments(parser, parse_bool)
    known, _ = parser.parse_known_args(list(argv))
    return {key: value for key, value in vars(known).items() if value is not None}
