"""A bidirectional-GRU encoder-decoder whose cross-attention is configurable.

The encoder wraps every source in learned START / END vectors and runs a (stack of)
bidirectional GRU(s); the decoder is a GRU stack fed with [emb(y_{t-1}); context_t] where
the context comes from :class:`CrossAttention` queried with h_{t-1}.  Every option and its
default is defined once, in ``options.py``; this module turns them into the model's
``FairseqDataclass`` (rebuilt whenever an attention entry with settings of its own is
registered, so that a user's entries get their options too).  Each model of the paper is a
named architecture (``presets.py``) that sets the options it differs in.
"""

import dataclasses
import logging
from contextlib import nullcontext
from typing import Any, Dict, Mapping, Optional

import torch
import torch.nn.functional as F
from fairseq.dataclass import FairseqDataclass
from fairseq.models import (
    ARCH_CONFIG_REGISTRY,
    ARCH_MODEL_NAME_REGISTRY,
    MODEL_DATACLASS_REGISTRY,
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf, open_dict
from torch import nn

from .. import fast_path
from ..dictionaries import carry_dictionaries
from ..errors import install_excepthook
from ..modules import compiled
from ..modules.choices import check_choice
from ..modules.cross_attention import CrossAttention
from ..modules.direction_gate import DirectionGate
from ..modules.dropout import Dropout
from ..modules.gru import bidirectional_gru
from ..modules.location import LocationAttention
from ..modules.positions import kept_tokens_first, to_source_layout
from ..modules.token_tables import TokenRows, embedding_rows, table_applies
from ..registry import NORMALIZATIONS, REFERENCES, SCORERS, STEP_ACTIVATIONS, on_registration
from ..training_notes import note_sorted_batches
from .options import (
    BOUNDARY_INITS,
    CONVENTION_OPTIONS,
    EMBEDDING_INITS,
    add_option_arguments,
    check_options,
    check_preset,
    convention_values,
    option_defaults,
    option_fields,
    parse_bool,
)
from .presets import PRESETS, register_preset  # noqa: F401  (register_preset: its public name here too)

logger = logging.getLogger(__name__)

MODEL_NAME = "gru_seq2seq"


def config_class(name: str = "GRUSeq2SeqConfig", defaults: Optional[Mapping[str, Any]] = None) -> type:
    """A FairseqDataclass with a field per option (``defaults`` overriding some defaults)."""
    defaults = defaults or {}
    specs = []
    for key, f in option_fields().items():
        kind, default = f.type, defaults.get(key, option_defaults()[key])
        if key in CONVENTION_OPTIONS and key not in defaults:  # unset: its value comes from --conventions
            kind, default = Optional[f.type], None
        specs.append((key, kind, dataclasses.field(default=default, metadata={"help": f.metadata.get("help", "")})))
    return dataclasses.make_dataclass(name, specs, bases=(FairseqDataclass,))


GRUSeq2SeqConfig = config_class()


def fill_missing(cfg, values: Mapping[str, Any]) -> None:
    """Set every option of ``values`` (a dict) that ``cfg`` (a Namespace or DictConfig) lacks
    or holds as None, in place."""
    with open_dict(cfg) if OmegaConf.is_config(cfg) else nullcontext():
        for name, value in values.items():
            if getattr(cfg, name, None) is None:
                setattr(cfg, name, value)


def options_of(cfg) -> Dict[str, Any]:
    """A model config (DictConfig, Namespace or mapping) as a plain dict."""
    if OmegaConf.is_config(cfg):
        return OmegaConf.to_container(cfg)
    return dict(cfg) if isinstance(cfg, Mapping) else dict(vars(cfg))


def config_defaults() -> Dict[str, Any]:
    """{option: default} of every option (the base options and every registered entry's)."""
    return option_defaults()


@register_model(MODEL_NAME, dataclass=GRUSeq2SeqConfig)
class GRUSeq2SeqModel(FairseqEncoderDecoderModel):
    @staticmethod
    def add_args(parser):
        """Every option as a command-line argument without a default (so that a preset can set
        it).  Booleans take a value (``--direction-gate False``) so that a preset's True can be
        switched off on the command line."""
        add_option_arguments(parser, parse_bool)

    @classmethod
    def build_model(cls, cfg, task):
        install_excepthook()  # the plugin's errors, from here on: one line, not a traceback
        # a preset (``--arch gru_onestep``) has set its own options already; the rest come from the
        # defaults, written into cfg so that the checkpoint records every value used
        fill_missing(cfg, convention_values(options_of(cfg)))  # the options of --conventions' group
        fill_missing(cfg, config_defaults())
        check_options(options_of(cfg))  # OptionError names the option
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        decoder_hidden_size = cfg.decoder_hidden_size or 2 * cfg.encoder_hidden_size
        decoder_layers = cfg.decoder_layers or cfg.encoder_layers
        if cfg.share_all_embeddings:
            if src_dict != tgt_dict:
                raise ValueError(
                    "--share-all-embeddings needs one dictionary for source and target "
                    "(dict.src.txt and dict.tgt.txt must be the same: prepare the data with a "
                    "joined dictionary)"
                )
            if cfg.encoder_embed_dim != cfg.decoder_embed_dim:
                raise ValueError("--share-all-embeddings needs --encoder-embed-dim == --decoder-embed-dim")
            encoder_embedding = decoder_embedding = build_embedding(src_dict, cfg.encoder_embed_dim, cfg.embedding_init)
        else:
            encoder_embedding = build_embedding(src_dict, cfg.encoder_embed_dim, cfg.embedding_init)
            decoder_embedding = build_embedding(tgt_dict, cfg.decoder_embed_dim, cfg.embedding_init)
        encoder = GRUEncoder(
            src_dict,
            encoder_embedding,
            hidden_size=cfg.encoder_hidden_size,
            num_layers=cfg.encoder_layers,
            dropout=cfg.dropout,
            boundary_init=cfg.boundary_init,
            keep_source_eos=cfg.source_eos,
            max_positions=cfg.max_source_positions,
            state_noise=cfg.encoder_state_noise,
        )
        attention = build_cross_attention(cfg, encoder.output_dim, decoder_hidden_size)
        decoder = GRUDecoder(
            tgt_dict,
            decoder_embedding,
            attention,
            hidden_size=decoder_hidden_size,
            num_layers=decoder_layers,
            encoder_layers=cfg.encoder_layers,
            encoder_summary_dim=encoder.output_dim,
            dropout=cfg.decoder_dropout,
            share_input_output_embed=cfg.share_decoder_input_output_embed or cfg.share_all_embeddings,
            linear_init=cfg.linear_init,
            max_positions=cfg.max_target_positions,
            start_index=tgt_dict.bos() if cfg.decoder_start == "bos" else None,
        )
        model = carry_dictionaries(cls(encoder, decoder), task)  # a checkpoint on other data is refused
        note_sorted_batches(model, cfg, task)
        model.choose_code()
        return model

    def choose_code(self) -> None:
        """Which code the model runs, the reference or the fast path (``fast_path.choose``, the one
        place that decides), installed on the encoder and the decoder; again whenever the model is
        moved or cast (``_apply``), with a log line when that changes it."""
        chosen_before = "fast_path" in self.__dict__
        before = self.__dict__.get("fast_path")
        self.fast_path = fast_path.choose(self)
        fast_path.install(self, self.fast_path)
        if chosen_before and (before is None) != (self.fast_path is None):
            logger.info("the model was moved or cast: it now runs %s", fast_path.describe(self.fast_path))

    def _apply(self, fn, *args, **kwargs):
        """``nn.Module._apply`` (under ``.to()``, ``.cuda()``, ``.half()`` ...), then the code chosen
        again for the parameters' new device and precision."""
        result = super()._apply(fn, *args, **kwargs)
        self.choose_code()
        return result

    def upgrade_state_dict_named(self, state_dict, name):
        """Checkpoints from before the step activations were modules of their own kept Mono's
        gate logit on the location module."""
        super().upgrade_state_dict_named(state_dict, name)
        prefix = f"{name}." if name else ""
        for key in list(state_dict):
            if key.startswith(prefix) and key.endswith("attention.location.mono_gate_logit"):
                state_dict[key[: -len("mono_gate_logit")] + "step.gate_logit"] = state_dict.pop(key)

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


def build_cross_attention(cfg, encoder_dim: int, query_dim: int) -> CrossAttention:
    """The cross-attention the options describe, each choice built from its registry.  (The
    direction gate, the location focus and the scorer are made in this order, the order in
    which their parameters draw their initial values.)"""
    gate = None
    if cfg.direction_gate:
        gate = DirectionGate(
            encoder_dim, cfg.direction_temperature, hard=cfg.direction_gate_hard, keep_end=cfg.direction_gate_keep_end
        )
    location = None
    if cfg.location_attention:
        location = LocationAttention(
            reference=REFERENCES.build(cfg.reference, cfg),
            step=STEP_ACTIVATIONS.build(cfg.step_activation, cfg),
            normalization=NORMALIZATIONS.build(cfg.location_normalization, cfg),
            sigma_min=cfg.sigma_min,
            clamp_slope=cfg.clamp_slope if cfg.clamp_center else None,
            dwell_count=cfg.dwell_count,
            dwell_init=cfg.dwell_init if cfg.dwell_count else 0.0,
        )
    scoring = SCORERS.check(cfg.attention_scoring)
    scorer = None if scoring == "none" else (lambda dim: SCORERS.build(scoring, cfg, dim=dim))
    parts = {}  # the options of the parts the attention has (options.cross_attention_reads says which)
    if location is not None:
        parts.update(location_projection=cfg.location_projection)
        if cfg.linear_init == "xavier" and location.reference.heads:  # else "joint" draws as "per-head"
            parts.update(location_head_init=cfg.location_head_init)
    if scorer is not None:
        parts.update(query_bias=cfg.attention_query_bias, scorer_init=cfg.scorer_init)
    if scorer is not None and location is not None:
        parts.update(position_reference=cfg.position_reference, mix_temperature=cfg.mix_temperature)
    return CrossAttention(
        encoder_dim,
        query_dim,
        attention_dim=cfg.attention_dim,
        scorer=scorer,
        location=location,
        direction_gate=gate,
        linear_init=cfg.linear_init,
        value_path=cfg.value_path,
        **parts,
    )


def build_embedding(dictionary, dim: int, init: str) -> nn.Embedding:
    """scaled-normal: N(0, 1/dim); kaiming-fan-out: N(0, 2/V) with V the vocabulary size (torch's
    kaiming_normal_ with mode="fan_out" on a V x dim matrix).  The padding row is zero."""
    check_choice("embedding-init", init, EMBEDDING_INITS)
    embedding = nn.Embedding(len(dictionary), dim, padding_idx=dictionary.pad())
    std = dim**-0.5 if init == "scaled-normal" else (2.0 / len(dictionary)) ** 0.5
    nn.init.normal_(embedding.weight, 0, std)
    nn.init.zeros_(embedding.weight[dictionary.pad()])
    return embedding


class GRUEncoder(FairseqEncoder):
    """Embeds [START, x_1 .. x_n, (</s>,) END] (START / END are learned vectors, not vocabulary
    items) and runs bidirectional GRUs; no positional encoding."""

    fast_path = None  # the code it runs: None, the reference, or fast_path.FastPath (set by fast_path.install)

    def __init__(
        self,
        dictionary,
        embed_tokens: nn.Embedding,
        hidden_size: int = 64,
        num_layers: int = 1,
        dropout: float = 0.5,
        boundary_init: str = "normal",
        keep_source_eos: bool = True,
        max_positions: int = 1024,
        state_noise: float = 0.0,
    ):
        """hidden_size: GRU size per direction; dropout: on the encodings; boundary_init: START /
        END drawn from N(0, 1/dim) ("normal") or "zeros"; keep_source_eos: the source's </s> is
        an encoder position (between the tokens and END); state_noise: in training, the standard
        deviation of the noise added to the GRUs' state after every step (``bidirectional_gru``)."""
        super().__init__(dictionary)
        check_choice("boundary-init", boundary_init, BOUNDARY_INITS)
        embed_dim = embed_tokens.embedding_dim
        self.padding_idx = dictionary.pad()
        self.eos_idx = dictionary.eos()
        self.keep_source_eos = keep_source_eos
        self.embed_tokens = embed_tokens
        scale = embed_dim**-0.5 if boundary_init == "normal" else 0.0
        self.start = nn.Parameter(torch.randn(embed_dim) * scale)
        self.end = nn.Parameter(torch.randn(embed_dim) * scale)
        self.rnn = nn.GRU(embed_dim, hidden_size, num_layers=num_layers, batch_first=True, bidirectional=True)
        self.num_layers = num_layers
        self.output_dim = 2 * hidden_size
        self.dropout_out = Dropout(dropout)
        self._max_positions = max_positions
        self.state_noise = state_noise

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
        rows = torch.arange(batch, device=tokens.device)
        vocabulary = self.embed_tokens.num_embeddings
        if table_applies(self.embed_tokens, batch * (width + 2), extra_rows=2):
            # the rows of [E; START; END] by index, the GRU's input gates once per row (token_tables.py)
            ids = tokens.new_full((batch, width + 2), vocabulary)  # START
            ids[:, 1 : width + 1] = tokens  # columns past a row's tokens are never read
            ids[rows, token_lengths + 1] = vocabulary + 1  # END
            x = TokenRows(ids, torch.cat([embedding_rows(self.embed_tokens), self.start[None], self.end[None]]))
        else:
            x = self.start.new_zeros(batch, width + 2, self.start.numel())
            x[:, 0] = self.start
            x[:, 1 : width + 1] = self.embed_tokens(tokens)  # columns past a row's tokens are never read
            x[rows, token_lengths + 1] = self.end
        # = self.rnn over the packed sequences, zero past each row's length
        noise = self.state_noise if self.training else 0.0
        fast = self.fast_path if self.fast_path is not None and self.fast_path.serves() else None
        encodings, final = bidirectional_gru(self.rnn, x, lengths, state_noise=noise, fast_path=fast)
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


class GRUDecoder(FairseqIncrementalDecoder):
    fast_path = None  # the code it runs: None, the reference, or fast_path.FastPath (set by fast_path.install)

    def __init__(
        self,
        dictionary,
        embed_tokens: nn.Embedding,
        attention: CrossAttention,
        hidden_size: int,
        num_layers: int = 1,
        encoder_layers: int = 1,
        encoder_summary_dim: Optional[int] = None,
        dropout: float = 0.0,
        share_input_output_embed: bool = True,
        linear_init: str = "pytorch",
        max_positions: int = 1024,
        start_index: Optional[int] = None,
    ):
        """encoder_summary_dim: size of e_cls (h_0 is e_cls, through a projection when the sizes
        differ; default: hidden_size); dropout: on the decoder outputs; share_input_output_embed:
        logits = W h_t E^T + b with E the target embeddings; linear_init "xavier" draws the output
        layer Xavier-uniform."""
        super().__init__(dictionary)
        encoder_summary_dim = encoder_summary_dim or hidden_size
        embed_dim = embed_tokens.embedding_dim
        self.embed_tokens = embed_tokens
        self.attention = attention
        self.cells = nn.ModuleList(
            nn.GRUCell(embed_dim + attention.context_dim if i == 0 else hidden_size, hidden_size)
            for i in range(num_layers)
        )
        self.num_layers = num_layers
        self.encoder_layers = encoder_layers
        # h_0 = e_cls; a projection only when the sizes differ
        self.init_proj = None if encoder_summary_dim == hidden_size else nn.Linear(encoder_summary_dim, hidden_size)
        self.dropout_out = Dropout(dropout)
        self.share_input_output_embed = share_input_output_embed
        if self.share_input_output_embed:
            # logits = W h_t E^T + b, E the target embedding matrix
            self.out_proj = nn.Linear(hidden_size, embed_dim)
            self.out_bias = nn.Parameter(torch.zeros(len(dictionary)))
        else:
            self.out_proj = nn.Linear(hidden_size, len(dictionary))
        if linear_init == "xavier":
            nn.init.xavier_uniform_(self.out_proj.weight)
        self.need_attn = False  # fairseq-generate --print-alignment switches it on
        self.decodes_greedily = True  # metrics.GreedyDecoder may decode it (incremental state, reordering)
        self._max_positions = max_positions
        # the first step's input: fairseq's </s> (None), or another row (the release's <sos>: <s>)
        self.start_index = start_index

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

    def begin_pass(self, encoder_out, incremental_state=None, fold_value_output: bool = False):
        """The memory the steps read and the state they start from: kept in the incremental state
        after a decoding's first call, else made (``_start_state``)."""
        if incremental_state is not None:
            memory = self.get_incremental_state(incremental_state, "memory")
            if memory is not None:
                return memory, self.get_incremental_state(incremental_state, "state")
        return self._start_state(encoder_out, fold_value_output)

    def end_pass(self, incremental_state, memory, hidden, location) -> None:
        """Keep the memory and the state after the last step for a decoding's next call."""
        if incremental_state is None:
            return
        new_state = {"hidden": torch.stack(hidden)}
        if location is not None:
            new_state["location"] = location
        self.set_incremental_state(incremental_state, "memory", memory)
        self.set_incremental_state(incremental_state, "state", new_state)

    def _start_state(self, encoder_out, fold_value_output: bool = False):
        """The memory the steps read (``CrossAttention.prepare``) and the first state; the values
        before their output map with ``fold_value_output`` (the fast path's choice)."""
        summary = encoder_rows(encoder_out, "summary")
        memory = self.attention.prepare(
            encoder_rows(encoder_out, "encodings"),
            summary[-1],
            encoder_rows(encoder_out, "lengths"),
            value_output=not fold_value_output,
        )
        state = {"hidden": self.initial_hidden(summary)}
        if self.attention.tracks_position:
            state["location"] = self.attention.initial_state(memory)
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
        if incremental_state is not None:
            first_step = prev_output_tokens.size(1)
            prev_output_tokens = prev_output_tokens[:, -1:]
        if self.start_index is not None and first_step == 1:  # y_0 = <s> instead of fairseq's </s>
            prev_output_tokens = torch.cat(
                [
                    prev_output_tokens.new_full((prev_output_tokens.size(0), 1), self.start_index),
                    prev_output_tokens[:, 1:],
                ],
                dim=1,
            )
        fast = self.fast_path if self.fast_path is not None and self.fast_path.serves() else None
        if fast is None:
            outputs, attention, memory = self.reference_pass(prev_output_tokens, encoder_out, incremental_state,
                                                             first_step)  # fmt: skip
        else:
            outputs, attention, memory = fast.decoder_pass(self, prev_output_tokens, encoder_out, incremental_state,
                                                           first_step)  # fmt: skip
        if self.training and torch.is_grad_enabled() and not getattr(self, "_code_logged", False):
            self._code_logged = True  # once, for the run's record
            code = fast_path.REFERENCE if fast is None else fast.training_code(self)
            logger.info(compiled.TRAINING_CODE_LINE + code)
        features = self.dropout_out(outputs)
        attn = None
        if self.need_attn and not self.training:
            attn = source_layout_attention(attention, encoder_out)
        return features, {"attn": [attn], "attention": attention, "direction": memory.get("direction")}

    def reference_pass(self, tokens, encoder_out, incremental_state, first_step):
        """The decoder's steps as the paper writes them, y_{t-1} (B, T) -> (outputs h_1..h_T of the
        last layer (B, T, H), attention (B, T, S), the memory):

            c_t, a_t = attention(h_{t-1})       q_t, the scores, the location focus, their mix
                                                 and the context (CrossAttention)
            h_t      = GRU([e(y_{t-1}); c_t], h_{t-1})
        """
        memory, state = self.begin_pass(encoder_out, incremental_state)
        hidden = list(state["hidden"].unbind(0))  # h_{t-1} of each layer
        location = state.get("location")  # pa_{t-1} (and the dwell count), or None
        outputs, weights = [], []
        for j, embedded in enumerate(self.embed_tokens(tokens).unbind(1)):
            context, step_weights, location = self.attention(hidden[-1], memory, location, first_step + j)
            hidden[0] = self.cells[0](torch.cat([embedded, context], dim=-1), hidden[0])
            for layer in range(1, self.num_layers):
                hidden[layer] = self.cells[layer](hidden[layer - 1], hidden[layer])
            outputs.append(hidden[-1])
            weights.append(step_weights)
        self.end_pass(incremental_state, memory, hidden, location)
        return torch.stack(outputs, dim=1), torch.stack(weights, dim=1), memory

    def output_layer(self, features):
        if not self.share_input_output_embed:
            return self.out_proj(features)
        embeddings = self.embed_tokens.weight  # E (V, d)
        if embeddings.size(0) <= embeddings.size(1):
            # logits = E (W h + b) + c = (E W) h + (E b + c): with no more words than the embedding
            # has dimensions (the digit tasks: 14 against 64), one product of H x V a position instead
            # of H x d and d x V; E W is V x d x H once per call.  The same function.
            return F.linear(features, embeddings @ self.out_proj.weight,
                            torch.addmv(self.out_bias, embeddings, self.out_proj.bias))  # fmt: skip
        return F.linear(self.out_proj(features), embeddings, self.out_bias)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        """fairseq's, but log-probabilities on the CPU over a vocabulary whose size is not a multiple
        of 8 as x - m - log sum exp(x - m) (m the row's maximum, held constant: the function does not
        depend on it): torch's CPU log_softmax is several times slower over such a vocabulary (14
        symbols) than over one of a multiple of 8, and slower than this forward and backward.  The
        same function, to float rounding, in float32 as fairseq's (float64 kept in float64)."""
        logits = net_output[0]
        if log_probs and logits.device.type == "cpu" and logits.size(-1) % 8:
            x = logits if logits.dtype == torch.float64 else logits.float()
            shifted = x - x.detach().amax(dim=-1, keepdim=True)
            return shifted - shifted.exp().sum(dim=-1, keepdim=True).log()
        return super().get_normalized_probs(net_output, log_probs, sample)

    def reorder_incremental_state(self, incremental_state, new_order):
        state = self.get_incremental_state(incremental_state, "state")
        if state is None:
            return
        reordered = {"hidden": state["hidden"].index_select(1, new_order)}
        if "location" in state:
            reordered["location"] = {k: v.index_select(0, new_order) for k, v in state["location"].items()}
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
    return to_source_layout(weights, ignored, offset=1)  # position 0 is START


# --- named architectures (presets) and their hydra configs --------------------------------------

REGISTERED_PRESETS: Dict[str, Dict[str, Any]] = {}


def _store_preset_config(name: str, options: Mapping[str, Any]) -> None:
    """``name`` as a hydra config (``model: NAME`` / ``model._name=NAME``): the model's dataclass
    with the preset's values as defaults, so that the preset's values sit under the user's."""
    class_name = "".join(part.capitalize() for part in name.split("_")) + "Config"
    config = config_class(class_name, options)
    MODEL_DATACLASS_REGISTRY[name] = config
    ARCH_MODEL_NAME_REGISTRY[name] = name  # a hydra config names the preset's own node
    node = config()
    node._name = name
    ConfigStore.instance().store(name=name, group="model", node=node, provider="fairseq_monoattn")


def architecture(name: str, options: Mapping[str, Any]):
    """The function fairseq calls for ``--arch NAME`` on the command line: the preset's options where
    the command line leaves them unset, then the options of the conventions' group (``--conventions``,
    else the preset's) that neither sets; the rest: GRUSeq2SeqModel.build_model."""

    def set_options(cfg):
        fill_missing(cfg, options)
        fill_missing(cfg, convention_values(options_of(cfg)))

    set_options.__name__ = name
    return set_options


def register_gru_preset(name: str, options: Mapping[str, Any]) -> None:
    """``register_preset(name, options, model="gru_seq2seq")`` (``presets.py``): ``--arch NAME``,
    ``gru_seq2seq`` with ``options`` set, and ``model._name=NAME`` under hydra."""
    options = dict(options)
    check_preset(name, options, known=option_fields())  # OptionError naming the preset and the option
    register_model_architecture(MODEL_NAME, name)(architecture(name, options))
    REGISTERED_PRESETS[name] = options
    _store_preset_config(name, options)


def refresh_configs() -> None:
    """Rebuild the model's dataclass (and the presets') from the options registered now."""
    global GRUSeq2SeqConfig
    GRUSeq2SeqConfig = config_class()
    setattr(GRUSeq2SeqModel, "__dataclass", GRUSeq2SeqConfig)  # where fairseq looks for it
    MODEL_DATACLASS_REGISTRY[MODEL_NAME] = GRUSeq2SeqConfig
    node = GRUSeq2SeqConfig()
    node._name = MODEL_NAME
    ConfigStore.instance().store(name=MODEL_NAME, group="model", node=node, provider="fairseq_monoattn")
    for name, options in REGISTERED_PRESETS.items():
        _store_preset_config(name, options)


ARCH_CONFIG_REGISTRY[MODEL_NAME] = architecture(MODEL_NAME, {})  # fairseq registered a no-op for the base
for _name, _options in PRESETS.items():
    register_preset(_name, _options)
on_registration(refresh_configs)
