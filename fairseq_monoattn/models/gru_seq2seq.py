"""A bidirectional-GRU encoder-decoder whose cross-attention is configurable.

The encoder wraps every source in learned START / END vectors and runs a (stack of)
bidirectional GRU(s); the decoder is a GRU stack fed with [emb(y_{t-1}); context_t] where
the context comes from :class:`CrossAttention` queried with h_{t-1}.  Every option lives in
:class:`GRUSeq2SeqConfig` (the only place that holds defaults); each model of the paper is a
named architecture (``presets.py``) that sets the options it differs in.
"""
from contextlib import nullcontext
from dataclasses import dataclass, field, fields
from typing import Optional

import torch
from torch import nn
import torch.nn.functional as F
from fairseq import utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
)
from omegaconf import OmegaConf, open_dict

from ..limits import NO_LENGTH_LIMIT
from ..modules.choices import check_choice
from ..modules.content import SCORERS
from ..modules.cross_attention import LINEAR_INITS, LOCATION_HEAD_INITS, POSITION_REFERENCES, CrossAttention
from ..modules.location import NORMALIZATIONS, REFERENCES, STEP_ACTIVATIONS

EMBEDDING_INITS = ("scaled-normal", "kaiming-fan-out")
BOUNDARY_INITS = ("normal", "zeros")


