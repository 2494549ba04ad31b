"""fairseq's Transformer with the plugin's location attention in its decoder.

The paper leaves Transformers to future work ("there are many ways to do so").  Here a decoder
layer's encoder attention is replaced by the plugin's cross-attention (``CrossAttention``: the
location focus alone, or mixed with content scores), so the choices are options:

* ``--location-layers``: which decoder layers attend by location: ``last`` (the others keep
  fairseq's multi-head encoder attention), ``all`` (each with a focus of its own), ``shared``
  (every layer, one focus: the first layer scans, the others read its focus, mixing their own
  content scores into it if they mix), or ``none`` (the plain Transformer);
* ``--direction-gate``: the location layers read g e + (1 - g) reverse(e), g from the mean of
  the encoder's outputs (``--direction-gate-summary mean``) or one learned number for every
  sequence (``none``: without positions the mean is the same for every order of the same tokens);
* ``--decoder-self-attention-window K``: each decoder position attends to itself and the K - 1
  positions before it (0: all of them, fairseq's decoder); L layers together see L (K - 1) back;
* ``--decoder-recency-bias M``: the decoder's self-attention score of position i for an earlier
  position j loses M (i - j) (a linear bias on distance, as ALiBi's, one slope for every head;
  0: none): positions by distance only, the same at every length;
* ``--positions NAME``: the position scheme of the encoder's and the decoder's self-attention, an
  entry of ``modules/position_schemes.py``'s registry (``sinusoidal``, ``learned``, ``none``,
  ``rope``, ``alibi``, ``fire``, ``randomized`` over any of them, or a user's; docs/positions.md);
  unset, fairseq's options decide as they always have (sinusoidal by default,
  ``--encoder-learned-pos``, ``--decoder-learned-pos``, ``--no-token-positional-embeddings``).

Training stays parallel across output steps: a layer reads every step's query at once, computes
content scores and the context in one product each, and only the location focus runs as a scan
over the steps (its reference is the position the previous step attended; ``attend_all`` in
``modules/cross_attention.py``).  Decoding keeps the scan's state (the last attended position)
and the encoder side's prepared tensors in fairseq's incremental state.
"""

from argparse import ArgumentParser, Namespace
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.incremental_decoding_utils import with_incremental_state
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoder, TransformerEncoder, TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture
from omegaconf import OmegaConf
from torch import nn

from ..dictionaries import carry_dictionaries
from ..errors import install_excepthook
from ..fairseq_compat import plain_model_config_in_checkpoints
from ..modules.position_schemes import POSITION_OPTIONS, POSITIONS, install_position_scheme, resolve_positions
from ..modules.positions import kept_tokens_first, to_source_layout
from ..training_notes import note_sorted_batches
from .gru_seq2seq import build_cross_attention
from .options import (
    TRANSFORMER_FIELDS,
    TRANSFORMER_FIXED,
    add_option_arguments,
    check_options,
    check_preset,
    option_defaults,
    parse_bool,
    preset_error,
)
from .presets import register_preset

MODEL_NAME = "transformer_location"
STATE_PREFIX = "location."  # the location state's entries among a layer's incremental state
# the options of the plugin's cross-attention this model takes (those of the GRU model that are
# about the attention itself; the entries' own settings come with them)
ATTENTION_OPTIONS = (
    "attention_scoring", "location_attention", "direction_gate", "reference", "step_activation", "clamp_center",
    "clamp_slope", "position_reference", "location_normalization", "location_projection", "sigma_min",
    "mix_temperature", "direction_temperature", "direction_gate_hard", "direction_gate_keep_end",
    "attention_query_bias", "value_path", "dwell_count", "dwell_init",
)  # fmt: skip


def attention_options() -> Dict[str, Any]:
    """{option: default} of the cross-attention options, the registered entries' settings included."""
    from ..registry import ENTRY_OPTIONS

    defaults = option_defaults()
    return {name: defaults[name] for name in (*ATTENTION_OPTIONS, *ENTRY_OPTIONS)}


