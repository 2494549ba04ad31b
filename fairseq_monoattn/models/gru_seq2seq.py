"""A bidirectional-GRU encoder-decoder whose cross-attention is configurable.

The encoder wraps every source in learned START / END vectors and runs a (stack of)
bidirectional GRU(s); the decoder is a GRU stack fed with [emb(y_{t-1}); context_t] where
the context comes from :class:`CrossAttention` queried with h_{t-1}.  Each model of the
paper is a named architecture (``presets.py``) over this one registered model.
"""

import torch
from torch import nn
import torch.nn.functional as F
from fairseq import utils
from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
)

from ..modules.cross_attention import POSITION_REFERENCES, CrossAttention
from ..modules.content import SCORERS
from ..modules.direction_gate import DirectionGate
from ..modules.location import REFERENCES, STEP_ACTIVATIONS, LocationAttention

DEFAULT_MAX_POSITIONS = 1_000_000  # nothing in the model depends on a maximum length


@register_model("gru_seq2seq")
class GRUSeq2SeqModel(FairseqEncoderDecoderModel):
    @staticmethod
    def add_args(parser):
        bool_ = utils.eval_bool
        parser.add_argument("--encoder-embed-dim", type=int, metavar="N", help="encoder embedding size")
        parser.add_argument("--encoder-hidden-size", type=int, metavar="N", help="GRU size per direction")
        parser.add_argument("--encoder-layers", type=int, metavar="N", help="bidirectional GRU layers")
        parser.add_argument("--decoder-embed-dim", type=int, metavar="N", help="decoder embedding size")
        parser.add_argument("--decoder-hidden-size", type=int, metavar="N", help="decoder GRU size")
        parser.add_argument("--decoder-layers", type=int, metavar="N", help="decoder GRU layers")
        parser.add_argument("--attention-dim", type=int, metavar="N", help="key/query/value size (default: decoder hidden size)")
        parser.add_argument("--dropout", type=float, metavar="D", help="dropout on the encoder outputs")
        parser.add_argument("--decoder-dropout", type=float, metavar="D", help="dropout on the decoder outputs")
        parser.add_argument("--share-decoder-input-output-embed", type=bool_, metavar="BOOL",
                            help="tie the output projection to the target embeddings")
        parser.add_argument("--attention-scoring", choices=["none"] + list(SCORERS),
                            help="query-key scores: content, relative (Transformer-XL), rotary, or none")
        parser.add_argument("--location-attention", type=bool_, metavar="BOOL",
                            help="use Gaussian location attention (mixed with the scores if both are on)")
        parser.add_argument("--direction-gate", type=bool_, metavar="BOOL",
                            help="attend to g*e + (1-g)*reverse(e) instead of e")
        parser.add_argument("--reference", choices=REFERENCES,
                            help="reference position of the location focus")
        parser.add_argument("--step-activation", choices=STEP_ACTIVATIONS,
                            help="activation of the step taken from the reference position")
        parser.add_argument("--clamp-center", type=bool_, metavar="BOOL",
                            help="leaky-clamp the location centre into [0, 1]")
        parser.add_argument("--position-reference", choices=POSITION_REFERENCES,
                            help="previous position from the mixed attention or the location-only one (PR)")
        parser.add_argument("--sigma-min", type=float, metavar="F", help="minimum width of the location focus")
        parser.add_argument("--step-temperature", type=float, metavar="F", help="T in sigmoid(T * rho) steps")
        parser.add_argument("--softstair-temperature", type=float, metavar="F", help="softstair temperature")
        parser.add_argument("--clamp-slope", type=float, metavar="F", help="leaky slope of the centre clamp")
        parser.add_argument("--mono-gate-init", type=float, metavar="F", help="initial logit of Mono's ReLU gate")
        parser.add_argument("--mix-temperature", type=float, metavar="F", help="beta in the content/location mix")
        parser.add_argument("--direction-temperature", type=float, metavar="F", help="beta in the direction gate")
        parser.add_argument("--max-source-positions", type=int, metavar="N", help="maximum source length")
        parser.add_argument("--max-target-positions", type=int, metavar="N", help="maximum target length")

    @classmethod
    def build_model(cls, args, task):
        from .presets import base_architecture

        base_architecture(args)
        encoder = GRUEncoder(
            task.source_dictionary,
            embed_dim=args.encoder_embed_dim,
            hidden_size=args.encoder_hidden_size,
            num_layers=args.encoder_layers,
            dropout_out=args.dropout,
            max_positions=args.max_source_positions,
        )
        decoder = GRUDecoder(
            task.target_dictionary,
            attention=build_attention(args, encoder.output_dim, args.decoder_hidden_size),
            encoder_layers=args.encoder_layers,
            encoder_summary_dim=encoder.output_dim,
            embed_dim=args.decoder_embed_dim,
            hidden_size=args.decoder_hidden_size,
            num_layers=args.decoder_layers,
            dropout_out=args.decoder_dropout,
            share_input_output_embed=args.share_decoder_input_output_embed,
            max_positions=args.max_target_positions,
        )
        return cls(encoder, decoder)

    def max_positions(self):
        return (self.encoder.max_positions(), self.decoder.max_positions())