def option(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class GRUSeq2SeqConfig(FairseqDataclass):
    # sizes
    encoder_embed_dim: int = option(64, "encoder embedding size")
    encoder_hidden_size: int = option(64, "GRU size per direction")
    encoder_layers: int = option(1, "bidirectional GRU layers")
    decoder_embed_dim: int = option(64, "decoder embedding size")
    decoder_hidden_size: Optional[int] = option(None, "decoder GRU size (default: 2 x --encoder-hidden-size)")
    decoder_layers: Optional[int] = option(None, "decoder GRU layers (default: --encoder-layers)")
    attention_dim: Optional[int] = option(None, "key/query/value size (default: the decoder hidden size)")
    dropout: float = option(0.5, "dropout on the encoder outputs")
    decoder_dropout: float = option(0.0, "dropout on the decoder outputs")
    # embeddings and initialisation
    share_decoder_input_output_embed: bool = option(True, "tie the output projection to the target embeddings")
    share_all_embeddings: bool = option(
        False, "one embedding matrix for the source, the decoder input and the output (needs one dictionary "
               "for source and target, see the data's joined dictionary)")
    embedding_init: ChoiceEnum(EMBEDDING_INITS) = option(
        "scaled-normal", "scaled-normal: N(0, 1/dim) (fairseq's habit); kaiming-fan-out: N(0, 2/vocabulary size) "
                         "(the authors' release)")
    boundary_init: ChoiceEnum(BOUNDARY_INITS) = option(
        "normal", "initial START / END vectors: N(0, 1/dim) or zeros (the authors' release)")
    linear_init: ChoiceEnum(LINEAR_INITS) = option(
        "pytorch", "attention and output layers: torch's default init, or Xavier-uniform without the biases "
                   "the authors' release leaves out")
    source_eos: bool = option(True, "keep fairseq's source </s> as an encoder position between the tokens and END")
    # cross-attention
    attention_scoring: ChoiceEnum(["none"] + list(SCORERS)) = option(
        "content", "query-key scores: content, relative (Transformer-XL), rotary, or none")
    location_attention: bool = option(False, "use Gaussian location attention (mixed with the scores if both are on)")
    direction_gate: bool = option(False, "attend to g*e + (1-g)*reverse(e) instead of e")
    reference: ChoiceEnum(REFERENCES) = option("previous", "reference position of the location focus")
    step_activation: ChoiceEnum(STEP_ACTIVATIONS) = option(
        "sigmoid", "activation of the step taken from the reference position")
    clamp_center: bool = option(False, "leaky-clamp the location centre into [0, 1]")
    position_reference: ChoiceEnum(POSITION_REFERENCES) = option(
        "mixed", "previous position from the mixed attention or the location-only one (PR)")
    location_normalization: ChoiceEnum(NORMALIZATIONS) = option(
        "softmax", "softmax over real positions, or the release's exp / (sum + 1e-20), whose weights "
                   "underflow to zero (and reset the focus to START) far past the last position")
    location_projection: bool = option(
        False, "read the location heads off the paper's intermediate l_t = f_l(h) (a d x d layer) "
               "instead of directly off h")
    location_head_init: ChoiceEnum(LOCATION_HEAD_INITS) = option(
        "per-head", "with --linear-init xavier: draw each location head vector on its own fan, or the "
                    "step/gate/bias vectors as one (d, k) tensor as the release's LocAttn")
    sigma_min: float = option(0.27, "minimum width of the location focus")
    step_temperature: float = option(5.0, "T in sigmoid(T * rho) steps")
    softstair_temperature: float = option(20.0, "softstair temperature")
    clamp_slope: float = option(0.01, "leaky slope of the centre clamp")
    mono_gate_init: float = option(20.0, "initial logit of Mono's ReLU gate")
    mix_temperature: float = option(5.0, "beta in the content/location mix")
    direction_temperature: float = option(5.0, "beta in the direction gate")
    max_source_positions: int = option(NO_LENGTH_LIMIT, "maximum source length")
    max_target_positions: int = option(NO_LENGTH_LIMIT, "maximum target length")


CONFIG_FIELDS = {f.name: f for f in fields(GRUSeq2SeqConfig) if not f.name.startswith("_")}


def fill_missing(cfg, values) -> None:
    """Set every option of ``values`` (a dict) that ``cfg`` (a Namespace or DictConfig) lacks
    or holds as None, in place."""
    with open_dict(cfg) if OmegaConf.is_config(cfg) else nullcontext():
        for name, value in values.items():
            if getattr(cfg, name, None) is None:
                setattr(cfg, name, value)


def config_defaults() -> dict:
    """{option: default} read off GRUSeq2SeqConfig (enums as their string values)."""
    defaults = {}
    for name, f in CONFIG_FIELDS.items():
        value = f.default
        defaults[name] = getattr(value, "value", value)
    return defaults


# read only with location attention (the mixing options: only when mixing, below)
LOCATION_OPTIONS = ("reference", "step_activation", "clamp_center", "location_normalization", "location_projection",
                    "location_head_init", "sigma_min", "step_temperature", "softstair_temperature", "clamp_slope",
                    "mono_gate_init")


def unused_options(cfg: dict) -> set:
    """The options of ``cfg`` (a model config as a dict) that the model it describes never reads,
    so that no value of theirs changes it: the location options of a content-only model, the mix
    temperature and position reference of a model that mixes nothing, the head init where every
    location vector keeps its own fan, the temperature of an activation not used, ..."""
    cfg = {**config_defaults(), **cfg}  # a checkpoint older than an option held its default
    unused = set()
    location, mixes = cfg["location_attention"], cfg["location_attention"] and cfg["attention_scoring"] != "none"
    if not location:
        unused.update(LOCATION_OPTIONS)
    if not mixes:
        unused.update(("mix_temperature", "position_reference"))
    activation = cfg["step_activation"]
    if activation not in ("sigmoid", "mono"):
        unused.add("step_temperature")
    if activation != "softstair":
        unused.add("softstair_temperature")
    if activation != "mono":
        unused.add("mono_gate_init")
    if not cfg["clamp_center"]:
        unused.add("clamp_slope")
    # "joint" and "per-head" differ only for xavier and more than the step vector (not "previous")
    if cfg["linear_init"] != "xavier" or cfg["reference"] == "previous":
        unused.add("location_head_init")
    if not cfg["direction_gate"]:
        unused.add("direction_temperature")
    return unused


@register_model("gru_seq2seq", dataclass=GRUSeq2SeqConfig)
class GRUSeq2SeqModel(FairseqEncoderDecoderModel):
    @staticmethod
    def add_args(parser):
        """Every field of GRUSeq2SeqConfig as an option, without defaults (so that a preset can
        set them).  Booleans take a value (``--direction-gate False``) so that a preset's True
        can be switched off on the command line."""
        for name, f in CONFIG_FIELDS.items():
            flag = "--" + name.replace("_", "-")
            kind = f.type
            choices = [member.value for member in kind] if isinstance(kind, type) and hasattr(kind, "__members__") \
                else None
            if kind is bool:
                parser.add_argument(flag, type=utils.eval_bool, metavar="BOOL", help=f.metadata["help"])
            elif choices is not None:
                parser.add_argument(flag, choices=choices, help=f.metadata["help"])
            else:
                inner = getattr(kind, "__args__", (kind,))[0]  # Optional[int] -> int
                parser.add_argument(flag, type=inner, metavar="N" if inner is int else "F",
                                    help=f.metadata["help"])

    @classmethod
    def build_model(cls, cfg, task):
        # a preset (``--arch gru_onestep``) has set its own options already; the rest come from the
        # dataclass, written into cfg so that the checkpoint records every value used
        fill_missing(cfg, config_defaults())
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        decoder_hidden_size = cfg.decoder_hidden_size or 2 * cfg.encoder_hidden_size
        decoder_layers = cfg.decoder_layers or cfg.encoder_layers
        if cfg.share_all_embeddings:
            if src_dict != tgt_dict:
                raise ValueError("--share-all-embeddings needs one dictionary for source and target "
                                 "(dict.src.txt and dict.tgt.txt must be the same: prepare the data with a "
                                 "joined dictionary)")
            if cfg.encoder_embed_dim != cfg.decoder_embed_dim:
                raise ValueError("--share-all-embeddings needs --encoder-embed-dim == --decoder-embed-dim")
            encoder_embedding = decoder_embedding = build_embedding(src_dict, cfg.encoder_embed_dim,
                                                                    cfg.embedding_init)
        else:
            encoder_embedding = build_embedding(src_dict, cfg.encoder_embed_dim, cfg.embedding_init)
            decoder_embedding = build_embedding(tgt_dict, cfg.decoder_embed_dim, cfg.embedding_init)
        encoder = GRUEncoder(src_dict, encoder_embedding, cfg)
        attention = CrossAttention(cfg, encoder.output_dim, decoder_hidden_size, encoder.output_dim)
        decoder = GRUDecoder(tgt_dict, decoder_embedding, attention, cfg, encoder.output_dim,
                             decoder_hidden_size, decoder_layers)
        return cls(encoder, decoder)

    def max_positions(self):
        return (self.encoder.max_positions(), self.decoder.max_positions())

    def direction_gate(self, src_tokens, src_lengths=None) -> Optional[torch.Tensor]:
        """The direction gate g (B,) of each source (1: forward encodings, 0: reversed), or None
        when the cross-attention has none.  It applies to the keys and values of the
        cross-attention: e_dir = g * e + (1 - g) * reverse(e)."""
        gate = self.decoder.attention.direction_gate
        if gate is None:
            return None
        return gate.gate(self.encoder(src_tokens, src_lengths)["summary"][-1])


def build_embedding(dictionary, dim: int, init: str) -> nn.Embedding:
    """scaled-normal: N(0, 1/dim); kaiming-fan-out: N(0, 2/V) with V the vocabulary size (torch's
    kaiming_normal_ with mode="fan_out" on a V x dim matrix).  The padding row is zero."""
    check_choice("embedding-init", init, EMBEDDING_INITS)
    embedding = nn.Embedding(len(dictionary), dim, padding_idx=dictionary.pad())
    std = dim ** -0.5 if init == "scaled-normal" else (2.0 / len(dictionary)) ** 0.5
    nn.init.normal_(embedding.weight, 0, std)
    nn.init.zeros_(embedding.weight[dictionary.pad()])
    return embedding


class GRUEncoder(FairseqEncoder):
    """Embeds [START, x_1 .. x_n, (</s>,) END] (START / END are learned vectors, not vocabulary
    items) and runs bidirectional GRUs; no positional encoding."""

    def __init__(self, dictionary, embed_tokens: nn.Embedding, cfg):
        super().__init__(dictionary)
        check_choice("boundary-init", cfg.boundary_init, BOUNDARY_INITS)
        embed_dim = embed_tokens.embedding_dim
        self.padding_idx = dictionary.pad()
        self.eos_idx = dictionary.eos()
        self.keep_source_eos = cfg.source_eos
        self.embed_tokens = embed_tokens
        scale = embed_dim ** -0.5 if cfg.boundary_init == "normal" else 0.0
        self.start = nn.Parameter(torch.randn(embed_dim) * scale)
        self.end = nn.Parameter(torch.randn(embed_dim) * scale)
        self.rnn = nn.GRU(embed_dim, cfg.encoder_hidden_size, num_layers=cfg.encoder_layers, batch_first=True,
                          bidirectional=True)
        self.num_layers = cfg.encoder_layers
        self.output_dim = 2 * cfg.encoder_hidden_size
        self.dropout_out = nn.Dropout(cfg.dropout)
        self._max_positions = cfg.max_source_positions

    def forward(self, src_tokens, src_lengths=None, **kwargs):
        """src_tokens (B, T), left- or right-padded: each row's kept tokens are moved to the
        front, so every example sees its own positions 0 .. n+1 whatever the batch."""
        kept = src_tokens.ne(self.padding_idx)
        if not self.keep_source_eos:
            kept &= src_tokens.ne(self.eos_idx)
        token_lengths = kept.long().sum(dim=1)
        tokens = kept_tokens_first(src_tokens, kept)
        batch, width = tokens.shape
        lengths = token_lengths + 2  # START and END
        x = self.start.new_zeros(batch, width + 2, self.start.numel())
        x[:, 0] = self.start
        x[:, 1:width + 1] = self.embed_tokens(tokens)  # columns past a row's tokens are never read
        x[torch.arange(batch, device=x.device), token_lengths + 1] = self.end
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        packed_out, final = self.rnn(packed)
        encodings, _ = nn.utils.rnn.pad_packed_sequence(packed_out, batch_first=True, total_length=width + 2)
        # e_cls of layer l = [last forward state ; last backward state] -> (layers, B, 2H)
        final = final.view(self.num_layers, 2, batch, -1)
        summary = torch.cat([final[:, 0], final[:, 1]], dim=-1)
        return {
            "encodings": self.dropout_out(encodings),  # (B, n+2, 2H), right-padded
            "summary": summary,
            "lengths": lengths,
            "source_ignored": ~kept,  # layout of src_tokens: columns no position stands for
            "order": torch.arange(batch, device=src_tokens.device),
        }

    def reorder_encoder_out(self, encoder_out, new_order):
        """Lazy: fairseq's generator reorders the encoder output at every step, but the
        decoder reads it once, so only the row index is composed here (O(B), not
        O(B x n x d) per step); :func:`encoder_rows` gathers the rows when they are read."""
        return {**encoder_out, "order": encoder_out["order"].index_select(0, new_order)}

    def max_positions(self):
        return self._max_positions


def encoder_rows(encoder_out, key):
    """``encoder_out[key]`` in the current (possibly reordered) batch order."""
    value, order = encoder_out[key], encoder_out["order"]
    batch_dim = 1 if key == "summary" else 0
    if order.numel() == value.size(batch_dim) and torch.equal(order, torch.arange(order.numel(), device=order.device)):
        return value
    return value.index_select(batch_dim, order)


def kept_tokens_first(tokens, kept):
    """Move each row's kept tokens to the front, keeping their order: fairseq left-pads
    sources by default, so the result is right-padded whatever the input's padding side."""
    order = torch.sort((~kept).to(torch.uint8), dim=1, stable=True).indices
    return tokens.gather(1, order)


class GRUDecoder(FairseqIncrementalDecoder):
    def __init__(self, dictionary, embed_tokens: nn.Embedding, attention: CrossAttention, cfg,
                 encoder_summary_dim: int, hidden_size: int, num_layers: int):
        super().__init__(dictionary)
        embed_dim = embed_tokens.embedding_dim
        self.embed_tokens = embed_tokens
        self.attention = attention
        self.cells = nn.ModuleList(
            nn.GRUCell(embed_dim + attention.context_dim if i == 0 else hidden_size, hidden_size)
            for i in range(num_layers)
        )
        self.num_layers = num_layers
        self.encoder_layers = cfg.encoder_layers
        # h_0 = e_cls; a projection only when the sizes differ
        self.init_proj = None if encoder_summary_dim == hidden_size else nn.Linear(encoder_summary_dim, hidden_size)
        self.dropout_out = nn.Dropout(cfg.decoder_dropout)
        self.share_input_output_embed = cfg.share_decoder_input_output_embed or cfg.share_all_embeddings
        if self.share_input_output_embed:
            # logits = W h_t E^T + b, E the target embedding matrix
            self.out_proj = nn.Linear(hidden_size, embed_dim)
            self.out_bias = nn.Parameter(torch.zeros(len(dictionary)))
        else:
            self.out_proj = nn.Linear(hidden_size, len(dictionary))
        if cfg.linear_init == "xavier":
            nn.init.xavier_uniform_(self.out_proj.weight)
        self.need_attn = False  # fairseq-generate --print-alignment switches it on
        self._max_positions = cfg.max_target_positions

    # -- state -------------------------------------------------------------------------
    def initial_hidden(self, summary) -> torch.Tensor:
        """h_0 from e_cls, summary (encoder layers, B, 2H)."""
        if self.encoder_layers == self.num_layers:
            hidden = summary
        else:
            hidden = summary[-1:].expand(self.num_layers, -1, -1)
        if self.init_proj is not None:
            hidden = self.init_proj(hidden)
        return hidden.contiguous()

    def _start_state(self, encoder_out):
        summary = encoder_rows(encoder_out, "summary")
        memory = self.attention.prepare(
            encoder_rows(encoder_out, "encodings"), summary[-1], encoder_rows(encoder_out, "lengths")
        )
        state = {"hidden": self.initial_hidden(summary)}
        if self.attention.tracks_position:
            state["position"] = self.attention.initial_position(memory)
        return memory, state

    # -- forward -----------------------------------------------------------------------
    def forward(self, prev_output_tokens, encoder_out, incremental_state=None, **kwargs):
        """Returns logits (B, T, V) and ``{"attn": [weights over src_tokens' columns, for
        fairseq's alignments, or None], "attention": weights over [START, tokens, END] (B, T, n+2),
        "direction": the direction gate g (B,) or None}``."""
        features, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        return self.output_layer(features), extra

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None, **kwargs):
        first_step = 1
        memory = state = None
        if incremental_state is not None:
            first_step = prev_output_tokens.size(1)
            prev_output_tokens = prev_output_tokens[:, -1:]
            memory = self.get_incremental_state(incremental_state, "memory")
            state = self.get_incremental_state(incremental_state, "state")
        if memory is None:
            memory, state = self._start_state(encoder_out)
        hidden = list(state["hidden"].unbind(0))
        position = state.get("position")
        embedded = self.embed_tokens(prev_output_tokens).transpose(0, 1).unbind(0)  # one (B, E) per step
        outputs, weights = [], []
        for j, embedding in enumerate(embedded):
            context, step_weights, position = self.attention(hidden[-1], memory, position, first_step + j)
            x = torch.cat([embedding, context], dim=-1)
            for layer, cell in enumerate(self.cells):
                x = hidden[layer] = cell(x, hidden[layer])
            outputs.append(x)
            weights.append(step_weights)
        if incremental_state is not None:
            new_state = {"hidden": torch.stack(hidden)}
            if position is not None:
                new_state["position"] = position
            self.set_incremental_state(incremental_state, "memory", memory)
            self.set_incremental_state(incremental_state, "state", new_state)
        features = self.dropout_out(torch.stack(outputs, dim=1))
        attention = torch.stack(weights, dim=1)
        attn = None
        if self.need_attn and not self.training:
            attn = source_layout_attention(attention, encoder_out)
        return features, {"attn": [attn], "attention": attention, "direction": memory.get("direction")}

    def output_layer(self, features):
        x = self.out_proj(features)
        if self.share_input_output_embed:
            x = F.linear(x, self.embed_tokens.weight, self.out_bias)
        return x

    def reorder_incremental_state(self, incremental_state, new_order):
        state = self.get_incremental_state(incremental_state, "state")
        if state is None:
            return
        reordered = {"hidden": state["hidden"].index_select(1, new_order)}
        if "position" in state:
            reordered["position"] = state["position"].index_select(0, new_order)
        self.set_incremental_state(incremental_state, "state", reordered)
        memory = self.get_incremental_state(incremental_state, "memory")
        if memory is not None and memory["values"].size(0) != new_order.numel():
            # Like fairseq's own cross-attention cache: a reorder that keeps the batch size
            # only permutes the hypotheses of one source, whose memories are identical.
            memory = {k: v.index_select(0, new_order) for k, v in memory.items()}
            self.set_incremental_state(incremental_state, "memory", memory)

    def max_positions(self):
        return self._max_positions

    def make_generation_fast_(self, need_attn=False, **kwargs):
        self.need_attn = need_attn


def source_layout_attention(weights, encoder_out):
    """Map attention over the wrapped, compacted source [START, x.., END] back onto the
    columns of ``src_tokens`` (as fairseq expects for --print-alignment); columns no encoder
    position stands for (padding, a dropped source </s>) get 0."""
    ignored = encoder_rows(encoder_out, "source_ignored")  # (B, T) in src_tokens' layout
    # rank of each kept column among the row's kept columns, i.e. its token index
    token_index = (~ignored).long().cumsum(dim=1) - 1
    index = (token_index + 1).clamp(min=0).unsqueeze(1).expand(-1, weights.size(1), -1)
    mapped = weights.gather(2, index)
    return mapped.masked_fill(ignored.unsqueeze(1), 0.0)
