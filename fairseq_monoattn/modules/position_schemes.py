"""Position schemes of the Transformer presets: how the encoder's and the decoder's self-attention
know where their tokens are, a registry of named entries (``--positions NAME``) a user can add to.

A scheme is built once per stack (the encoder's, the decoder's) and shared by the stack's layers.
It may do any of three things, each a method of :class:`PositionScheme`:

* ``embedding(positions)``: a vector per token added to its embedding (absolute positions:
  fairseq's ``sinusoidal`` and ``learned``);
* ``rotate(x, positions)``: rotate every head's queries and keys by their positions before the
  dot product (``rope``);
* ``bias(query_positions, key_positions)``: a score added to every head's attention score of a
  query for a key (``alibi``, ``fire``).

``positions`` are 0-based token indices that count real tokens only, as fairseq's positional
embeddings count them: a left-padded source's first real token is at 0 whatever its padding, so an
example gets the same positions alone as in a batch.  In incremental decoding the decoder gives the
positions of every step so far; the step being decoded is the last.  ``randomized`` wraps any other
scheme and, in training only, gives it a sorted random subset of [0, L) as the positions instead.

``none``, ``sinusoidal`` and ``learned`` are fairseq's own options (``--no-token-positional-
embeddings``, ``--encoder-learned-pos``, ``--decoder-learned-pos``): chosen alone, the model sets
those and fairseq's Transformer runs exactly as it always has.  The others run the plugin's
self-attention (:class:`PositionedSelfAttention`), fairseq's with the scheme's rotation and bias.
docs/positions.md gives each scheme's equation and paper.
"""

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.modules import MultiheadAttention, PositionalEmbedding, SinusoidalPositionalEmbedding
from torch import nn

from ..errors import PluginError
from ..registry import ENTRY_OPTIONS, Registry
from .positions import rotate_pairs


