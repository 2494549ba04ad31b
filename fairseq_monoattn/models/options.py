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
CONVENTION_NAMES = ("plugin", "presets", "release")  # the values of --conventions (CONVENTIONS below)


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
    # the authors' conventions, as one switch (CONVENTIONS below)
    conventions: str = option(
        "plugin",
        "how the model is initialised and fed, as one group: plugin (fairseq's habits), presets (the release's "
        "ways that the paper's presets train with) or release (every way the authors' release computes its "
        "models); each option of the group given on its own overrides its value (docs/models.md)",
        choices=CONVENTION_NAMES,
    )


BASE_FIELDS: Dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(GRUSeq2SeqOptions)}
RESERVED_OPTIONS.update(BASE_FIELDS)

# --- the Transformer's own options (transformer_monoattn.py) -------------------------------------

LOCATION_LAYERS = ("none", "last", "all", "shared")
GATE_SUMMARIES = ("mean", "none")


@dataclass
class TransformerLocationOptions:
    """The options of ``transformer_location`` beyond fairseq's Transformer's and the cross-attention's."""

    location_layers: str = option(
        "last",
        "decoder layers with location attention: the last, all (a focus each), shared (all, one focus), none",
        choices=LOCATION_LAYERS,
    )
    decoder_self_attention_window: int = option(
        0, "self-attention over the last K decoder positions (0: all)", check=non_negative, requirement=">= 0"
    )
    decoder_recency_bias: float = option(
        0.0, "subtract M (i - j) from decoder self-attention scores (0: none)", check=non_negative, requirement=">= 0"
    )
    decoder_recency_exempt_start: bool = option(
        False, "no recency bias on the decoder's first position (the start symbol)"
    )
    direction_gate_summary: str = option(
        "mean",
        "what the direction gate reads: the mean of the encoder's outputs, or none (one learned g)",
        choices=GATE_SUMMARIES,
    )


TRANSFORMER_FIELDS: Dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(TransformerLocationOptions)}
# what the Transformer fixes of the cross-attention's options (its attention size is its width, set when built)
TRANSFORMER_FIXED = dict(linear_init="pytorch", location_head_init="per-head", scorer_init="pytorch")


# --- the authors' conventions: one switch for the group ------------------------------------------

# The options by which the authors' release initialises and feeds its models where fairseq's habits
# differ.  ``--conventions`` sets them all at once; each one given on its own (the command line, a
# preset, hydra) overrides the group's value for it.
CONVENTION_OPTIONS = (
    "embedding_init",
    "boundary_init",
    "linear_init",
    "scorer_init",
    "source_eos",
    "decoder_start",
    "location_projection",
    "location_head_init",
    "attention_query_bias",
    "value_path",
    "location_normalization",
)
RELEASE = dict(
    embedding_init="kaiming-fan-out",  # N(0, 2 / vocabulary size)
    boundary_init="zeros",  # START / END start at zero
    linear_init="xavier",  # one Xavier-initialised layer per role, no biases where the release has none
    scorer_init="xavier",  # the relative scorer's W_r too
    source_eos=False,  # no </s> at the end of the source
    decoder_start="bos",  # the decoder starts from <s> (the release's <sos>)
    location_projection=True,  # the location heads read off l_t = f_l(h)
    location_head_init="joint",  # LocAttn's step, gate and bias vectors drawn as one Xavier tensor
    attention_query_bias=False,  # no bias on the content query
    value_path="two",  # W_v then W_o, not their product
    location_normalization="sum-per-column",  # the Gaussian over its sum + 1e-20 per padded column
)
# ``presets``: the release's conventions that the paper's presets train with (RESULTS.md, "What in the
# training matters", has the runs behind each); five keep fairseq's habit, each an option:
# * the Gaussian divided by its sum: OneStep on ReCopy learned far slower with it (valid accuracy 0.05
#   after epoch 1 against 48 with the softmax, and 99.9 / 40 / 0.1 at 15 / 30 / 100 after 25 epochs),
#   and MonoAttn was no better with it;
# * the relative scorer's W_r drawn Xavier-uniform: every Relative and Bi-Relative cell of Table 2 has
#   the paper's verdict with torch's default draw; with the release's, seeds 1-3 on six tasks moved one
#   median away from the paper's verdict and one towards it, and the change would outdate 141 records
#   (docs/results/training-settings.md, "The relative scorer's projection");
# * the decoder's start from <s>, the query without a bias and the two-matrix value path: started from
#   <s>, the cells that fail by stopping too early do not come back to the paper's numbers (RESULTS.md,
#   "The release's conventions one at a time").
PRESETS_KEEP_PLUGIN = ("location_normalization", "scorer_init", "decoder_start", "attention_query_bias", "value_path")
CONVENTIONS: Dict[str, Dict[str, Any]] = {
    "plugin": {name: BASE_FIELDS[name].default for name in CONVENTION_OPTIONS},
    "presets": {
        name: BASE_FIELDS[name].default if name in PRESETS_KEEP_PLUGIN else RELEASE[name] for name in CONVENTION_OPTIONS
    },
    "release": RELEASE,
}
assert tuple(CONVENTIONS) == CONVENTION_NAMES and all(
    tuple(group) == CONVENTION_OPTIONS for group in CONVENTIONS.values()
)


