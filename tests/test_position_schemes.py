"""The Transformer presets' position schemes (modules/position_schemes.py, ``--positions NAME``):
contract tests over every registered scheme, the plugin's, the example package's and one this
file registers, alone and under ``randomized`` (incremental decoding equals the full pass, an
example decodes alone as in a left-padded batch, randomized positions only in training); each
scheme's bias or rotation against its equation written out here; bad options refused by name;
fairseq-train and fairseq-generate with ``--arch transformer_small --positions alibi``."""

import math
from argparse import Namespace
from dataclasses import dataclass, field
from pathlib import Path

import fairseq.utils
import pytest
import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.modules import MultiheadAttention, SinusoidalPositionalEmbedding
from fairseq_cli_helpers import USER_DIR, hypotheses, run_command, write_copy_dataset
from forked_commands import command

from fairseq_monoattn.modules.position_schemes import (
    POSITIONS,
    AlibiPositions,
    FirePositions,
    FireSettings,
    LearnedPositions,
    PositionedSelfAttention,
    PositionError,
    PositionScheme,
    PositionState,
    RotaryPositions,
    RotarySettings,
    SinusoidalPositions,
    StackPositions,
    alibi_slopes,
    register_position_scheme,
    sorted_random_positions,
)
from fairseq_monoattn.registry import SettingsError, UnknownChoice
from fairseq_monoattn.testing import (
    assert_incremental_equals_full,
    assert_padding_invariant,
    assert_position_scheme_contract,
    assert_same_up_to_rounding,
    batch,
    build,
    digit_dictionary,
)

REPO = Path(__file__).resolve().parents[1]
EXTENSION = REPO / "examples" / "extension" / "attention_extras"
utils.import_user_module(Namespace(user_dir=str(EXTENSION)))  # registers kerple-log, the user's scheme

D = digit_dictionary()
SOURCES = [list("31415"), list("2718281828459045"), list("7"), list("12345678901234567890")]
SIZES = dict(heads=4, head_dim=4, embed_dim=16, padding_idx=1, max_positions=64)


@dataclass
class DecoderRecencySettings:
    test_recency_slope: float = field(default=1.0, metadata={"help": "M: the decoder's scores lose M (i - j)"})


@register_position_scheme("test-decoder-recency", settings=DecoderRecencySettings)
class DecoderRecency(PositionScheme):
    """A scheme registered by a test: the decoder's scores lose M (i - j) in every head, the
    encoder's nothing (what --decoder-recency-bias M does)."""

    in_attention = True

    def __init__(self, settings, **sizes):
        super().__init__(**sizes)
        self.slope = settings.test_recency_slope

    def bias(self, query_positions, key_positions):
        if not self.causal:
            return None
        distance = query_positions.unsqueeze(2) - key_positions.unsqueeze(1)
        return -self.slope * distance.unsqueeze(1).double()


SCHEMES = [name for name in POSITIONS.names() if name != "test-broken-count"]
WRAPPABLE = [name for name in SCHEMES if name != "randomized"]
# each scheme alone, and randomized over one of them: in evaluation a randomized scheme is its base's
# function (test_randomized_positions_are_the_plain_ones_in_evaluation_and_drawn_in_training, over
# every base), so one wrapped case checks the wrapper's own incremental state and padding
CONTRACT = [(name, {}) for name in SCHEMES] + [
    ("randomized-rope", {"positions": "randomized", "randomized_base": "rope"}),
    ("randomized-sinusoidal", {"positions": "randomized", "randomized_base": "sinusoidal"}),
]


def options_of(name, extra):
    return dict(extra) if extra else {"positions": name}


def test_the_registry_holds_every_scheme_a_users_and_the_tests_too():
    assert {"sinusoidal", "learned", "none", "rope", "alibi", "fire", "randomized"} <= set(SCHEMES)
    assert {"kerple-log", "test-decoder-recency"} <= set(SCHEMES)