class PositionScheme(nn.Module):
    """How one stack's self-attention knows where its tokens are.  An entry is built with
    ``cls(settings, **sizes)`` (``cls(**sizes)`` without settings); ``sizes``: ``heads``,
    ``head_dim``, ``embed_dim`` (the stack's), ``padding_idx`` (the dictionary's), ``max_positions``
    (the most positions it must know: fairseq's --max-*-positions, or randomized's L) and
    ``causal`` (True in the decoder, whose queries see only earlier keys).

    Every method gets positions as (B, T) long tensors (see the module's docstring); a method
    left as it is here does nothing.  A scheme that rotates or biases sets ``in_attention``."""

    in_attention = False  # True: rotate() or bias() changes the attention (the plugin's self-attention runs)
    # "sinusoidal", "learned" or "none": chosen alone (not wrapped), the scheme is fairseq's own option
    fairseq_option: Optional[str] = None

    def __init__(self, heads: int, head_dim: int, embed_dim: int, padding_idx: int, max_positions: int, causal: bool):
        super().__init__()
        self.heads, self.head_dim, self.embed_dim = heads, head_dim, embed_dim
        self.padding_idx, self.max_positions, self.causal = padding_idx, max_positions, causal

    def embedding(self, positions: torch.Tensor) -> Optional[torch.Tensor]:
        """(B, T, embed_dim) added to the token embeddings, or None."""
        return None

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x (B, H, T, head_dim), queries or keys, at positions (B, T) -> the same shape."""
        return x

    def bias(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> Optional[torch.Tensor]:
        """(B, H, T, S) added to the attention scores of queries (B, T) for keys (B, S), or None."""
        return None

    def training_positions(self, kept: torch.Tensor) -> Optional[torch.Tensor]:
        """The positions (B, T) of a training batch whose real tokens are ``kept`` (B, T), or None:
        the plain ones (randomized's draw)."""
        return None


POSITION_OPTIONS: Dict[str, dataclasses.Field] = {}  # the schemes' settings fields: options of the Transformer
POSITIONS = Registry("positions", "position scheme", PositionScheme, entry_options=POSITION_OPTIONS)


def register_position_scheme(name: str, settings: Optional[type] = None):
    """Class decorator: ``--positions NAME`` runs ``cls`` (a :class:`PositionScheme`), with
    ``settings`` (a dataclass whose fields become options of the Transformer models) or none."""
    for f in dataclasses.fields(settings) if settings is not None else ():
        if f.name in ENTRY_OPTIONS:
            raise ValueError(f"{settings.__name__}.{f.name}: an attention entry has an option of that name")
    return POSITIONS.register(name, settings)


class PositionError(PluginError, ValueError):
    """Position options that do not fit together or a sequence a scheme cannot place."""


# --- fairseq's absolute positions, NoPE ----------------------------------------------------------


@register_position_scheme("sinusoidal")
class SinusoidalPositions(PositionScheme):
    """fairseq's sinusoidal embedding of each position (Vaswani et al., 2017), from fairseq's table."""

    fairseq_option = "sinusoidal"

    def __init__(self, **sizes):
        super().__init__(**sizes)
        rows = self.max_positions + self.padding_idx + 1
        table = SinusoidalPositionalEmbedding.get_embedding(rows, self.embed_dim, self.padding_idx)
        self.register_buffer("table", table, persistent=False)  # fixed: no checkpoint entry

    def embedding(self, positions):
        return F.embedding(positions + self.padding_idx + 1, self.table)


@register_position_scheme("learned")
class LearnedPositions(PositionScheme):
    """fairseq's learned embedding of each position (a table of max_positions rows)."""

    fairseq_option = "learned"

    def __init__(self, **sizes):
        super().__init__(**sizes)
        self.table = PositionalEmbedding(self.max_positions, self.embed_dim, self.padding_idx, learned=True)

    def embedding(self, positions):
        return F.embedding(positions + self.padding_idx + 1, self.table.weight)


@register_position_scheme("none")
class NoPositions(PositionScheme):
    """NoPE: no positions anywhere; a causal decoder can still count (Kazemnejad et al., 2023)."""

    fairseq_option = "none"


# --- rotary, ALiBi, FIRE -------------------------------------------------------------------------


@dataclass
class RotarySettings:
    rope_base: float = field(default=10000.0, metadata={"help": "RoPE's base b: pair j turns by p b^(-2j/d)"})

    def __post_init__(self):
        if not (self.rope_base > 1 and math.isfinite(self.rope_base)):
            raise ValueError(f"rope_base must be > 1 and finite, got {self.rope_base}")


@register_position_scheme("rope", settings=RotarySettings)
class RotaryPositions(PositionScheme):
    """RoPE (Su et al., 2021): each head's query and key at position p have their pairs
    (x_j, x_{j+d/2}) turned by the angle p * base^(-2j/d), so q_i . k_j depends on i - j only."""

    in_attention = True

    def __init__(self, settings: RotarySettings, **sizes):
        super().__init__(**sizes)
        if self.head_dim % 2:
            raise PositionError(f"--positions rope needs an even head size, got {self.head_dim}")
        self.base = settings.rope_base

    def rotate(self, x, positions):
        return rotate_pairs(x, positions.unsqueeze(1), base=self.base)  # positions (B, 1, T) against x (B, H, T)


def alibi_slopes(heads: int) -> torch.Tensor:
    """m_h = 2^(-8h/H), h = 1 .. H: ALiBi's geometric head slopes (1/2 .. 1/256 for 8 heads)."""
    return torch.pow(2.0, -8.0 * torch.arange(1, heads + 1, dtype=torch.float64) / heads)


@register_position_scheme("alibi")
class AlibiPositions(PositionScheme):
    """ALiBi (Press et al., ICLR 2022): head h's score of query i for key j loses m_h |i - j|.
    In the decoder, whose keys are j <= i, that is ALiBi's m_h (i - j); in the encoder the same
    penalty on either side (a symmetric form)."""

    in_attention = True

    def __init__(self, **sizes):
        super().__init__(**sizes)
        self.register_buffer("slopes", alibi_slopes(self.heads).float(), persistent=False)

    def bias(self, query_positions, key_positions):
        distance = (query_positions.unsqueeze(2) - key_positions.unsqueeze(1)).abs()  # (B, T, S)
        slopes = self.slopes.to(torch.promote_types(self.slopes.dtype, torch.float32))
        return -slopes.view(1, -1, 1, 1) * distance.unsqueeze(1).to(slopes.dtype)


@dataclass
class FireSettings:
    fire_hidden: int = field(default=32, metadata={"help": "hidden units of FIRE's MLP (each head its own)"})
    fire_threshold: float = field(default=32.0, metadata={"help": "FIRE's L at initialisation (learned)"})

    def __post_init__(self):
        if self.fire_hidden < 1:
            raise ValueError(f"fire_hidden must be at least 1, got {self.fire_hidden}")
        if not (self.fire_threshold >= 1 and math.isfinite(self.fire_threshold)):
            raise ValueError(f"fire_threshold must be at least 1 and finite, got {self.fire_threshold}")


@register_position_scheme("fire", settings=FireSettings)
class FirePositions(PositionScheme):
    """FIRE (Li et al., ICLR 2024): head h's score of query i for key j gains
    f_h(psi(i - j) / psi(max(L, i))), psi(x) = log(c x + 1), f_h a one-hidden-layer ReLU MLP of
    head h's own, c > 0 and L >= 1 learned (c from 1, L from --fire-threshold).  The decoder sees
    i - j >= 0 only, as the paper's causal form; the encoder's keys after the query get the same
    function of -psi(j - i) (psi extended as an odd function), so f_h tells the sides apart."""

    in_attention = True

    def __init__(self, settings: FireSettings, **sizes):
        super().__init__(**sizes)
        hidden = settings.fire_hidden
        self.hidden_weight = nn.Parameter(torch.randn(self.heads, hidden))
        self.hidden_bias = nn.Parameter(torch.empty(self.heads, hidden).uniform_(-1, 1))
        self.out_weight = nn.Parameter(torch.randn(self.heads, hidden) / math.sqrt(hidden))
        self.out_bias = nn.Parameter(torch.zeros(self.heads))
        self.log_c = nn.Parameter(torch.zeros(()))  # c = exp(log_c) > 0, 1 at first
        self.threshold = nn.Parameter(torch.tensor(float(settings.fire_threshold)))

    def psi(self, x: torch.Tensor) -> torch.Tensor:
        """sign(x) log(c |x| + 1)."""
        return torch.sign(x) * torch.log1p(self.log_c.exp() * x.abs())

    def normalized_distance(self, query_positions, key_positions) -> torch.Tensor:
        """(B, T, S): psi(i - j) / psi(max(L, i))."""
        dtype = torch.promote_types(self.threshold.dtype, torch.float32)
        i = query_positions.to(dtype).unsqueeze(2)
        j = key_positions.to(dtype).unsqueeze(1)
        threshold = self.threshold.to(dtype).clamp(min=1.0)
        return self.psi(i - j) / self.psi(torch.maximum(threshold, i))

    def bias(self, query_positions, key_positions):
        # the MLP runs once for each pair of positions present, not for each sentence: its hidden
        # layer is (heads, positions, positions, hidden), which per sentence would not fit in
        # memory at the lengths scored (500 symbols)
        queries, query_index = torch.unique(query_positions, return_inverse=True)  # (Q,), (B, T)
        keys, key_index = torch.unique(key_positions, return_inverse=True)  # (K,), (B, S)
        u = self.normalized_distance(queries.unsqueeze(0), keys.unsqueeze(0))[0].unsqueeze(-1)  # (Q, K, 1)
        heads = self.heads
        hidden = torch.relu(u * self.hidden_weight.view(heads, 1, 1, -1) + self.hidden_bias.view(heads, 1, 1, -1))
        table = (hidden * self.out_weight.view(heads, 1, 1, -1)).sum(-1) + self.out_bias.view(-1, 1, 1)  # (H, Q, K)
        return table[:, query_index.unsqueeze(2), key_index.unsqueeze(1)].transpose(0, 1)  # (B, H, T, S)


# --- randomized positions ------------------------------------------------------------------------


@dataclass
class RandomizedSettings:
    randomized_base: str = field(default="sinusoidal", metadata={"help": "the scheme whose positions are randomized"})
    randomized_length: int = field(
        default=2048, metadata={"help": "L: training positions are a sorted random subset of [0, L)"}
    )

    def __post_init__(self):
        if self.randomized_length < 1:
            raise ValueError(f"randomized_length must be at least 1, got {self.randomized_length}")


@register_position_scheme("randomized", settings=RandomizedSettings)
class RandomizedPositions(PositionScheme):
    """Randomized positions (Ruoss et al., ACL 2023) over another scheme (--randomized-base): in
    training, a sequence of n tokens gets the n smallest of n distinct positions drawn uniformly
    from [0, L), in order (torch's generator, which fairseq seeds every update); in evaluation the
    plain positions 0 .. n-1.  The base scheme computes everything else."""

    def __init__(self, settings: RandomizedSettings, base: PositionScheme, **sizes):
        super().__init__(**sizes)
        self.base = base
        self.length = settings.randomized_length
        self.in_attention = base.in_attention

    def embedding(self, positions):
        return self.base.embedding(positions)

    def rotate(self, x, positions):
        return self.base.rotate(x, positions)

    def bias(self, query_positions, key_positions):
        return self.base.bias(query_positions, key_positions)

    def training_positions(self, kept):
        return sorted_random_positions(kept, self.length)


def sorted_random_positions(kept: torch.Tensor, length: int, generator: Optional[torch.Generator] = None):
    """(B, T) long: the real tokens (``kept`` (B, T) bool, any padding side) of each row get, in
    order, a sorted sample of distinct positions of [0, length); padding gets 0."""
    batch, width = kept.shape
    count = int(kept.sum(dim=1).max()) if batch else 0
    if count > length:
        raise PositionError(
            f"--randomized-length {length} is shorter than a training sequence of {count} tokens: "
            "choose L above the longest training length"
        )
    draws = torch.rand(batch, length, device=kept.device, generator=generator).argsort(dim=1)[:, :width]
    real = kept.sum(dim=1, keepdim=True)
    slot = torch.arange(draws.size(1), device=kept.device).unsqueeze(0)
    draws = draws.masked_fill(slot >= real, length).sort(dim=1).values  # each row's sample first, in order
    rank = (kept.long().cumsum(dim=1) - 1).clamp(min=0)
    if draws.size(1) < width:  # length < width: only the first `length` slots hold draws
        draws = torch.cat([draws, draws.new_full((batch, width - draws.size(1)), length)], dim=1)
    return draws.gather(1, rank).masked_fill(~kept, 0)


def plain_positions(kept: torch.Tensor) -> torch.Tensor:
    """(B, T) long: each real token's index among its row's real tokens (fairseq's count), padding 0."""
    return ((kept.long().cumsum(dim=1) - 1).clamp(min=0)).masked_fill(~kept, 0)


# --- building a stack's scheme -------------------------------------------------------------------


def build_position_scheme(name: str, options, **sizes) -> PositionScheme:
    """The entry ``name`` with its settings read off ``options`` (the model's args); a wrapper
    (an entry whose settings name a ``randomized_base``) gets its base built first."""
    entry = POSITIONS.entry(name)
    if entry.settings is not None and "randomized_base" in entry.option_names:
        settings = POSITIONS.settings_for(name, options)
        base_name = POSITIONS.check(settings.randomized_base)
        if base_name == name:
            raise PositionError(f"--randomized-base must name another scheme than {name}")
        base_sizes = dict(sizes, max_positions=max(sizes["max_positions"], settings.randomized_length))
        base = build_position_scheme(base_name, options, **base_sizes)
        return entry.cls(settings, base=base, **base_sizes)
    return POSITIONS.build(name, options, **sizes)


class StackPositions(nn.Module):
    """Stands in for fairseq's ``embed_positions`` of a stack whose scheme is not fairseq's own:
    fairseq calls it with the stack's tokens (all the steps so far while decoding); it works out
    each token's position, keeps them in ``state`` for the stack's self-attentions, and returns the
    scheme's embedding of them (0 at padding, as fairseq's tables have it; zeros for a scheme
    without an embedding)."""

    def __init__(self, scheme: PositionScheme):
        super().__init__()
        self.scheme = scheme
        self.padding_idx = scheme.padding_idx
        self.max_positions = scheme.max_positions
        self.state = PositionState(scheme)
        self.register_buffer("_dtype", torch.zeros(()), persistent=False)  # follows .half() / .to()

    def forward(self, tokens: torch.Tensor, incremental_state=None, **unused) -> torch.Tensor:
        kept = tokens.ne(self.padding_idx)
        positions = self.scheme.training_positions(kept) if self.training else None
        if positions is None:
            positions = plain_positions(kept)
        self.state.positions = positions
        embedded = self.scheme.embedding(positions)
        if embedded is None:
            return self._dtype.new_zeros(tokens.size(0), tokens.size(1), 1)
        return embedded.to(self._dtype.dtype).masked_fill(~kept.unsqueeze(-1), 0.0)  # padding: 0, as fairseq's


class PositionState:
    """What a stack's self-attentions read (a plain object, so that the scheme's parameters are the
    stack's ``embed_positions``' only): the scheme, and the positions (B, P) of the last call."""

    def __init__(self, scheme: PositionScheme):
        self.scheme = scheme
        self.positions: Optional[torch.Tensor] = None


class PositionedSelfAttention(MultiheadAttention):
    """fairseq's self-attention (the same weights, masks and incremental state) with a position
    scheme's rotation of queries and keys and bias of the scores.  Keys are kept rotated in the
    incremental state; their positions are the last ones of the stack's positions."""

    @classmethod
    def replacing(cls, attention: MultiheadAttention, state: PositionState) -> "PositionedSelfAttention":
        if not attention.self_attention or attention.bias_k is not None or attention.add_zero_attn:
            raise PositionError("--positions: a scheme in the attention needs plain self-attention layers")
        # the weights are the replaced attention's: drawing fresh ones would move the random
        # numbers every later module draws, so that a model differed from its sinusoidal twin of one seed
        with torch.random.fork_rng(devices=[]):
            new = cls(
                attention.embed_dim,
                attention.num_heads,
                dropout=attention.dropout_module.p,
                bias=attention.k_proj.bias is not None,
                self_attention=True,
            )
        new.load_state_dict(attention.state_dict())
        new.position_state = state
        return new

    def forward(
        self,
        query,
        key=None,
        value=None,
        key_padding_mask=None,
        incremental_state=None,
        need_weights=True,
        static_kv=False,
        attn_mask=None,
        before_softmax=False,
        need_head_weights=False,
    ):
        steps, batch, _ = query.shape
        heads, size = self.num_heads, self.head_dim
        scheme, positions = self.position_state.scheme, self.position_state.positions

        def split(x):  # (T, B, C) -> (B, H, T, d)
            return x.view(x.size(0), batch, heads, size).permute(1, 2, 0, 3)

        q = split(self.q_proj(query) * self.scaling)
        k, v = split(self.k_proj(query)), split(self.v_proj(query))
        query_positions = positions[:, positions.size(1) - steps :]
        q, k = scheme.rotate(q, query_positions), scheme.rotate(k, query_positions)
        if incremental_state is not None:
            saved = self._get_input_buffer(incremental_state)
            if saved.get("prev_key") is not None:
                before = saved["prev_key"].size(2)
                k = torch.cat([saved["prev_key"], k], dim=2)
                v = torch.cat([saved["prev_value"], v], dim=2)
                previous_mask = saved.get("prev_key_padding_mask")
                if previous_mask is not None or key_padding_mask is not None:
                    if previous_mask is None:
                        previous_mask = key_padding_mask.new_zeros(batch, before)
                    if key_padding_mask is None:
                        key_padding_mask = previous_mask.new_zeros(batch, steps)
                    key_padding_mask = torch.cat([previous_mask, key_padding_mask], dim=1)
            saved["prev_key"], saved["prev_value"] = k, v
            saved["prev_key_padding_mask"] = key_padding_mask
            self._set_input_buffer(incremental_state, saved)
        keys = k.size(2)
        scores = q @ k.transpose(2, 3)  # (B, H, T, S)
        bias = scheme.bias(query_positions, positions[:, positions.size(1) - keys :])
        if bias is not None:
            scores = scores + bias.to(scores.dtype)
        if attn_mask is not None:
            scores = scores + attn_mask.to(scores.dtype)
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask.view(batch, 1, 1, keys).to(torch.bool), float("-inf"))
        weights = utils.softmax(scores, dim=-1).type_as(scores)
        context = self.dropout_module(weights) @ v  # (B, H, T, d)
        out = self.out_proj(context.permute(2, 0, 1, 3).reshape(steps, batch, heads * size))
        if not (need_weights or need_head_weights):
            return out, None
        head_weights = weights.transpose(0, 1)  # (H, B, T, S), fairseq's order of head weights
        return out, head_weights if need_head_weights else head_weights.mean(dim=0)