@with_incremental_state
class LocationEncoderAttention(nn.Module):
    """Stands in for a Transformer decoder layer's encoder attention (it takes the arguments
    fairseq's MultiheadAttention takes): the plugin's cross-attention over the encoder's outputs,
    every step of the query at once but the location scan."""

    def __init__(
        self,
        attention: nn.Module,
        shared: Optional[Dict[str, torch.Tensor]] = None,
        leads: bool = True,
        gate_summary: str = "mean",
    ):
        """``shared``: a dict the layers of one decoder share (--location-layers shared): the
        leading layer puts its focus there, the others read it.  ``gate_summary``: what the
        direction gate reads, the mean of the encoder's outputs or nothing ("none": g =
        sigmoid(beta b), one learned number b for every sequence)."""
        super().__init__()
        self.attention = attention
        self.shared = shared
        self.leads = leads
        self.gate_summary = gate_summary
        self.last_direction: Optional[torch.Tensor] = None  # the gate g (B,) of the last pass, for extra

    def prepare(self, encoder_out: torch.Tensor, padding_mask: Optional[torch.Tensor]) -> Dict[str, torch.Tensor]:
        """The encoder's side, once per sequence: outputs (S, B, C) moved right-padded (each
        example at positions 0 .. L-1 whatever fairseq's padding side), lengths, the direction
        gate's summary (the mean over real positions), and the source layout to map weights back."""
        encodings = encoder_out.transpose(0, 1)
        batch, width = encodings.shape[:2]
        kept = torch.ones(batch, width, dtype=torch.bool, device=encodings.device)
        if padding_mask is not None:
            kept = ~padding_mask
        lengths = kept.long().sum(dim=1)
        right = kept_tokens_first(encodings, kept)
        if self.gate_summary == "none":  # f_dir(0) = its bias: the same g for every sequence
            summary = right.new_zeros(batch, right.size(-1))
        else:
            real = kept_tokens_first(kept, kept).unsqueeze(-1).to(right.dtype)
            summary = (right * real).sum(dim=1) / lengths.clamp(min=1).unsqueeze(-1).to(right.dtype)
        memory = self.attention.prepare(right, summary, lengths)
        memory["source_ignored"] = ~kept
        return memory

    def forward(
        self,
        query: torch.Tensor,
        key: Optional[torch.Tensor],
        value: Optional[torch.Tensor],
        key_padding_mask: Optional[torch.Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[torch.Tensor]]]] = None,
        static_kv: bool = False,
        need_weights: bool = True,
        need_head_weights: bool = False,
        attn_mask: Optional[torch.Tensor] = None,
        **kwargs,
    ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """query (T, B, C), key = value = the encoder's outputs (S, B, C) -> (T, B, C) and the
        weights over the source's columns ((1, B, T, S) with need_head_weights, else (B, T, S))."""
        memory, location, first_step = None, None, 1
        if incremental_state is not None:
            state = self.get_incremental_state(incremental_state, "location")
            if state is not None:  # the memory's tensors, "step", and the location state's as "location.NAME"
                memory = {k: v for k, v in state.items() if k != "step" and not k.startswith(STATE_PREFIX)}
                location = {k[len(STATE_PREFIX) :]: v for k, v in state.items() if k.startswith(STATE_PREFIX)}
                first_step = int(state["step"]) + 1
        if memory is None:
            memory = self.prepare(key, key_padding_mask)
            location = self.attention.initial_state(memory) if self.attention.tracks_position else None
        weight, bias, sizes = self.attention.step_readout()
        readout = F.linear(query.transpose(0, 1), weight, bias)  # (B, T, R)
        given = self.shared.get("focus") if self.shared is not None and not self.leads else None
        self.last_direction = memory.get("direction")
        context, weights, focus, location = self.attention.attend_all(
            readout, sizes, memory, location, first_step, location_focus=given
        )
        if self.shared is not None and self.leads:
            self.shared["focus"] = focus
        if incremental_state is not None:
            # the step count stays on the host (explicitly): reading it each step needs no device sync
            state = dict(memory, step=torch.tensor(first_step + query.size(0) - 1, device="cpu"))
            for name, value in (location or {}).items():
                state[STATE_PREFIX + name] = value
            self.set_incremental_state(incremental_state, "location", state)
        weights_out = None
        if need_weights or need_head_weights:
            weights_out = to_source_layout(weights, memory["source_ignored"])
            if need_head_weights:
                weights_out = weights_out.unsqueeze(0)
        return context.transpose(0, 1), weights_out

    def reorder_incremental_state(self, incremental_state, new_order: torch.Tensor):
        state = self.get_incremental_state(incremental_state, "location")
        if state is None:
            return incremental_state
        reordered = {k: (v if k == "step" else v.index_select(0, new_order)) for k, v in state.items()}
        self.set_incremental_state(incremental_state, "location", reordered)
        return incremental_state