@pytest.mark.parametrize("name, extra", CONTRACT, ids=[n for n, _ in CONTRACT])
def test_incremental_decoding_equals_the_full_pass(name, extra):
    # in float64: float32's rounding over 25 untrained steps comes near the check's 1e-5 (1.4e-5
    # for --decoder-recency-bias 1 with a window of 3, no scheme of this file involved), where an
    # error in the positions of the incremental state moves the scores by 1e-2 and more
    options = options_of(name, extra)
    for arch, beams in (("transformer_small", (1, 5)), ("transformer_monoattn_recency", (5,))):
        model = build(arch, D, seed=1, **options).double()
        for beam in beams:
            assert_incremental_equals_full(model, D, SOURCES, beam)
    # a window over the decoder's steps: the keys kept are the last ones, their positions too
    model = build("transformer_monoattn", D, seed=1, decoder_self_attention_window=3, **options).double()
    assert_incremental_equals_full(model, D, SOURCES, 5)


@pytest.mark.parametrize("name, extra", CONTRACT, ids=[n for n, _ in CONTRACT])
def test_an_example_decodes_alone_as_in_a_left_padded_batch(name, extra, monkeypatch):
    # float64, and fairseq's softmax in the model's dtype (as tests/test_transformer.py explains)
    monkeypatch.setattr(fairseq.utils, "softmax", lambda x, dim, onnx_trace=False: F.softmax(x, dim=dim))
    for arch in ("transformer_small", "transformer_monoattn"):
        model = build(arch, D, seed=2, **options_of(name, extra)).double()
        assert_padding_invariant(model, D, SOURCES, atol=1e-10)


@register_position_scheme("test-broken-count")
class CountsTheKeys(PositionScheme):
    """A broken scheme: its bias reads how many keys there are, which the full pass and
    incremental decoding do not agree on (the contract helper must catch it)."""

    in_attention = True

    def bias(self, query_positions, key_positions):
        keys = key_positions.size(1)
        bias = torch.zeros(1, self.heads, query_positions.size(1), keys, dtype=torch.float64)
        bias[..., 0] = 0.3 * keys  # the first key (the start symbol in the decoder) by the count
        return bias


def test_the_contract_helper_passes_a_users_scheme_and_fails_a_broken_one():
    assert_position_scheme_contract("kerple-log", kerple_init=0.5)
    with pytest.raises(AssertionError, match="--positions test-broken-count: beam 1, source 0, hypothesis 0: incr"):
        assert_position_scheme_contract("test-broken-count")


def matched_weights(source, target):
    """Copy ``source``'s weights into ``target`` (one scheme alone, the other randomized over it):
    the same names but for the wrapper's ``.base``, and fairseq's learned table's rows into the
    randomized one's longer table."""
    wanted = target.state_dict()
    given = source.state_dict()
    for key, value in wanted.items():
        plain = key.replace("embed_positions.scheme.base.", "embed_positions.scheme.")
        if plain not in given:
            plain = key.replace("embed_positions.scheme.base.table.", "embed_positions.")
        rows = given[plain]
        value.copy_(rows if rows.shape == value.shape else torch.cat([rows, value[rows.size(0) :]]))


@pytest.mark.parametrize("name", WRAPPABLE)
def test_randomized_positions_are_the_plain_ones_in_evaluation_and_drawn_in_training(name):
    model = build("transformer_small", D, seed=3, positions=name, dropout=0.0)
    wrapped = build("transformer_small", D, seed=3, positions="randomized", randomized_base=name, dropout=0.0)
    matched_weights(model, wrapped)
    sample = batch(D, SOURCES, [s[::-1] for s in SOURCES])
    evaluated, _ = wrapped(**sample["net_input"])
    plain, _ = model(**sample["net_input"])
    assert_same_up_to_rounding(evaluated, plain, f"randomized over {name} in evaluation")
    wrapped.train()
    torch.manual_seed(7)
    trained, _ = wrapped(**sample["net_input"])
    positions = wrapped.encoder.embed_positions.state.positions
    kept = sample["net_input"]["src_tokens"].ne(D.pad())
    for row, keep in zip(positions, kept):
        drawn = row[keep]
        assert (drawn[1:] > drawn[:-1]).all() and drawn.min() >= 0 and drawn.max() < 2048
    assert drawn.max() > len(drawn)  # not 0 .. n-1 (by chance with probability below 1e-30)
    torch.manual_seed(7)
    again, _ = wrapped(**sample["net_input"])
    assert torch.equal(again, trained)  # one seed, one draw
    torch.manual_seed(8)
    other, _ = wrapped(**sample["net_input"])
    if name != "none":  # NoPE has no positions to draw
        assert not torch.allclose(other, trained, atol=1e-4)  # another seed, other positions