def build_attention(args, encoder_dim: int, query_dim: int) -> CrossAttention:
    scoring = None if args.attention_scoring == "none" else args.attention_scoring
    location = None
    if args.location_attention:
        location = LocationAttention(
            reference=args.reference,
            step_activation=args.step_activation,
            clamp_center=args.clamp_center,
            sigma_min=args.sigma_min,
            step_temperature=args.step_temperature,
            softstair_temperature=args.softstair_temperature,
            clamp_slope=args.clamp_slope,
            mono_gate_init=args.mono_gate_init,
        )
    gate = DirectionGate(encoder_dim, args.direction_temperature) if args.direction_gate else None
    return CrossAttention(
        encoder_dim,
        query_dim,
        args.attention_dim or query_dim,
        scoring=scoring,
        location=location,
        direction_gate=gate,
        position_reference=args.position_reference,
        mix_temperature=args.mix_temperature,
    )


class GRUEncoder(FairseqEncoder):
    """Embeds [START, x_1 .. x_n, END] (START / END are learned vectors, not vocabulary items)
    and runs bidirectional GRUs; no positional encoding."""

    def __init__(self, dictionary, embed_dim=64, hidden_size=64, num_layers=1, dropout_out=0.5,
                 max_positions=DEFAULT_MAX_POSITIONS):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, padding_idx=self.padding_idx)
        nn.init.normal_(self.embed_tokens.weight, 0, embed_dim ** -0.5)
        nn.init.zeros_(self.embed_tokens.weight[self.padding_idx])
        self.start = nn.Parameter(torch.randn(embed_dim) * embed_dim ** -0.5)
        self.end = nn.Parameter(torch.randn(embed_dim) * embed_dim ** -0.5)
        self.rnn = nn.GRU(embed_dim, hidden_size, num_layers=num_layers, batch_first=True, bidirectional=True)
        self.num_layers = num_layers
        self.output_dim = 2 * hidden_size
        self.dropout_out = nn.Dropout(dropout_out)
        self._max_positions = max_positions

    def forward(self, src_tokens, src_lengths=None, **kwargs):
        """src_tokens (B, T), left- or right-padded: each row is realigned to the left, so
        every example sees its own positions 0 .. n+1 whatever the batch."""
        not_pad = src_tokens.ne(self.padding_idx)
        token_lengths = not_pad.long().sum(dim=1)
        tokens = right_align(src_tokens, not_pad)
        batch, width = tokens.shape
        lengths = token_lengths + 2  # START and END
        x = self.start.new_zeros(batch, width + 2, self.start.numel())
        x[:, 0] = self.start
        x[:, 1:width + 1] = self.embed_tokens(tokens)
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
            "source_padding": src_tokens.eq(self.padding_idx),  # layout of src_tokens, for alignments
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


def right_align(tokens, not_pad):
    """Move each row's real tokens to the front, keeping their order (fairseq left-pads
    sources by default; right-padded or unpadded input passes through unchanged)."""
    order = torch.sort((~not_pad).to(torch.uint8), dim=1, stable=True).indices
    return tokens.gather(1, order)


class GRUDecoder(FairseqIncrementalDecoder):
    def __init__(self, dictionary, attention: CrossAttention, encoder_layers: int, encoder_summary_dim: int,
                 embed_dim=64, hidden_size=128, num_layers=1, dropout_out=0.0,
                 share_input_output_embed=True, max_positions=DEFAULT_MAX_POSITIONS):
        super().__init__(dictionary)
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, padding_idx=dictionary.pad())
        nn.init.normal_(self.embed_tokens.weight, 0, embed_dim ** -0.5)
        nn.init.zeros_(self.embed_tokens.weight[dictionary.pad()])
        self.attention = attention
        context_dim = attention.values[-1].out_features
        self.cells = nn.ModuleList(
            nn.GRUCell(embed_dim + context_dim if i == 0 else hidden_size, hidden_size) for i in range(num_layers)
        )
        self.num_layers = num_layers
        self.encoder_layers = encoder_layers
        # h_0 = e_cls; a projection only when the sizes differ
        self.init_proj = None if encoder_summary_dim == hidden_size else nn.Linear(encoder_summary_dim, hidden_size)
        self.dropout_out = nn.Dropout(dropout_out)
        self.share_input_output_embed = share_input_output_embed
        if share_input_output_embed:
            # logits = W h_t E^T + b, E the target embedding matrix
            self.out_proj = nn.Linear(hidden_size, embed_dim)
            self.out_bias = nn.Parameter(torch.zeros(len(dictionary)))
        else:
            self.out_proj = nn.Linear(hidden_size, len(dictionary))
        self.need_attn = False  # fairseq-generate --print-alignment switches it on
        self._max_positions = max_positions

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
        fairseq's alignments, or None], "attention": weights over [START, tokens, END] (B, T, n+2)}``."""
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
        return features, {"attn": [attn], "attention": attention}

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
    """Map attention over the wrapped, right-aligned source [START, x.., END] back onto the
    columns of ``src_tokens`` (as fairseq expects for --print-alignment)."""
    padding = encoder_rows(encoder_out, "source_padding")  # (B, T) in src_tokens' layout
    real = ~padding
    # rank of each real column among the row's real columns, i.e. its token index
    token_index = real.long().cumsum(dim=1) - 1
    index = (token_index + 1).clamp(min=0).unsqueeze(1).expand(-1, weights.size(1), -1)
    mapped = weights.gather(2, index)
    return mapped.masked_fill(padding.unsqueeze(1), 0.0)