class LocationTransformerDecoder(TransformerDecoder):
    """fairseq's Transformer decoder whose self-attention may look back a limited window: position
    i attends to positions i - K + 1 .. i (K = ``--decoder-self-attention-window``; 0: no limit)."""

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn, output_projection)
        self.decodes_greedily = True  # metrics.GreedyDecoder may decode it (incremental state, reordering)
        install_position_scheme(self, args, causal=True)  # before the hooks below: it may replace self_attn
        self.self_attention_window = args.decoder_self_attention_window
        self.recency_bias = args.decoder_recency_bias
        self.recency_exempts_start = args.decoder_recency_exempt_start
        if self.recency_bias:
            for layer in self.layers:
                layer.self_attn.register_forward_pre_hook(self.recency_mask_for_one_step, with_kwargs=True)

    def buffered_future_mask(self, tensor):
        """The full pass's mask: fairseq's causal one, -inf where j <= i - K, and - M (i - j)
        (- M (i - j) for j > 0 only with --decoder-recency-exempt-start)."""
        mask = super().buffered_future_mask(tensor)
        if not self.self_attention_window and not self.recency_bias:
            return mask
        steps = torch.arange(mask.size(0), device=mask.device)
        distance = steps.unsqueeze(1) - steps.unsqueeze(0)  # i - j
        if self.recency_exempts_start:
            distance[:, 0] = 0  # the start symbol, at every step as near as the step itself
        if self.recency_bias:
            mask = mask - self.recency_bias * distance.clamp(min=0).to(mask.dtype)
        if self.self_attention_window:
            mask = mask.masked_fill(distance >= self.self_attention_window, float("-inf"))
        return mask

    def recency_mask_for_one_step(self, attention, args, kwargs):
        """Incremental decoding gives the self-attention no mask: the step being decoded attends to
        the n keys kept in the state and its own, at distances n .. 0, so it gets - M (n .. 0)
        (the first, the start symbol, 0 with --decoder-recency-exempt-start: no window drops it)."""
        state = kwargs.get("incremental_state")
        if state is None or kwargs.get("attn_mask") is not None:
            return None
        query = kwargs["query"]
        saved = attention._get_input_buffer(state)
        kept = saved["prev_key"].size(2) if saved.get("prev_key") is not None else 0
        distance = torch.arange(kept, -1, -1, device=query.device, dtype=query.dtype)
        if self.recency_exempts_start:
            distance[0] = 0
        return args, dict(kwargs, attn_mask=-self.recency_bias * distance.unsqueeze(0))

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        if incremental_state is not None and self.self_attention_window:
            self.forget_old_steps(incremental_state)
        x, extra = super().extract_features(prev_output_tokens, encoder_out, incremental_state, **kwargs)
        # the first gated location layer's g (B,) of this pass, as the GRU decoder's extra has it
        gated = self.gated_location_attentions()
        extra["direction"] = gated[0].last_direction if gated else None
        return x, extra

    def gated_location_attentions(self) -> List[LocationEncoderAttention]:
        """The location layers' encoder attentions that have a direction gate, bottom layer first."""
        return [
            layer.encoder_attn
            for layer in self.layers
            if isinstance(layer.encoder_attn, LocationEncoderAttention)
            and layer.encoder_attn.attention.direction_gate is not None
        ]

    def forget_old_steps(self, incremental_state) -> None:
        """Incremental decoding: keep the last K - 1 steps' keys and values of every self-attention,
        so the step about to be decoded attends to them and to itself, as in the full pass."""
        keep = self.self_attention_window - 1
        for layer in self.layers:
            saved = layer.self_attn._get_input_buffer(incremental_state)
            if "prev_key" not in saved or saved["prev_key"] is None or saved["prev_key"].size(2) <= keep:
                continue
            for name in ("prev_key", "prev_value"):
                saved[name] = saved[name][:, :, saved[name].size(2) - keep :]
            if saved.get("prev_key_padding_mask") is not None:
                mask = saved["prev_key_padding_mask"]
                saved["prev_key_padding_mask"] = mask[:, mask.size(1) - keep :]
            layer.self_attn._set_input_buffer(incremental_state, saved)


def location_layer_indices(layers: int, which: str):
    return {"none": [], "last": [layers - 1], "all": list(range(layers)), "shared": list(range(layers))}[which]