def test_randomized_positions_are_sorted_distinct_within_the_range_and_seeded():
    kept = torch.tensor([[False, False, True, True, True], [True, True, True, True, True], [False] * 4 + [True]])
    draw = sorted_random_positions(kept, 50, torch.Generator().manual_seed(0))
    for row, keep in zip(draw, kept):
        real = row[keep]
        assert (real[1:] > real[:-1]).all() and real.min() >= 0 and real.max() < 50
        assert (row[~keep] == 0).all()
    assert torch.equal(draw, sorted_random_positions(kept, 50, torch.Generator().manual_seed(0)))
    assert not torch.equal(draw, sorted_random_positions(kept, 50, torch.Generator().manual_seed(1)))
    # L = n: the only subset is 0 .. n-1
    assert sorted_random_positions(kept[1:2], 5).tolist() == [[0, 1, 2, 3, 4]]
    with pytest.raises(PositionError, match="--randomized-length 4 is shorter than a training sequence of 5"):
        sorted_random_positions(kept, 4)
    # every subset of 3 of [0, 5) comes up, about equally often
    counts = {}
    generator = torch.Generator().manual_seed(2)
    for _ in range(2000):
        key = tuple(sorted_random_positions(kept[:1], 5, generator)[0, 2:].tolist())
        counts[key] = counts.get(key, 0) + 1
    assert len(counts) == math.comb(5, 3) and min(counts.values()) > 120


def test_alibi_slopes_and_bias_are_the_papers():
    assert alibi_slopes(8).tolist() == [1 / 2**k for k in range(1, 9)]
    assert alibi_slopes(4).tolist() == [1 / 4, 1 / 16, 1 / 64, 1 / 256]
    scheme = AlibiPositions(**SIZES, causal=False)
    queries, keys = torch.tensor([[0, 1, 2, 5]]), torch.tensor([[0, 1, 2, 5, 7]])
    bias = scheme.bias(queries, keys)
    for h in range(4):
        m = 2 ** (-8 * (h + 1) / 4)
        for t, i in enumerate(queries[0].tolist()):
            for s, j in enumerate(keys[0].tolist()):
                assert bias[0, h, t, s].item() == pytest.approx(-m * abs(i - j), abs=1e-7)