def install_position_scheme(stack, args, causal: bool) -> None:
    """Give an encoder or decoder (fairseq's, built) ``args.positions``: nothing to do for fairseq's
    own options (the model set them), else a :class:`StackPositions` as its ``embed_positions``
    and, for a scheme in the attention, :class:`PositionedSelfAttention` in every layer."""
    name = getattr(args, "positions", None)
    if name is None or (POSITIONS.entry(name).cls.fairseq_option is not None):
        return
    layer = stack.layers[0]
    heads = layer.self_attn.num_heads
    limit = args.max_target_positions if causal else args.max_source_positions
    scheme = build_position_scheme(
        name,
        args,
        heads=heads,
        head_dim=layer.self_attn.head_dim,
        embed_dim=layer.self_attn.embed_dim,
        padding_idx=stack.padding_idx,
        max_positions=limit,
        causal=causal,
    )
    stack.embed_positions = StackPositions(scheme)
    if scheme.in_attention:
        for layer in stack.layers:
            layer.self_attn = PositionedSelfAttention.replacing(layer.self_attn, stack.embed_positions.state)


def resolve_positions(args) -> None:
    """Check ``args.positions`` and its settings, and set fairseq's own switches
    (--no-token-positional-embeddings, --encoder-learned-pos, --decoder-learned-pos) to match it:
    ``--positions``, when given, decides (over a preset's switches too).  Unset: fairseq's switches
    decide, as before the option existed.  Every scheme's settings are recorded, defaults included."""
    for option, f in POSITION_OPTIONS.items():
        if getattr(args, option, None) is None:
            setattr(args, option, f.default)
    name = getattr(args, "positions", None)
    if name is None:
        return
    POSITIONS.check(name)
    build_settings(name, args)  # a SettingsError naming the option, before any work
    wanted = POSITIONS.entry(name).cls.fairseq_option
    args.no_token_positional_embeddings = wanted != "sinusoidal" and wanted != "learned"
    args.encoder_learned_pos = args.decoder_learned_pos = wanted == "learned"


def build_settings(name: str, args) -> None:
    """Read the settings of ``name`` and of the scheme it wraps off ``args`` (refusing bad ones)."""
    settings = POSITIONS.settings_for(name, args)
    if settings is not None and hasattr(settings, "randomized_base"):
        if settings.randomized_base not in POSITIONS:
            raise PositionError(
                f"--randomized-base must be one of {', '.join(POSITIONS.names())}, got {settings.randomized_base!r}"
            )
        if settings.randomized_base == name:
            raise PositionError(f"--randomized-base must name another scheme than {name}")
        build_settings(settings.randomized_base, args)


__all__ = [
    "POSITIONS",
    "PositionScheme",
    "PositionedSelfAttention",
    "StackPositions",
    "alibi_slopes",
    "build_position_scheme",
    "register_position_scheme",
    "sorted_random_positions",
]