def convention_values(values: Mapping[str, Any]) -> Dict[str, Any]:
    """The options of the conventions group that ``values`` (a model config as a mapping) leaves unset
    (missing or None), with the values of its ``conventions`` (``plugin`` when unset; an unknown name
    fills nothing, and ``check_options`` refuses it)."""
    group = CONVENTIONS.get(values.get("conventions") or "plugin", {})
    return {name: value for name, value in group.items() if values.get(name) is None}


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


def valid_choices(name: str, fields: Optional[Mapping[str, dataclasses.Field]] = None) -> Optional[List[str]]:
    """The values a choice option takes now (a registry's entries, the user's included), or None;
    ``fields``: where the option is declared (the GRU model's options by default)."""
    f = (option_fields() if fields is None else fields).get(name)
    if f is None:
        return None
    if f.metadata.get("registry"):
        return REGISTRIES[f.metadata["registry"]].names()
    choices = f.metadata.get("choices")
    return list(choices) if choices else None


def check_options(values: Mapping[str, Any], fields: Optional[Mapping[str, dataclasses.Field]] = None) -> None:
    """Raise OptionError naming the first option whose value is not allowed (an unknown name of a
    choice, a value out of range), or SettingsError where a chosen entry's settings dataclass
    refuses its values; options ``values`` lacks are not checked.  ``fields``: the options to check
    (the GRU model's by default)."""
    fields = option_fields() if fields is None else fields
    for name, f in fields.items():
        value = values.get(name)
        if value is None:  # unset, or an optional size left to its rule
            continue
        flag = "--" + name.replace("_", "-")
        choices = valid_choices(name, fields)
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
    """Every option: the given values (None counts as unset) over their conventions' group
    (``--conventions``) over the defaults."""
    resolved = option_defaults()
    resolved.update(convention_values(values))
    resolved.update({k: v for k, v in values.items() if v is not None or k not in resolved})
    return resolved


# --- what each builder reads ---------------------------------------------------------------------

# Each builder of gru_seq2seq.py states here the options it reads, as a function of the (resolved)
# options: a part the model does not have reads none of its options.  The chosen entries read their
# settings (their dataclass's fields, declared with the entry).  tests/test_fidelity_options.py builds
# every preset and every registered entry with a config that records what is read, and checks it
# against these declarations.


def model_reads(cfg: Mapping[str, Any]) -> set:
    """``GRUSeq2SeqModel.build_model`` but for the cross-attention: sizes, embeddings, encoder, decoder
    (and ``location_attention``, which says whether sorted batches warrant a warning)."""
    return {
        "encoder_embed_dim",
        "encoder_hidden_size",
        "encoder_layers",
        "decoder_embed_dim",
        "decoder_hidden_size",
        "decoder_layers",
        "dropout",
        "encoder_state_noise",
        "decoder_dropout",
        "share_decoder_input_output_embed",
        "share_all_embeddings",
        "embedding_init",
        "boundary_init",
        "source_eos",
        "decoder_start",
        "linear_init",
        "max_source_positions",
        "max_target_positions",
        "location_attention",
    }