def rotated_by_hand(x, p, base):
    """x (d,) at position p: pair (x_j, x_{j + d/2}) turned by p base^(-2j/d)."""
    d = x.numel()
    out = x.clone()
    for j in range(d // 2):
        angle = p * base ** (-2 * j / d)
        a, b = x[j].item(), x[j + d // 2].item()
        out[j], out[j + d // 2] = a * math.cos(angle) - b * math.sin(angle), a * math.sin(angle) + b * math.cos(angle)
    return out


@pytest.mark.parametrize("base", [10000.0, 100.0])
def test_rope_turns_pairs_by_position_keeps_norms_and_depends_on_the_distance_only(base):
    scheme = RotaryPositions(RotarySettings(rope_base=base), **dict(SIZES, head_dim=6), causal=True)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 5, 6, generator=generator, dtype=torch.float64)
    positions = torch.tensor([[0, 1, 2, 3, 4], [3, 9, 10, 40, 41]])
    rotated = scheme.rotate(x, positions)
    for b in range(2):
        for h in range(4):
            for t in range(5):
                want = rotated_by_hand(x[b, h, t], positions[b, t].item(), base)
                assert torch.allclose(rotated[b, h, t], want, atol=1e-12)
    assert torch.allclose(rotated.norm(dim=-1), x.norm(dim=-1), atol=1e-12)
    q, k = x[:, :, :1], x[:, :, 1:2]

    def score(i, j):
        at = torch.tensor([[i]] * 2)
        return (scheme.rotate(q, at) * scheme.rotate(k, torch.tensor([[j]] * 2))).sum(-1)

    assert torch.allclose(score(3, 1), score(10, 8), atol=1e-12) and torch.allclose(score(0, 5), score(30, 35))
    assert not torch.allclose(score(3, 1), score(3, 2), atol=1e-3)
    with pytest.raises(PositionError, match="even head size"):
        RotaryPositions(RotarySettings(), **dict(SIZES, head_dim=5), causal=True)


@pytest.mark.parametrize("causal", [True, False])
def test_fire_bias_is_the_mlp_of_the_log_distance_over_the_log_query_position(causal):
    torch.manual_seed(0)
    scheme = FirePositions(FireSettings(fire_hidden=3, fire_threshold=3.0), **SIZES, causal=causal).double()
    with torch.no_grad():
        scheme.log_c.fill_(math.log(0.7))
        scheme.out_bias.normal_()
    queries, keys = torch.tensor([[0, 2, 3, 6]]), torch.tensor([[0, 1, 2, 3, 6]])
    bias = scheme.bias(queries, keys)
    c, threshold = 0.7, 3.0
    w1, b1, w2, b2 = (
        p.detach() for p in (scheme.hidden_weight, scheme.hidden_bias, scheme.out_weight, scheme.out_bias)
    )
    for h in range(4):
        for t, i in enumerate(queries[0].tolist()):
            for s, j in enumerate(keys[0].tolist()):
                if causal and j > i:
                    continue  # the decoder's mask hides these
                d = i - j
                u = math.copysign(math.log(c * abs(d) + 1), d) / math.log(c * max(threshold, i) + 1)
                want = sum(w2[h, k].item() * max(0.0, w1[h, k].item() * u + b1[h, k].item()) for k in range(3))
                assert bias[0, h, t, s].item() == pytest.approx(want + b2[h].item(), abs=1e-10)
    assert bias.isfinite().all()  # keys after the query too (masked in the decoder, but never NaN)
    # a batch: each sentence gets the bias of its own positions (the MLP runs once per pair present)
    other_queries, other_keys = torch.tensor([[1, 2, 5, 9]]), torch.tensor([[4, 1, 0, 7, 8]])
    batched = scheme.bias(torch.cat([queries, other_queries]), torch.cat([keys, other_keys]))
    assert batched.shape == (2, 4, 4, 5)
    assert torch.allclose(batched[:1], bias, rtol=0, atol=1e-12)
    assert torch.allclose(batched[1:], scheme.bias(other_queries, other_keys), rtol=0, atol=1e-12)
    bias.sum().backward()  # c and L are learned
    assert scheme.log_c.grad is not None and scheme.threshold.grad.abs() > 0


def test_absolute_schemes_embed_as_fairseqs_tables():
    tokens = batch(D, SOURCES)["net_input"]["src_tokens"]  # left-padded
    kept = tokens.ne(D.pad())
    positions = ((kept.long().cumsum(1) - 1).clamp(min=0)).masked_fill(~kept, 0)
    sizes = dict(SIZES, padding_idx=D.pad())
    sinusoidal = SinusoidalPositions(**sizes, causal=False).embedding(positions)
    fairseqs = SinusoidalPositionalEmbedding(16, D.pad(), init_size=80)(tokens)
    assert_same_up_to_rounding(sinusoidal[kept], fairseqs[kept], "sinusoidal against fairseq's")
    learned = LearnedPositions(**sizes, causal=False)
    rows = learned.embedding(positions)
    assert torch.equal(rows[kept], learned.table.weight[positions[kept] + D.pad() + 1])


def attention_by_hand(attention, x, bias, causal, padding):
    """softmax(q k^T / sqrt(d) + bias (+ -inf after the query) (+ -inf on padding)) v, head by head."""
    steps, batch_size, width = x.shape
    heads, size = attention.num_heads, attention.head_dim
    out = torch.zeros_like(x)
    for b in range(batch_size):
        xb = x[:, b]
        q, k, v = attention.q_proj(xb), attention.k_proj(xb), attention.v_proj(xb)
        contexts = []
        for h in range(heads):
            cols = slice(h * size, (h + 1) * size)
            scores = q[:, cols] @ k[:, cols].T / math.sqrt(size) + bias[b, h]
            if causal:
                scores = scores + torch.full((steps, steps), float("-inf"), dtype=x.dtype).triu(1)
            if padding is not None:
                scores = scores.masked_fill(padding[b].unsqueeze(0), float("-inf"))
            contexts.append(torch.softmax(scores, dim=-1) @ v[:, cols])
        out[:, b] = attention.out_proj(torch.cat(contexts, dim=-1))
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_the_self_attention_adds_the_schemes_bias_to_every_heads_scores(causal, monkeypatch):
    # fairseq's softmax runs in float32 whatever the dtype: taken in float64 here, as by hand
    monkeypatch.setattr(fairseq.utils, "softmax", lambda x, dim, onnx_trace=False: F.softmax(x, dim=dim))
    torch.manual_seed(0)
    scheme = AlibiPositions(**SIZES, causal=causal).double()
    state = PositionState(scheme)
    attention = PositionedSelfAttention.replacing(MultiheadAttention(16, 4, self_attention=True), state).double()
    x = torch.randn(5, 2, 16, dtype=torch.float64)
    padding = torch.tensor([[True, True, False, False, False], [False] * 5]) if not causal else None
    state.positions = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])
    mask = torch.full((5, 5), float("-inf"), dtype=torch.float64).triu(1) if causal else None
    got, _ = attention(x, x, x, key_padding_mask=padding, attn_mask=mask, need_weights=False)
    want = attention_by_hand(attention, x, scheme.bias(state.positions, state.positions), causal, padding)
    kept = slice(None) if padding is None else ~padding.T
    assert_same_up_to_rounding(got[kept], want[kept], "the plugin's self-attention against by hand")


