"""The decoder's cross-attention: content scores, location attention, or a mixture of both.

    keys   k_i = W_k e_i            values v_i = W_o W_v LeakyReLU(W_1 e_i)
    query  q_t = W_q h_{t-1}        location features l_t = W_l h_{t-1} (+ b_l)

    content only:   a_t = softmax(c_t)                       (c_t from a scorer, scorers.py)
    location only:  a_t = lambda_t                           (location.py, heads read off l_t)
    mixed:          a_t = m_t softmax(c_t) + (1 - m_t) lambda_t,  m_t = sigmoid(beta f_mix(h_{t-1}))

    context o_t = sum_i a_ti v_i;   pa_t = sum_i a_ti norm(i)
    (or, "position reference" PR, pa_t = sum_i lambda_ti norm(i): the location-only focus)

What one step hands the next is the location state, {"position": pa_t} (and "dwell": c_t when the
focus counts how long it stays, location.py), one number per sequence each.

The paper's output map o_t = f_o(sum_i a_ti v_i) is folded into the values: attention
weights sum to one (or to zero), so f_o(sum a v) = sum a f_o(v), computed once per sequence.
A caller whose next step is linear in o_t (the GRU decoder's input gates) can instead read the
values before that map, u_i (``prepare(..., value_output=False)``), and fold the map into its
own weights (``value_output_map``): one product per step instead of one per source position.
Everything a step reads off h_{t-1} (q_t, l_t or the location heads, the mixing logit) comes
from one linear map, split afterwards: one matrix product per step instead of three.
With a direction gate (direction_gate.py) keys and values read e_dir instead of e.

Location features (``--location-projection``): the paper reads the location heads off an
intermediate l_t = f_l(h_{t-1}) (a d x d layer); without it the heads read h_{t-1} directly.
Both are linear in h, but they train differently (the product of two matrices under Adam).

Initialisation (``--linear-init``): "pytorch" keeps torch's defaults; "xavier" draws every
weight of the attention's own layers from a Xavier-uniform distribution of its own shape, with
no bias on the keys, the query, the value output and the location heads, as the authors'
release.  The content scorer's own weights (the relative scorer's W_r) follow ``--scorer-init``.
"""

import math
from functools import partial
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..registry import Scorer
from .choices import check_choice
from .direction_gate import DirectionGate
from .location import LocationAttention
from .positions import padding_mask
from .step_linear import read_rows

POSITION_REFERENCES = ("mixed", "location")
LINEAR_INITS = ("pytorch", "xavier")
# the content scorer's own weights (the relative scorer's W_r): torch's default init, or
# Xavier-uniform (Scorer.xavier_init), as the authors' release draws its relative projection
SCORER_INITS = ("pytorch", "xavier")
# how the xavier init draws the location heads' vectors (step, width, bias, gate):
# "per-head": each vector on its own fan (d in, 1 out);
# "joint":    as the release, whose LocAttn draws its step, gate and bias vectors as one
#             (d, k) tensor, fan in d*k and out k, so bound sqrt(6 / (k (d + 1))); the width
#             vector stays on its own.  Equal to "per-head" when the step is the only one (k = 1).
LOCATION_HEAD_INITS = ("per-head", "joint")
# the value path after LeakyReLU(W_1 e): "folded", one matrix (W_o W_v multiplied out), or "two",
# W_v then W_o as the authors' release has them (the same function, trained differently)
VALUE_PATHS = ("folded", "two")

Memory = Dict[str, torch.Tensor]
LocationState = Dict[str, torch.Tensor]  # {"position": pa (B,)[, "dwell": c (B,)]}