def install_location_attention(decoder, args: Namespace) -> None:
    """Replace the encoder attention of the chosen decoder layers by the plugin's."""
    indices = location_layer_indices(len(decoder.layers), args.location_layers)
    shared = {} if args.location_layers == "shared" else None
    embed_dim = decoder.embed_dim
    leader = None
    for position, index in enumerate(indices):
        attention = build_cross_attention(args, encoder_dim=args.encoder_embed_dim, query_dim=embed_dim)
        if shared is not None and leader is not None and attention.direction_gate is not None:
            # one focus, one direction: the positions the leader's focus names are those of its
            # g e + (1 - g) reverse(e), so every layer reads the values in that order
            attention.direction_gate = leader.direction_gate
        if leader is None:
            leader = attention
        layer = decoder.layers[index]
        layer.encoder_attn = LocationEncoderAttention(
            attention, shared=shared, leads=position == 0, gate_summary=args.direction_gate_summary
        )
    decoder.location_shared = shared


@register_model(MODEL_NAME)
class TransformerMonoAttnModel(TransformerModel):
    """fairseq's Transformer (every option of ``--arch transformer``) with the plugin's location
    attention in the decoder layers ``--location-layers`` names."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        group = parser.add_argument_group("location attention (fairseq_monoattn)")
        add_option_arguments(group, parse_bool, fields=TRANSFORMER_FIELDS)  # options.TransformerLocationOptions
        add_option_arguments(group, parse_bool, only=set(attention_options()))
        add_position_arguments(parser.add_argument_group("position schemes (fairseq_monoattn)"))

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        encoder = TransformerEncoder(args, src_dict, embed_tokens)
        install_position_scheme(encoder, args, causal=False)
        return encoder

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return LocationTransformerDecoder(
            args, tgt_dict, embed_tokens, no_encoder_attn=getattr(args, "no_cross_attention", False)
        )

    def direction_gate(self, src_tokens, src_lengths=None) -> Optional[torch.Tensor]:
        """The first location layer's direction gate g (B,) of each source (1: forward encodings,
        0: reversed), or None without one (the task logs it at every validation)."""
        gated = self.decoder.gated_location_attentions()
        if not gated:
            return None
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths)
        padding = encoder_out["encoder_padding_mask"]
        return gated[0].prepare(encoder_out["encoder_out"][0], padding[0] if padding else None)["direction"]

    @classmethod
    def build_model(cls, args, task):
        install_excepthook()  # the plugin's errors, from here on: one line, not a traceback
        plain_model_config_in_checkpoints()  # checkpoints load without the plugin (fairseq_compat.py, 7.)
        if OmegaConf.is_config(args):  # a checkpoint's configuration, stored as a dict
            args = Namespace(**OmegaConf.to_container(args, resolve=True))  # fairseq's Transformer reads a Namespace
        location_defaults(args)
        check_options({name: getattr(args, name) for name in attention_options()})  # OptionError names it
        model = super().build_model(args, task)
        install_location_attention(model.decoder, args)
        carry_dictionaries(model, task)  # a checkpoint on other data is refused
        note_sorted_batches(model, args, task)
        return model


def add_position_arguments(group) -> None:
    """``--positions NAME`` and every registered scheme's settings (the names are checked when the
    model is built, so that a scheme a --user-dir package registers is known by then)."""
    names = ", ".join(POSITIONS.names())
    group.add_argument("--positions", metavar="NAME", help="position scheme of the encoder's and decoder's "
                       f"self-attention: {names} (unset: fairseq's position options)")  # fmt: skip
    kinds = {"int": int, "float": float, "str": str, "bool": parse_bool}
    for name, f in POSITION_OPTIONS.items():
        kind = kinds.get(getattr(f.type, "__name__", f.type), str)
        help_text = f.metadata.get("help", "")
        group.add_argument("--" + name.replace("_", "-"), type=kind, help=f"{help_text} (default: {f.default})")


def location_defaults(args: Namespace) -> None:
    """The attention options a command line left unset take their defaults, and their sizes the
    Transformer's (attention size = the decoder's width); the position scheme's switches are set
    to match ``--positions`` (``modules/position_schemes.py``)."""
    resolve_positions(args)
    own = {name: field.default for name, field in TRANSFORMER_FIELDS.items()}
    for name, value in {**attention_options(), **own}.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    check_options(vars(args), fields=TRANSFORMER_FIELDS)  # OptionError names the option
    if args.decoder_recency_exempt_start and not args.decoder_recency_bias:
        raise ValueError("--decoder-recency-exempt-start True needs a --decoder-recency-bias to exempt the start from")
    if args.decoder_recency_exempt_start and args.decoder_self_attention_window:
        raise ValueError(
            "--decoder-recency-exempt-start True cannot be combined with --decoder-self-attention-window: "
            "the window drops the start symbol"
        )
    args.attention_dim = args.decoder_embed_dim
    for name, value in TRANSFORMER_FIXED.items():
        setattr(args, name, getattr(args, name, None) or value)


# --- named architectures ----------------------------------------------------------------------------

TRANSFORMER_SMALL = dict(
    encoder_embed_dim=64, encoder_ffn_embed_dim=256, encoder_layers=3, encoder_attention_heads=4,
    decoder_embed_dim=64, decoder_ffn_embed_dim=256, decoder_layers=3, decoder_attention_heads=4,
    dropout=0.1, share_decoder_input_output_embed=True,
)  # fmt: skip
LOCATION = dict(location_layers="last", location_attention=True, attention_scoring="none")
TRANSFORMER_PRESETS: Dict[str, Dict[str, Any]] = {
    "transformer_small": dict(TRANSFORMER_SMALL, location_layers="none"),
    "transformer_onestep": dict(TRANSFORMER_SMALL, **LOCATION, direction_gate=True, step_activation="sigmoid"),
    "transformer_monoattn": dict(TRANSFORMER_SMALL, **LOCATION, direction_gate=True, step_activation="mono"),
    "transformer_mix_onestep": dict(
        TRANSFORMER_SMALL,
        **dict(LOCATION, attention_scoring="content"),
        direction_gate=True,
        step_activation="sigmoid",
        mix_temperature=5.0,
    ),
}
# For length generalisation: no absolute positions anywhere (the location focus is the model's sense
# of where it reads); a direction gate of one learned number (without positions the encoder's mean is
# the same for every order of the same tokens), at temperature 50 so that it settles on one order in
# the first epoch rather than fitting the training lengths with a mixture, reversing the tokens but
# keeping the source's </s> last; and the decoder's self-attention biased by distance, score - (i - j),
# so that what it reads of its last outputs is the same at every length, but for the start symbol, at
# distance 0 from every step: heads that rest on it would otherwise lose it as the output grows
# (docs/transformer.md).
LENGTH_GENERALISATION = dict(
    no_token_positional_embeddings=True,
    direction_gate=True,
    direction_gate_summary="none",
    direction_temperature=50.0,
    direction_gate_keep_end=True,
    decoder_recency_bias=1.0,
    decoder_recency_exempt_start=True,
)
for _base in ("transformer_onestep", "transformer_monoattn"):
    TRANSFORMER_PRESETS[f"{_base}_recency"] = dict(TRANSFORMER_PRESETS[_base], **LENGTH_GENERALISATION)
# fairseq's switches (store_true) are False, not None, when the command line leaves them out: a preset
# that sets one turns it on, and the command line cannot turn it off again (choose another preset).
FAIRSEQ_SWITCHES = {"no_token_positional_embeddings", "encoder_learned_pos", "decoder_learned_pos"}


@register_model_architecture(MODEL_NAME, MODEL_NAME)
def transformer_location(args):
    base_architecture(args)


def model_arguments() -> Dict[str, Any]:
    """{option: its argparse action} of every command-line option of the model (fairseq's
    Transformer's and the location attention's, the registered entries' settings included)."""
    parser = ArgumentParser(add_help=False)
    TransformerMonoAttnModel.add_args(parser)
    return {action.dest: action for action in parser._actions}


def register_transformer_preset(name: str, options: Dict[str, Any]) -> None:
    """``register_preset(name, options, model="transformer_location")`` (``presets.py``):
    ``--arch NAME``, this model with ``options`` set over fairseq's Transformer defaults."""
    options = dict(options)
    arguments = model_arguments()
    check_preset(name, options, known=arguments)  # OptionError naming the preset and the option
    for key, value in options.items():  # fairseq's choices (the attention's are checked above)
        known = arguments[key].choices
        if known is not None and key not in attention_options() and value not in known:
            raise preset_error(name, f"--{key.replace('_', '-')} must be one of {', '.join(map(str, known))}, "
                                     f"got {value!r}")  # fmt: skip

    @register_model_architecture(MODEL_NAME, name)
    def architecture(args):
        for key, value in options.items():
            if getattr(args, key, None) is None or (key in FAIRSEQ_SWITCHES and value is True):
                setattr(args, key, value)
        base_architecture(args)

    architecture.__name__ = name


for _name, _options in TRANSFORMER_PRESETS.items():
    register_preset(_name, _options, model=MODEL_NAME)