def test_a_decoder_only_recency_scheme_is_the_recency_bias_option(monkeypatch):
    """--decoder-recency-bias M is ALiBi's bias with every head's slope M, in the decoder only: a
    scheme of the test computing that gives the function of the option (one seed, one set of weights)."""
    monkeypatch.setattr(fairseq.utils, "softmax", lambda x, dim, onnx_trace=False: F.softmax(x, dim=dim))
    sample = batch(D, SOURCES, [s[::-1] for s in SOURCES])
    by_option = build("transformer_small", D, seed=4, positions="none", decoder_recency_bias=0.5).double()
    by_scheme = build("transformer_small", D, seed=4, positions="test-decoder-recency", test_recency_slope=0.5)
    assert type(by_scheme.decoder.layers[0].self_attn) is PositionedSelfAttention
    want, _ = by_option(**sample["net_input"])
    got, _ = by_scheme.double()(**sample["net_input"])
    assert_same_up_to_rounding(got, want, "a decoder recency scheme against --decoder-recency-bias")


def test_positions_set_fairseqs_switches_and_leave_the_presets_as_they_were():
    default = build("transformer_small", D, seed=5)
    assert (
        getattr(default.args, "positions", None) is None
        and type(default.encoder.embed_positions) is SinusoidalPositionalEmbedding
    )
    same = build("transformer_small", D, seed=5, positions="sinusoidal")
    sample = batch(D, SOURCES, [s[::-1] for s in SOURCES])
    assert torch.equal(same(**sample["net_input"])[0], default(**sample["net_input"])[0])  # one path
    recency = build("transformer_monoattn_recency", D, seed=5)
    assert recency.encoder.embed_positions is None and recency.decoder.embed_positions is None
    turned_on = build("transformer_monoattn_recency", D, seed=5, positions="sinusoidal")
    assert type(turned_on.decoder.embed_positions) is SinusoidalPositionalEmbedding
    learned = build("transformer_small", D, seed=5, positions="learned")
    assert learned.args.encoder_learned_pos and learned.args.decoder_learned_pos
    alibi = build("transformer_small", D, seed=5, positions="alibi")
    assert alibi.args.no_token_positional_embeddings and type(alibi.encoder.embed_positions) is StackPositions
    assert alibi.decoder.embed_positions.scheme.causal and not alibi.encoder.embed_positions.scheme.causal
    assert all(type(layer.self_attn) is PositionedSelfAttention for layer in alibi.encoder.layers)
    # every scheme's settings are recorded (checkpoints keep them), defaults included
    assert alibi.args.rope_base == 10000.0 and alibi.args.randomized_length == 2048 and alibi.args.kerple_init == 1.0