class CrossAttention(nn.Module):
    def __init__(
        self,
        encoder_dim: int,
        query_dim: int,
        attention_dim: Optional[int] = None,
        scorer: Optional[Callable[[int], Scorer]] = None,
        location: Optional[LocationAttention] = None,
        direction_gate: Optional[DirectionGate] = None,
        position_reference: str = "mixed",
        mix_temperature: float = 5.0,
        location_projection: bool = False,
        linear_init: str = "pytorch",
        location_head_init: str = "per-head",
        query_bias: bool = True,
        value_path: str = "folded",
        scorer_init: str = "pytorch",
    ):
        """
        encoder_dim, query_dim: sizes of the encodings e_i and of the query state h_{t-1};
        attention_dim: size of keys, queries and values (default: query_dim);
        scorer: builds the content scorer from the attention size (None: no content scores);
        location: the Gaussian focus (None: none); with both, the two are mixed;
        direction_gate: keys and values read e_dir = g e + (1 - g) reverse(e) (None: e);
        position_reference: pa_t from the "mixed" attention or the "location"-only focus (PR);
        mix_temperature: beta in m_t = sigmoid(beta f_mix(h));
        location_projection: read the location heads off l_t = f_l(h) instead of h;
        linear_init, location_head_init: see the module's docstring;
        query_bias: the content query q_t = W_q h + b_q has a trainable bias (False: b_q stays 0, as
        the release's query projection has none);
        value_path: see VALUE_PATHS;
        scorer_init: see SCORER_INITS (redrawn last, so that the attention's other weights draw
        what they would draw without it).
        """
        super().__init__()
        if scorer is None and location is None:
            raise ValueError("cross-attention needs content scores (--attention-scoring) or location attention")
        check_choice("position-reference", position_reference, POSITION_REFERENCES)
        check_choice("linear-init", linear_init, LINEAR_INITS)
        check_choice("location-head-init", location_head_init, LOCATION_HEAD_INITS)
        check_choice("value-path", value_path, VALUE_PATHS)
        check_choice("scorer-init", scorer_init, SCORER_INITS)
        attention_dim = attention_dim or query_dim
        xavier = linear_init == "xavier"
        self.direction_gate = direction_gate
        self.location = location
        self.position_reference = position_reference
        self.mix_temperature = mix_temperature
        self.values = nn.Sequential(
            nn.Linear(encoder_dim, attention_dim),
            nn.LeakyReLU(),
            nn.Linear(attention_dim, attention_dim, bias=not xavier),
        )
        if value_path == "two":
            self.values.append(nn.Linear(attention_dim, attention_dim, bias=False))
        self.scorer: Optional[Scorer] = None
        if scorer is not None:
            self.keys = nn.Linear(encoder_dim, attention_dim, bias=not xavier)
            self.scorer = scorer(attention_dim)
        self.mixes = self.scorer is not None and self.location is not None
        # the location heads read l_t (projection) or h_{t-1} directly
        self.location_heads = None
        location_features = 0
        if self.location is not None:
            location_features = self.location.num_heads
            if location_projection:
                location_features = attention_dim
                self.location_heads = nn.Linear(attention_dim, self.location.num_heads, bias=False)
        # readout of h_{t-1}: [query (content) | location features | mixing logit]
        self.readout_sizes = [
            attention_dim if self.scorer is not None else 0,
            location_features,
            1 if self.mixes else 0,
        ]
        self.readout = nn.Linear(query_dim, sum(self.readout_sizes))
        if xavier:
            self.xavier_init(joint_heads=location_head_init == "joint")
        if not query_bias and self.scorer is not None:
            self.freeze_query_bias()
        if scorer_init == "xavier" and self.scorer is not None:
            self.scorer.xavier_init()

    def freeze_query_bias(self):
        """b_q = 0 for good: its entries of the readout's bias start at zero and get no gradient."""
        with torch.no_grad():
            self.readout_parts(self.readout.bias)[0].zero_()
        mask = torch.ones_like(self.readout.bias)
        mask[: self.readout_sizes[0]] = 0
        self.readout.bias.register_hook(lambda grad: grad * mask.to(grad))

    def xavier_init(self, joint_heads: bool):
        """Xavier-uniform weights of each part's own shape; the biases the release has none
        of (keys, query, value output, location heads) are absent or start at zero."""
        nn.init.xavier_uniform_(self.values[0].weight)
        for layer in list(self.values)[2:]:
            nn.init.xavier_uniform_(layer.weight)
        if self.scorer is not None:
            nn.init.xavier_uniform_(self.keys.weight)
        query, features, mix = self.readout_parts(self.readout.weight)
        query_bias, feature_bias, _ = self.readout_parts(self.readout.bias)
        with torch.no_grad():
            nn.init.xavier_uniform_(query)
            query_bias.zero_()
            nn.init.xavier_uniform_(mix)
            if self.location is None:  # content scores only: no location features
                return
            if self.location_heads is None:  # each head a vector of h, as the release's head vectors
                self.init_head_vectors(features, joint_heads)
                feature_bias.zero_()
            else:  # l_t = W_l h + b_l (torch's default bias), then one vector per head
                nn.init.xavier_uniform_(features)
                self.init_head_vectors(self.location_heads.weight, joint_heads)

    def init_head_vectors(self, rows: torch.Tensor, joint: bool):
        """Xavier-uniform location head vectors, rows (num_heads, d) in head_names order; with
        ``joint`` the vectors other than the width share one fan (LOCATION_HEAD_INITS)."""
        names = self.location.head_names
        shared = [name for name in names if name != "width"]
        bound = math.sqrt(6.0 / (len(shared) * (rows.size(1) + 1)))
        for name, row in zip(names, rows.split(1)):
            if joint and name in shared:
                nn.init.uniform_(row, -bound, bound)
            else:
                nn.init.xavier_uniform_(row)

    def readout_parts(self, parameter) -> List[torch.Tensor]:
        """[query, location features, mixing logit] rows of the readout's weight or bias."""
        return list(parameter.split(self.readout_sizes, dim=0))

    @property
    def tracks_position(self) -> bool:
        return self.location is not None

    @property
    def context_dim(self) -> int:
        return self.values[-1].out_features

    def prepare(
        self,
        encodings: torch.Tensor,
        summary: Optional[torch.Tensor],
        lengths: torch.Tensor,
        value_output: bool = True,
    ) -> Memory:
        """Per-sequence work, done once before decoding: everything a step needs, batch-first.
        ``value_output=False``: the values stop before their output map, u_i = LeakyReLU(W_1 e_i +
        b_1), with a last entry 1 when the map has a bias, for a caller that applies the map
        (``value_output_map``) after reading them: sum_i a_ti (A u_i + b) = A (sum_i a_ti u_i) + b
        sum_i a_ti, a product per step where the values' map is one per source position."""
        width = encodings.size(1)
        memory = {"padding_mask": padding_mask(lengths, width)}
        if self.direction_gate is not None:
            encodings, memory["direction"] = self.direction_gate(encodings, summary, lengths)
        if value_output:
            memory["values"] = self.values(encodings)
        else:
            activations = self.values[1](self.values[0](encodings))
            has_bias = any(layer.bias is not None for layer in list(self.values)[2:])
            memory["values"] = F.pad(activations, (0, 1), value=1.0) if has_bias else activations
        if self.location is not None:
            # positions, steps and widths in float32 at least: in float16 a position i / (L - 1) of a
            # long source is off by 1e-3, a whole focus width sigma = 0.27 / L
            memory.update(self.location.prepare(lengths, width, torch.promote_types(encodings.dtype, torch.float32)))
        if self.scorer is not None:
            memory.update(self.scorer.prepare(self.keys(encodings)))  # "keys" (and "key_bias")
        return memory

    def initial_state(self, memory: Memory) -> LocationState:
        """pa_0 = 0: the first reference is the START position (and c_0 = 0)."""
        state = {"position": memory["positions"].new_zeros(memory["values"].size(0))}
        if self.location.counts_dwell:
            state["dwell"] = torch.zeros_like(state["position"])
        return state

    def next_state(
        self,
        focus: torch.Tensor,
        memory: Memory,
        steps: Optional[torch.Tensor],
        state: LocationState,
        position: Optional[torch.Tensor] = None,
    ) -> LocationState:
        """The state after a step that attended ``focus`` (B, S) and stepped ``steps`` (B,) (None: the
        focus came from elsewhere, the dwell count is kept); ``position``: the position ``focus``
        attends, pa_t = sum_i focus_i norm(i), when the caller has it."""
        if position is None:
            position = (focus * memory["positions"]).sum(dim=-1)
        new = {"position": position}
        if "dwell" in state:
            new["dwell"] = state["dwell"] if steps is None else self.location.next_dwell(state["dwell"], steps)
        return new

    def value_output_map(self) -> torch.Tensor:
        """The value path's linear maps after its activation, multiplied out into one affine map
        v = A u + b (W_o, or W_o W_v with the two-matrix path), as one matrix [A | b] (D, D + 1), or
        A (D, D) without a bias: it reads the values of ``prepare(..., value_output=False)``."""
        weight = bias = None
        for layer in list(self.values)[2:]:
            weight = layer.weight if weight is None else layer.weight @ weight
            bias = None if bias is None else layer.weight @ bias
            if layer.bias is not None:
                bias = layer.bias if bias is None else bias + layer.bias
        return weight if bias is None else torch.cat([weight, bias.unsqueeze(1)], dim=1)

    def step_readout(self) -> Tuple[torch.Tensor, torch.Tensor, List[int]]:
        """(weight, bias, sizes) of the one linear map a step reads off h_{t-1}: rows [query |
        location heads | mixing logit].  With a location projection the heads' two maps are
        multiplied out, W_h (W_l h + b_l) = (W_h W_l) h + W_h b_l: one product of the weights per
        decoder call instead of a d x d product per step (the same function; the gradient still
        reaches W_l and W_h through the product)."""
        if self.location_heads is None:
            return self.readout.weight, self.readout.bias, self.readout_sizes
        query_w, features_w, mix_w = self.readout_parts(self.readout.weight)
        query_b, features_b, mix_b = self.readout_parts(self.readout.bias)
        heads = self.location_heads.weight
        weight = torch.cat([query_w, heads @ features_w, mix_w])
        bias = torch.cat([query_b, heads @ features_b, mix_b])
        return weight, bias, [self.readout_sizes[0], heads.size(0), self.readout_sizes[2]]

    def forward(
        self, hidden: torch.Tensor, memory: Memory, state: Optional[LocationState], step: int
    ) -> Tuple[torch.Tensor, torch.Tensor, Optional[LocationState]]:
        """hidden (B, Dq) = h_{t-1}, the previous step's location state (None without location
        attention); returns context (B, Da), weights (B, S) and the location state after the step.
        The query q_t, the location features l_t (the heads read off them, with a projection) and
        the mixing logit f_mix(h_{t-1}) come from one linear map of h_{t-1}, split."""
        query, features, mix_logit = self.readout(hidden).split(self.readout_sizes, dim=-1)
        head_logits = features if self.location_heads is None else self.location_heads(features)
        return self.attend_parts(query, head_logits, mix_logit, memory, state, step)

    def attend(
        self,
        readout: torch.Tensor,
        sizes: List[int],
        memory: Memory,
        state: Optional[LocationState],
        step: int,
    ) -> Tuple[torch.Tensor, torch.Tensor, Optional[LocationState]]:
        """One step from the readout of h_{t-1} (``step_readout``'s map, computed by the caller,
        who may share its matrix product with other maps of h)."""
        return self.attend_parts(*readout.split(sizes, dim=-1), memory, state, step)

    def attend_parts(
        self,
        query: torch.Tensor,
        head_logits: torch.Tensor,
        mix_logit: torch.Tensor,
        memory: Memory,
        state: Optional[LocationState],
        step: int,
        fast_path=None,
    ) -> Tuple[torch.Tensor, torch.Tensor, Optional[LocationState]]:
        """``attend`` from the readout's parts of ``sizes`` (for a caller that splits its product of
        h_{t-1} once, into these and its own parts): the scores c_t, the location focus lambda_t,
        their mix a_t, the context and the next location state.  ``fast_path`` (fast_path.py, the
        caller's choice) computes the focus and the mix as C++ nodes where it can."""
        mask = memory["padding_mask"]
        scores = location = steps = location_position = None
        if self.scorer is not None:
            scores = self.scorer(query, memory, step)
        if self.location is not None:
            focus_step = self.location.focus_step
            if fast_path is not None:
                focus_step = partial(fast_path.location_focus, self.location)
            location, _, steps, location_position = focus_step(
                head_logits, state["position"], memory, mask, step, state.get("dwell")
            )
            location_focus = location  # in the positions' precision, for the next reference position
            location = location.to(memory["values"].dtype)
        weights_position = None  # the position the weights attend, where a C++ node computed it
        if scores is None:
            weights = location
        elif location is None:
            weights = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
        elif fast_path is not None:  # the same as below, one node
            weights, weights_position = fast_path.mixed_focus(
                scores, mask, location, mix_logit, self.mix_temperature, memory["positions"]
            )
        else:
            content = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
            m = torch.sigmoid(self.mix_temperature * mix_logit)
            weights = location + m * (content - location)  # = m * content + (1 - m) * location
        context = read_rows(memory, "values", weights)
        if self.location is None:
            return context, weights, None
        # the position the step attends, for the next reference: pa_t = sum_i focus_i norm(i)
        if self.position_reference == "location":
            focus, position = location_focus, location_position
        elif scores is None:  # the weights are the location focus (unless in another precision)
            focus, position = weights, (location_position if weights is location_focus else None)
        else:
            focus, position = weights, weights_position
        return context, weights, self.next_state(focus, memory, steps, state, position)

    def attend_all(
        self,
        readout: torch.Tensor,
        sizes: List[int],
        memory: Memory,
        state: Optional[LocationState],
        first_step: int,
        location_focus: Optional[torch.Tensor] = None,
        fast_path=None,
    ) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor], Optional[LocationState]]:
        """Many steps at once, from their readouts (B, T, R), for a decoder that has every step's
        query before attending (a Transformer): content scores and the context for all steps in
        one product each; only the location focus runs step by step, since its reference is the
        position the previous step attended.  ``location_focus`` (B, T, S): another layer's focus
        to use instead of scanning one.  Returns the context (B, T, D), the weights (B, T, S), the
        location focus (B, T, S) or None, and the location state after the last step or None.
        ``fast_path`` (fast_path.py, the caller's choice) scans the focus with its C++ node."""
        mask = memory["padding_mask"]
        query, head_logits, mix_logit = readout.split(sizes, dim=-1)
        content = None
        if self.scorer is not None:
            scores = self.scorer.forward_all(query, memory, first_step)
            content = scores.masked_fill(mask.unsqueeze(1), float("-inf")).softmax(dim=-1)
        if self.location is None:
            return torch.bmm(content, memory["values"]), content, None, None
        mix = torch.sigmoid(self.mix_temperature * mix_logit) if content is not None else None
        values_type = memory["values"].dtype
        focus_step = self.location.focus_step if fast_path is None else partial(fast_path.location_focus, self.location)
        weights, focuses = [], []
        for t in range(readout.size(1)):
            steps = position = None
            if location_focus is None:
                focus, _, steps, position = focus_step(
                    head_logits[:, t], state["position"], memory, mask, first_step + t, state.get("dwell")
                )
            else:
                focus = location_focus[:, t]
            location = focus.to(values_type)
            step_weights = location if content is None else location + mix[:, t] * (content[:, t] - location)
            reference = focus if self.position_reference == "location" else step_weights
            state = self.next_state(reference, memory, steps, state, position if reference is focus else None)
            weights.append(step_weights)
            focuses.append(focus)
        weights_all = torch.stack(weights, dim=1)
        return torch.bmm(weights_all, memory["values"]), weights_all, torch.stack(focuses, dim=1), state