def reference_heads(name: str) -> tuple:
    """The heads of their own that the reference entry ``name`` reads (() for an unknown name)."""
    entry = REGISTRIES["reference"].entries.get(name)
    return entry.cls.heads if entry is not None else ()


def cross_attention_reads(cfg: Mapping[str, Any]) -> set:
    """``build_cross_attention``: the attention's parts, each read only where the model has it."""
    reads = {"attention_scoring", "location_attention", "direction_gate", "attention_dim", "linear_init", "value_path"}
    location, scorer = cfg["location_attention"], cfg["attention_scoring"] != "none"
    chosen = {"attention_scoring": cfg["attention_scoring"]}
    if cfg["direction_gate"]:
        reads |= {"direction_temperature", "direction_gate_hard", "direction_gate_keep_end"}
    if location:
        reads |= {"reference", "step_activation", "location_normalization", "sigma_min", "clamp_center"}
        reads |= {"dwell_count", "location_projection"}
        reads |= {"clamp_slope"} if cfg["clamp_center"] else set()
        reads |= {"dwell_init"} if cfg["dwell_count"] else set()
        # "joint" and "per-head" differ only for xavier and more than the step vector
        reads |= (
            {"location_head_init"} if cfg["linear_init"] == "xavier" and reference_heads(cfg["reference"]) else set()
        )
        chosen.update({key: cfg[key] for key in ("step_activation", "reference", "location_normalization")})
    if scorer:
        reads |= {"attention_query_bias", "scorer_init"}
    if location and scorer:
        reads |= {"mix_temperature", "position_reference"}
    return reads | entry_options_read(chosen)


def options_read(cfg: Mapping[str, Any]) -> set:
    """The options the model ``cfg`` (a model config as a dict) describes is built from."""
    cfg = resolved_options(cfg)  # a checkpoint older than an option held its default
    return model_reads(cfg) | cross_attention_reads(cfg)


def unused_options(cfg: Mapping[str, Any]) -> set:
    """The options of ``cfg`` (a model config as a dict) that the model it describes never reads,
    so that no value of theirs changes it: the location options of a content-only model, the
    settings of entries not chosen, ``conventions`` (its group's options are read instead), ..."""
    return set(option_fields()) - options_read(cfg)


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
    parser: argparse.ArgumentParser,
    eval_bool: Callable[[str], Any],
    only: Optional[set] = None,
    conventions_group: Optional[Any] = None,
    fields: Optional[Mapping[str, dataclasses.Field]] = None,
) -> None:
    """Every option as a command-line argument without a default (so that a preset can set it).
    Booleans take a value (``--direction-gate False``) so that a preset's True can be switched
    off; a choice lists the names registered when the parser is made; a value out of range is
    refused by the parser, naming the option.  ``only``: these options alone.  With
    ``--conventions`` among them, the options of its group come last, each marked as part of it
    (in ``conventions_group``, an argument group of their own, where the caller has one).
    ``fields``: the options to add (the GRU model's by default)."""
    fields = option_fields() if fields is None else fields
    names = [name for name in fields if only is None or name in only]
    grouped = "conventions" in names
    if grouped:  # the group's options after the others, in the order of CONVENTION_OPTIONS
        names = [name for name in names if name not in CONVENTION_OPTIONS] + list(CONVENTION_OPTIONS)
    for name in names:
        f = fields[name]
        flag = "--" + name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        target = parser
        if grouped and name in CONVENTION_OPTIONS:
            values = ", ".join(f"{group} {values[name]}" for group, values in CONVENTIONS.items())
            help_text = f"part of --conventions (default: from it: {values}): {help_text}"
            target = conventions_group if conventions_group is not None else parser
        else:
            help_text += f" (default: {_default(f)})" if help_text and "(default:" not in help_text else ""
        choices = valid_choices(name, fields)
        kind = f.type
        if kind is bool:
            target.add_argument(flag, type=eval_bool, metavar="BOOL", help=help_text)
        elif choices is not None:
            target.add_argument(flag, choices=choices, help=help_text)
        else:
            inner = getattr(kind, "__args__", (kind,))[0]  # Optional[int] -> int
            target.add_argument(flag, type=_checked(inner, f), metavar="N" if inner is int else "F", help=help_text)


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