@pytest.mark.parametrize(
    "options, message",
    [
        ({"positions": "alibl"}, "--positions must be one of .*alibi.*, got 'alibl'"),
        ({"positions": "rope", "rope_base": 0.5}, "--positions rope: --rope-base 0.5: rope_base must be > 1"),
        ({"positions": "randomized", "randomized_base": "ropes"}, "--randomized-base must be one of .*, got 'ropes'"),
        ({"positions": "randomized", "randomized_base": "randomized"}, "--randomized-base must name another"),
        ({"positions": "randomized", "randomized_length": 0}, "--randomized-length 0"),
        ({"positions": "fire", "fire_hidden": 0}, "--fire-hidden 0"),
    ],
)
def test_bad_position_options_are_refused_by_name(options, message):
    with pytest.raises((UnknownChoice, SettingsError, PositionError), match=message):
        build("transformer_small", D, **options)


def test_an_unknown_scheme_is_one_line_from_fairseq_train(tmp_path):
    data = write_copy_dataset(tmp_path / "data", {"train": (8, 2, 3), "valid": (4, 2, 3)})
    done = command("fairseq-train", data / "bin", "--user-dir", USER_DIR, "--arch", "transformer_small",
                   "--positions", "alibl", "--task", "length_generalization", "--criterion", "seq_acc",
                   "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8", "--max-update", "1",
                   "--save-dir", tmp_path / "ck")  # fmt: skip
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith("error: --positions must be one of sinusoidal, learned,")
    assert "Traceback" not in done.stderr


@pytest.mark.long(20)
def test_train_and_generate_with_alibi_through_fairseqs_commands(tmp_path):
    """fairseq-train --arch transformer_small --positions alibi, then fairseq-generate: the checkpoint
    records the scheme, and fairseq-generate's greedy outputs are the plugin's own decoder's
    (metrics.GreedyDecoder, which validation and fairseq-monoattn-score use)."""
    from fairseq_monoattn.metrics import GreedyDecoder
    from fairseq_monoattn.scoring import load_checkpoint

    data = write_copy_dataset(tmp_path / "data", {"train": (96, 2, 5), "valid": (12, 3, 6), "test": (16, 3, 9)})
    save = tmp_path / "ck"
    run_command("fairseq-train", str(data / "bin"), "--user-dir", USER_DIR, "--arch", "transformer_small",
                "--positions", "alibi", "--task", "length_generalization", "--criterion", "seq_acc",
                "--optimizer", "adam", "--lr", "3e-3", "--batch-size", "16", "--max-update", "30",
                "--save-dir", str(save), "--no-epoch-checkpoints", "--seed", "1")  # fmt: skip
    checkpoint = save / "checkpoint_last.pt"
    output = run_command("fairseq-generate", str(data / "bin"), "--user-dir", USER_DIR, "--path", str(checkpoint),
                         "--task", "length_generalization", "--gen-subset", "test", "--beam", "1", "--min-len", "0",
                         "--max-len-a", "0", "--max-len-b", "20", "--batch-size", "5")  # fmt: skip
    lines = output.splitlines()
    found = hypotheses(lines)
    assert sorted(found) == list(range(16))
    sources = {int(line.split("\t")[0][2:]): line.split("\t")[1] for line in lines if line.startswith("S-")}
    models, task, cfg = load_checkpoint(checkpoint, data / "bin")
    (model,) = models
    assert cfg.model.positions == "alibi"
    assert all(type(layer.self_attn) is PositionedSelfAttention for layer in model.decoder.layers)
    dictionary = task.target_dictionary
    ids = sorted(sources)
    sample = batch(task.source_dictionary, [sources[i].split() for i in ids])
    ours = GreedyDecoder(dictionary, max_len_a=0, max_len_b=20).generate([model], sample)
    assert {i: dictionary.string(torch.tensor(out[:-1])) for i, out in zip(ids, ours)} == found
