"""Equations of the attention building blocks, checked on hand-computed values."""

import functools
import math

import pytest
import torch
from model_helpers import location_attention

from fairseq_monoattn.modules import (
    ContentScores,
    CrossAttention,
    DirectionGate,
    LocationAttention,
    RelativeScores,
    RotaryScores,
    leaky_clamp,
    softstair,
)
from fairseq_monoattn.modules.positions import (
    normalized_positions,
    padding_mask,
    reversal_index,
    rotate_pairs,
    sinusoid,
)
from fairseq_monoattn.testing import assert_scorer_steps_match_all, build


def test_softstair_hand_values():
    x = torch.tensor([0.0, 0.5, 1.25, 2.75, -0.25])
    expected = [
        0 + 1 / (1 + math.exp(10)),  # sigmoid(20 * (0 - 0.5))
        0.5,  # floor 0 + sigmoid(0)
        1 + 1 / (1 + math.exp(5)),  # sigmoid(20 * -0.25)
        2 + 1 / (1 + math.exp(-5)),  # sigmoid(20 * 0.25)
        -1 + 1 / (1 + math.exp(-5)),  # floor -1, fraction 0.75
    ]
    assert softstair(x, 20.0).tolist() == pytest.approx(expected, abs=1e-6)


def test_leaky_clamp_hand_values():
    x = torch.tensor([-1.0, 0.0, 0.3, 1.0, 2.0])
    # inside [0, 1]: identity; below: 0.01 * x; above: 1 + 0.01 * x
    assert leaky_clamp(x, 0.01).tolist() == pytest.approx([-0.01, 0.0, 0.3, 1.0, 1.02], abs=1e-7)


def test_normalized_positions_and_masks():
    lengths = torch.tensor([3, 5, 1])
    pos = normalized_positions(lengths, 5)
    assert pos[0, :3].tolist() == pytest.approx([0, 0.5, 1])
    assert pos[1].tolist() == pytest.approx([0, 0.25, 0.5, 0.75, 1])
    assert pos[2, 0].item() == 0  # a single position: max(1, L - 1) keeps it at 0
    assert padding_mask(lengths, 5).tolist() == [
        [False, False, False, True, True],
        [False] * 5,
        [False, True, True, True, True],
    ]
    assert reversal_index(lengths, 5).tolist() == [[2, 1, 0, 3, 4], [4, 3, 2, 1, 0], [0, 1, 2, 3, 4]]


def test_sinusoid_and_rotation_are_relative():
    # <R(t) q, R(i) k> depends on i - t only
    q, k = torch.randn(8), torch.randn(8)
    a = rotate_pairs(q, torch.tensor(3.0)) @ rotate_pairs(k, torch.tensor(10.0))
    b = rotate_pairs(q, torch.tensor(103.0)) @ rotate_pairs(k, torch.tensor(110.0))
    assert a.item() == pytest.approx(b.item(), abs=1e-4)
    far = sinusoid(torch.tensor([-6000, 0, 6000]), 8)  # any distance, no table
    assert far.shape == (3, 8) and far[1].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert torch.allclose(far[0, :4], -far[2, :4]) and torch.allclose(far[0, 4:], far[2, 4:])


def test_direction_gate_reverses_exactly_the_real_positions():
    gate = DirectionGate(4, temperature=5.0)
    lengths = torch.tensor([3, 5])
    e = torch.arange(2 * 5 * 2, dtype=torch.float).view(2, 5, 2)
    e[0, 3:] = 0  # padding rows
    summary = torch.zeros(2, 4)
    with torch.no_grad():
        gate.proj.bias.fill_(-100.0)  # g = 0: fully reversed
    reversed_e, g = gate(e, summary, lengths)
    assert g.tolist() == [0.0, 0.0]
    assert torch.equal(reversed_e[0, :3], e[0, [2, 1, 0]])
    assert torch.equal(reversed_e[0, 3:], e[0, 3:])  # padding stays padding
    assert torch.equal(reversed_e[1], e[1, [4, 3, 2, 1, 0]])
    with torch.no_grad():
        gate.proj.bias.fill_(100.0)  # g = 1: unchanged
    assert torch.equal(gate(e, summary, lengths)[0], e)
    with torch.no_grad():
        gate.proj.bias.fill_(0.0)  # g = 1/2: the average of both directions
    half, _ = gate(e, summary, lengths)
    assert torch.allclose(half[1], (e[1] + e[1].flip(0)) / 2)


def test_a_gate_that_keeps_the_end_reverses_the_positions_before_it():
    gate = DirectionGate(4, temperature=5.0, keep_end=True)
    lengths = torch.tensor([3, 5, 1])
    e = torch.arange(3 * 5 * 2, dtype=torch.float).view(3, 5, 2)
    with torch.no_grad():
        gate.proj.bias.fill_(-100.0)  # g = 0: fully reversed
    reversed_e, _ = gate(e, torch.zeros(3, 4), lengths)
    assert torch.equal(reversed_e[0], e[0, [1, 0, 2, 3, 4]])  # the end (position 2) and padding stay
    assert torch.equal(reversed_e[1], e[1, [3, 2, 1, 0, 4]])
    assert torch.equal(reversed_e[2], e[2])  # the end marker alone


def test_a_hard_direction_gate_uses_one_order_and_passes_the_soft_gradient():
    """g_used = round(g) + g - stop_gradient(g): the encodings are e or reverse(e), never a blend,
    and d e_dir / d b is the soft gate's: beta g (1 - g) (e - reverse(e))."""
    gate = DirectionGate(4, temperature=5.0, hard=True).double()
    lengths = torch.tensor([3, 5])
    e = torch.randn(2, 5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    summary = torch.zeros(2, 4, dtype=torch.float64)
    reversal = torch.stack([e[0, [2, 1, 0, 3, 4]], e[1, [4, 3, 2, 1, 0]]])
    weights = torch.randn(2, 5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for bias, chosen in ((0.1, e), (-0.1, reversal), (0.0, e)):  # g = 1/2 rounds to the forward order
        with torch.no_grad():
            gate.proj.bias.fill_(bias)
        gate.zero_grad()
        out, g = gate(e, summary, lengths)
        assert torch.equal(out[0, :3], chosen[0, :3]) and torch.equal(out[1], chosen[1])
        assert g.tolist() == [float(chosen is not reversal)] * 2
        (out * weights).sum().backward()
        soft = torch.sigmoid(torch.tensor(5.0 * bias, dtype=torch.float64))
        expected = 5.0 * soft * (1 - soft) * ((e - reversal) * weights).sum()
        assert gate.proj.bias.grad.item() == pytest.approx(expected.item(), rel=1e-12)


def _location(reference="previous", step_activation="sigmoid", clamp=False, **options):
    return location_attention(reference, step_activation, clamp_slope=0.01 if clamp else None, **options)


def _heads(*columns):
    return torch.tensor(columns, dtype=torch.float).t()  # (B, num_heads)


def test_location_focus_matches_the_gaussian_equation():
    module = _location()
    lengths = torch.tensor([5])
    memory = module.prepare(lengths, 5)
    assert memory["step_size"].tolist() == [0.25]
    heads = _heads([100.0], [0.0])  # step = sigmoid(5 * 100) = 1, sigma raw 0
    weights, mu, _ = module(heads, torch.tensor([0.25]), memory, padding_mask(lengths, 5), step=2)
    assert mu.item() == pytest.approx(0.5)  # pa 0.25 + one step of 1 / (5 - 1)
    sigma = 0.27 / 5
    positions = memory["positions"][0]
    raw = torch.exp(-((positions - 0.5) ** 2) / (2 * sigma**2))
    assert weights[0].tolist() == pytest.approx((raw / raw.sum()).tolist(), abs=1e-6)
    # a wider focus: sigma = (ReLU(2) + 0.27) / 5, and padding gets nothing
    memory = module.prepare(torch.tensor([4]), 6)
    weights, _, _ = module(_heads([100.0], [2.0]), torch.tensor([0.0]), memory, padding_mask(torch.tensor([4]), 6), 1)
    sigma = 2.27 / 4
    raw = torch.exp(-((torch.tensor([0, 1, 2, 3]) / 3 - 1 / 3) ** 2) / (2 * sigma**2))
    assert weights[0, :4].tolist() == pytest.approx((raw / raw.sum()).tolist(), abs=1e-6)
    assert weights[0, 4:].tolist() == [0.0, 0.0]


def test_location_references_and_steps():
    lengths = torch.tensor([11, 11])
    memory = LocationAttention.prepare(lengths, 11)
    mask = padding_mask(lengths, 11)
    previous = torch.tensor([0.3, 0.6])
    zeros = torch.zeros(2, 4)
    # LocAttn: ref = g * pa + b with g = sigmoid(0) = 1/2, b = sigmoid(0) = 1/2; softstair(0)
    _, mu, _ = _location("gated", "softstair", clamp=True)(zeros, previous, memory, mask, step=3)
    expected = 0.5 * previous + 0.5 + softstair(torch.tensor(0.0), 20.0) / 10
    assert mu.tolist() == pytest.approx(leaky_clamp(expected, 0.01).tolist(), abs=1e-6)
    # LocAttn S: the bias at step 1, the previous position afterwards
    initial = _location("initial-bias", "none")
    _, first, _ = initial(zeros[:, :3], previous, memory, mask, step=1)
    _, later, _ = initial(zeros[:, :3], previous, memory, mask, step=2)
    assert first.tolist() == pytest.approx([0.5, 0.5]) and later.tolist() == pytest.approx(previous.tolist())
    # Mono: s * ReLU(rho) + (1 - s) * sigmoid(5 rho), s = sigmoid(20) ~ 1 at initialisation
    mono = _location(step_activation="mono")
    rho = torch.tensor([-1.0, 0.0, 2.0])
    s = torch.sigmoid(torch.tensor(20.0))
    assert mono.step(rho).tolist() == pytest.approx(
        (s * torch.relu(rho) + (1 - s) * torch.sigmoid(5 * rho)).tolist(), abs=1e-7
    )
    assert _location(step_activation="relu").step(rho).tolist() == [0.0, 0.0, 2.0]
    assert _location(step_activation="none").step(rho).tolist() == [-1.0, 0.0, 2.0]
    assert [_location(r).num_heads for r in ("previous", "initial-bias", "gated")] == [2, 3, 4]


def test_invalid_choices_name_the_option():
    with pytest.raises(ValueError, match="--reference"):
        _location(reference="sideways")
    with pytest.raises(ValueError, match="--step-activation"):
        _location(step_activation="not-a-step")
    with pytest.raises(ValueError, match="--location-normalization"):
        _location(location_normalization="max")
    with pytest.raises(ValueError, match="--attention-scoring"):
        CrossAttention(4, 4)
    with pytest.raises(ValueError, match="--linear-init"):
        CrossAttention(4, 4, location=_location(), linear_init="he")


def test_relative_scores_equal_transformer_xl_formula():
    torch.manual_seed(0)
    dim, width = 8, 6
    scorer = RelativeScores(dim)
    with torch.no_grad():
        scorer.content_bias.normal_()
        scorer.position_bias.normal_()
    keys, query = torch.randn(1, width, dim), torch.randn(1, dim)
    got = scorer(query, scorer.prepare(keys), step=4)
    pe = scorer.position_proj(sinusoid(torch.arange(width) - 4, dim))
    want = ((query + scorer.content_bias) @ keys[0].t() + (query + scorer.position_bias) @ pe.t()) / math.sqrt(dim)
    assert torch.allclose(got, want, atol=1e-5)
    # far from the start too: the query turned back by t against pe(i) is the table of pe(i - t)
    scorer.double()
    far_keys, far_query = torch.randn(2, 700, dim, dtype=torch.float64), torch.randn(2, dim, dtype=torch.float64)
    for step in (1, 350, 690):
        far_pe = scorer.position_proj(sinusoid(torch.arange(700) - step, dim, torch.float64))
        far = ((far_query + scorer.content_bias) @ far_keys.transpose(1, 2)).diagonal().t()
        far = (far + (far_query + scorer.position_bias) @ far_pe.t()) / math.sqrt(dim)
        assert torch.allclose(scorer(far_query, scorer.prepare(far_keys), step), far, rtol=0, atol=1e-9)
    content = ContentScores(dim)
    assert torch.allclose(content(query, content.prepare(keys), 1), query @ keys[0].t() / math.sqrt(dim))
    rotary = RotaryScores(dim)
    rot = rotary(query, rotary.prepare(keys), 2)
    want_rot = torch.stack(
        [
            rotate_pairs(query[0], torch.tensor(2.0)) @ rotate_pairs(keys[0, i], torch.tensor(float(i)))
            for i in range(width)
        ]
    ) / math.sqrt(dim)
    assert torch.allclose(rot[0], want_rot, atol=1e-5)


@pytest.mark.parametrize("scorer", [ContentScores, RelativeScores, RotaryScores])
@pytest.mark.parametrize("first_step", [1, 9])
def test_every_scorer_scores_all_steps_at_once_as_step_by_step(scorer, first_step):
    """A Transformer decoder calls forward_all, a GRU decoder and incremental decoding forward:
    the plugin's scorers compute forward_all their own way, and must give forward's scores."""
    torch.manual_seed(1)
    module = scorer(8)
    for parameter in module.parameters():  # the relative scorer's biases start at zero
        torch.nn.init.normal_(parameter)
    assert_scorer_steps_match_all(module, first_step=first_step, steps=6)


def test_pr_tracks_the_location_only_focus():
    torch.manual_seed(0)
    mixed = CrossAttention(6, 4, scorer=ContentScores, location=_location(), position_reference="mixed")
    pr = CrossAttention(6, 4, scorer=ContentScores, location=_location(), position_reference="location")
    pr.load_state_dict(mixed.state_dict())
    location = mixed.location
    e, lengths = torch.randn(2, 7, 6), torch.tensor([7, 4])
    h = torch.randn(2, 4)
    m1 = mixed.prepare(e, None, lengths)
    ctx1, w1, p1 = mixed(h, m1, {"position": torch.zeros(2)}, 1)
    ctx2, w2, p2 = pr(h, pr.prepare(e, None, lengths), {"position": torch.zeros(2)}, 1)
    p1, p2 = p1["position"], p2["position"]
    assert torch.equal(w1, w2) and torch.equal(ctx1, ctx2)  # same attention ...
    _, heads, mix_logit = mixed.readout(h).split(mixed.readout_sizes, dim=-1)
    loc, _, _ = location(heads, torch.zeros(2), m1, m1["padding_mask"], 1)
    assert torch.allclose(p2, (loc * m1["positions"]).sum(-1))  # ... PR reference = location focus
    assert torch.allclose(p1, (w1 * m1["positions"]).sum(-1))
    assert not torch.allclose(p1, p2)
    # the mixture is m * content + (1 - m) * location with m = sigmoid(5 f_mix(h))
    m = torch.sigmoid(5 * mix_logit)
    content = w1 - (1 - m) * loc
    assert torch.allclose(content.sum(-1), m.squeeze(-1), atol=1e-6)


def fast(on: bool):
    """The fast path (fast_path.FastPath) where ``on``, else None (the reference)."""
    from fairseq_monoattn.fast_path import FastPath

    return FastPath() if on else None


@pytest.fixture(params=["Python", "C++"])
def kernels(request):
    """Each test with this fixture runs with the reference (None) and with the fast path (a
    fast_path.FastPath; skipped where the C++ kernels are not built)."""
    from fairseq_monoattn.modules import compiled

    if request.param == "C++" and compiled.kernels is None:
        pytest.skip("the C++ kernels are not built")
    return fast(request.param == "C++")


def test_the_gru_update_is_torchs_gru_cell_and_its_gradient_is_right(kernels):
    from fairseq_monoattn.modules.gru import gru_update

    torch.manual_seed(0)
    cell = torch.nn.GRUCell(6, 5).double()
    x, h = torch.randn(3, 6, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)
    input_gates = torch.nn.functional.linear(x, cell.weight_ih, cell.bias_ih)
    hidden_gates = torch.nn.functional.linear(h, cell.weight_hh, cell.bias_hh)
    update = gru_update if kernels is None else kernels.gru_update
    assert torch.allclose(update(input_gates, hidden_gates, h), cell(x, h), atol=1e-14)
    inputs = [t.detach().requires_grad_() for t in (input_gates, hidden_gates, h)]
    assert torch.autograd.gradcheck(update, inputs)


def gru_loops():
    """The encoder's GRU loops to test: Python's always, the C++ one where it is built."""
    from fairseq_monoattn.modules import compiled

    return [False] + ([True] if compiled.kernels is not None else [])


def test_the_cpp_kernels_are_built_where_a_compiler_is():
    """``make install`` builds fairseq_monoattn/csrc; without it every model runs the Python code,
    so a build that silently failed would pass every other test."""
    import shutil

    from fairseq_monoattn.modules import compiled

    if shutil.which("c++") is None and shutil.which("g++") is None:
        pytest.skip("no C++ compiler: the package installs without its C++ kernels")
    assert compiled.kernels is not None, (
        "the C++ kernels were not built: pip install --no-build-isolation --use-pep517 -e ."
    )
    from fairseq_monoattn import fast_path

    # the one choice: CPU parameters of float32 or float64, one of them, the kernels on
    chosen = {device: fast_path.choose(torch.nn.Linear(2, 2).to(device)) for device in ("cpu", "meta")}
    assert (chosen["cpu"] is not None) == compiled.ENABLED and chosen["meta"] is None
    assert fast_path.choose(torch.nn.Linear(2, 2).double()) is not None or not compiled.ENABLED
    assert fast_path.choose(torch.nn.Linear(2, 2).bfloat16()) is None
    assert fast_path.choose(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2).double())) is None
    with torch.autocast("cpu", dtype=torch.bfloat16):  # under autocast the reference runs each pass
        assert not fast_path.FastPath.serves()
    assert fast_path.FastPath.serves()


@pytest.mark.parametrize("compiled", gru_loops())
@pytest.mark.parametrize("layers,width", [(1, 5), (2, 5), (1, 7)])
def test_the_stepped_bidirectional_gru_is_the_packed_nn_gru(layers, width, compiled):
    from fairseq_monoattn.modules.gru import bidirectional_gru
    from fairseq_monoattn.modules.positions import gather_positions, reversal_index

    torch.manual_seed(layers)
    rnn = torch.nn.GRU(6, 4, num_layers=layers, batch_first=True, bidirectional=True).double()
    lengths = torch.tensor([5, 2, 4, 1, 5])
    x = torch.randn(5, width, 6, dtype=torch.float64, requires_grad=True)  # columns past 5: padding only
    reverse = reversal_index(lengths, width)
    assert torch.equal(gather_positions(gather_positions(x, reverse), reverse), x)
    assert torch.equal(gather_positions(x, reverse)[1, :3], x[1, [1, 0, 2]])
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    packed_out, want_final = rnn(packed)
    want, _ = torch.nn.utils.rnn.pad_packed_sequence(packed_out, batch_first=True, total_length=width)
    got, got_final = bidirectional_gru(rnn, x, lengths, fast_path=fast(compiled))
    assert got.shape == (5, width, 8)
    assert torch.allclose(got, want, atol=1e-14) and torch.allclose(got_final, want_final, atol=1e-14)
    assert got[1, 2:].abs().sum() == 0  # zero past the row's length, as pad_packed_sequence pads
    weights = torch.randn_like(want)
    params = [x] + list(rnn.parameters())
    want_grads = torch.autograd.grad((want * weights).sum() + want_final.pow(2).sum(), params)
    got_grads = torch.autograd.grad((got * weights).sum() + got_final.pow(2).sum(), params)
    for g, w in zip(got_grads, want_grads):
        assert torch.allclose(g, w, atol=1e-12)


@pytest.mark.parametrize("compiled", gru_loops())
def test_state_noise_is_added_to_every_state_the_next_step_reads(compiled):
    """With state_noise s the loop computes h_t = GRU(x_t, h_{t-1}) + s eps_t from the noisy h_{t-1},
    eps one draw of torch's generator (2, packed rows, H) per layer: replayed here row by row with
    torch's GRUCell and the same draw, in float64; gradients as autograd's through that replay."""
    from fairseq_monoattn.modules.gru import _Packing, bidirectional_gru

    torch.manual_seed(0)
    rnn = torch.nn.GRU(5, 3, batch_first=True, bidirectional=True).double()
    lengths = torch.tensor([4, 1, 6, 3])
    x = torch.randn(4, 6, 5, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(11)
    got, got_final = bidirectional_gru(rnn, x, lengths, fast_path=fast(compiled), state_noise=0.3)
    torch.manual_seed(11)
    packing = _Packing(lengths, 6)
    eps = 0.3 * torch.randn(2, packing.total, 3, dtype=torch.float64)
    # packed row k of step t is sorted row r = k - start(t); rows sorted by length, longest first
    order = torch.sort(lengths, descending=True, stable=True).indices.tolist()
    starts = [sum(packing.sizes[:t]) for t in range(len(packing.sizes))]
    want = torch.zeros(4, 6, 6, dtype=torch.float64)
    finals = torch.zeros(2, 4, 3, dtype=torch.float64)
    for direction, suffix in enumerate(("", "_reverse")):
        cell = torch.nn.GRUCell(5, 3).double()
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            setattr(cell, name, getattr(rnn, f"{name}_l0{suffix}"))
        for b in range(4):
            n, r, h = int(lengths[b]), order.index(b), torch.zeros(3, dtype=torch.float64)
            for t in range(n):
                p = t if direction == 0 else n - 1 - t
                h = cell(x[b, p], h) + eps[direction, starts[t] + r]
                want[b, p, 3 * direction : 3 * direction + 3] = h
            finals[direction, b] = h
    assert (got - want).abs().max() < 1e-13 and (got_final - finals).abs().max() < 1e-13
    assert (got - bidirectional_gru(rnn, x, lengths, fast_path=fast(compiled))[0]).abs().max() > 0.1
    params = [x] + list(rnn.parameters())
    weights = torch.randn(want.shape, dtype=torch.float64)
    want_grads = torch.autograd.grad((want * weights).sum() + finals.pow(2).sum(), params)
    got_grads = torch.autograd.grad((got * weights).sum() + got_final.pow(2).sum(), params)
    for g, w in zip(got_grads, want_grads):
        assert (g - w).abs().max() < 1e-12


def test_the_encoder_adds_its_state_noise_in_training_only():
    """--encoder-state-noise changes the encodings in training mode (each call another draw) and
    leaves evaluation exactly as without it; a negative value is refused, naming the option."""
    from fairseq_monoattn.models.options import OptionError, check_options

    model, plain = build("gru_monoattn", encoder_state_noise=0.2), build("gru_monoattn")
    assert torch.equal(model.state_dict()["encoder.rnn.weight_hh_l0"], plain.state_dict()["encoder.rnn.weight_hh_l0"])
    src = torch.tensor([[5, 6, 7, 8, 2], [1, 1, 6, 7, 2]])
    lengths = torch.tensor([5, 3])
    model.eval(), plain.eval()
    assert torch.equal(model.encoder(src, lengths)["encodings"], plain.encoder(src, lengths)["encodings"])
    model.train(), plain.train()
    model.encoder.dropout_out.p = plain.encoder.dropout_out.p = 0.0
    first, second = (model.encoder(src, lengths)["encodings"] for _ in range(2))
    clean = plain.encoder(src, lengths)["encodings"]
    assert (first - clean).abs().max() > 0.05 and (first - second).abs().max() > 0.05
    with pytest.raises(OptionError, match="encoder-state-noise"):
        check_options({"encoder_state_noise": -0.1})


@pytest.mark.skipif(not gru_loops()[1:], reason="the C++ GRU loop is not built")
def test_the_compiled_gru_loop_refuses_what_it_cannot_step():
    from fairseq_monoattn.modules.compiled import kernels

    gates, weight, bias = torch.zeros(2, 5, 12), torch.zeros(2, 12, 4), torch.zeros(2, 12)
    states, saved = kernels.packed_gru_forward(gates, weight, bias, [3, 2])
    assert states.shape == (2, 5, 4) and saved.shape == (2, 5, 16)
    with pytest.raises(RuntimeError, match="sizes sum to 4, the packed rows are 5"):
        kernels.packed_gru_forward(gates, weight, bias, [3, 1])
    with pytest.raises(RuntimeError, match="non-increasing"):
        kernels.packed_gru_forward(gates, weight, bias, [2, 3])
    with pytest.raises(RuntimeError, match="3 \\* hidden"):
        kernels.packed_gru_forward(gates, torch.zeros(2, 12, 5), bias, [3, 2])
    with pytest.raises(RuntimeError, match="contiguous"):
        kernels.packed_gru_forward(gates.transpose(0, 1), weight, bias, [3, 2])
    with pytest.raises(RuntimeError, match="noise must be \\(directions, total, hidden\\)"):
        kernels.packed_gru_forward(gates, weight, bias, [3, 2], torch.zeros(2, 5, 3))


def test_a_step_linear_gives_the_gradients_of_the_plain_products(kernels):
    from fairseq_monoattn.modules.step_linear import StepLinear

    torch.manual_seed(2)
    weight = torch.randn(4, 4, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, dtype=torch.float64, requires_grad=True)
    offsets = torch.randn(6, 3, 4, dtype=torch.float64, requires_grad=True)
    start = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)

    def recurrence(stepped):
        linear = StepLinear(weight, bias, kernels=kernels and kernels.kernels) if stepped else None
        h, outputs = start, []
        for offset in offsets.unbind(0):  # h_t = tanh(o_t + h_{t-1} W^T + b)
            product = linear(h, offset) if stepped else offset + h @ weight.t() + bias
            if stepped:  # the step's node: C++ where the kernels run
                assert "StepProductBackward" in product.grad_fn.name()
                assert (type(product.grad_fn).__name__ == "CppFunction") == (kernels is not None)
            h = torch.tanh(product)
            outputs.append(h)
        return (torch.stack(outputs) * torch.arange(1.0, 7.0, dtype=torch.float64).view(6, 1, 1)).sum()

    want = torch.autograd.grad(recurrence(False), [weight, bias, offsets, start])
    got = torch.autograd.grad(recurrence(True), [weight, bias, offsets, start])
    for g, w in zip(got, want):
        assert torch.allclose(g, w, atol=1e-12)
    assert recurrence(True).item() == pytest.approx(recurrence(False).item(), rel=1e-14)


def test_step_operands_give_the_gradients_of_the_plain_products(kernels):
    """Values read and keys scored at every step of a recurrence: the same outputs and gradients
    as torch.bmm at each step, also where the tensors are used outside the steps too."""
    from fairseq_monoattn.modules.step_linear import read_rows, score_rows, with_step_operands

    torch.manual_seed(3)
    values = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    keys = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    start = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    mix = torch.randn(4, 4, dtype=torch.float64, requires_grad=True)

    def recurrence(deferred):
        memory = {"values": values, "keys": keys, "positions": torch.arange(5.0, dtype=torch.float64)}
        if deferred:
            memory = with_step_operands(memory, ("values", "keys", "absent"), kernels=kernels and kernels.kernels)
            assert sorted(memory["step_operands"]) == ["keys", "values"]  # not the constant positions
        h, total = start, values.sum() * 0.5 + keys.pow(2).sum()  # also used outside the steps
        for t in range(4):  # a_t = softmax(K h_{t-1}), h_t = tanh(a_t V W)
            scores = score_rows(memory, "keys", h) if deferred else torch.bmm(keys, h.unsqueeze(-1)).squeeze(-1)
            weights = scores.softmax(dim=-1)
            context = (
                read_rows(memory, "values", weights) if deferred else torch.bmm(weights.unsqueeze(1), values).squeeze(1)
            )
            if deferred:  # the steps' nodes: C++ where the kernels run
                assert "StepScoreBackward" in scores.grad_fn.name() and "StepReadBackward" in context.grad_fn.name()
                kinds = {type(scores.grad_fn).__name__, type(context.grad_fn).__name__}
                assert (kinds == {"CppFunction"}) == (kernels is not None)
            h = torch.tanh(context @ mix)
            total = total + (h * (t + 1)).sum()
        return total

    params = [values, keys, start, mix]
    want = torch.autograd.grad(recurrence(False), params)
    got = torch.autograd.grad(recurrence(True), params)
    for g, w in zip(got, want):
        assert torch.allclose(g, w, atol=1e-12)
    constant = {"values": values.detach()}  # nothing needs a gradient: the memory is left as it is
    assert with_step_operands(constant, ("values",)) is constant


def test_streamed_products_equal_bmm_and_step_aside_for_gradients():
    """weighted_rows streams long memories (embedding_bag) when nothing needs a gradient: the same
    sums as bmm's row form; feature-major keys score as the keys do; with gradients, bmm."""
    from fairseq_monoattn.modules.step_linear import (
        BY_FEATURE,
        STREAMED_ROWS,
        read_rows,
        score_rows,
        weighted_rows,
        with_feature_major,
    )

    torch.manual_seed(5)
    for count in (STREAMED_ROWS - 1, STREAMED_ROWS, 3 * STREAMED_ROWS + 1):
        rows = torch.randn(3, count, 6, dtype=torch.float64)
        weights = torch.randn(3, count, dtype=torch.float64)
        want = torch.bmm(weights.unsqueeze(1), rows).squeeze(1)
        with torch.no_grad():
            assert torch.allclose(weighted_rows(weights, rows), want, rtol=0, atol=1e-12)
            memory = with_feature_major({"keys": rows, "values": rows}, ("keys", "absent"))
            assert ("keys" + BY_FEATURE in memory) == (count >= STREAMED_ROWS)
            query = torch.randn(3, 6, dtype=torch.float64)
            scores = torch.bmm(rows, query.unsqueeze(-1)).squeeze(-1)
            assert torch.allclose(score_rows(memory, "keys", query), scores, rtol=0, atol=1e-12)
            assert torch.allclose(read_rows(memory, "values", weights), want, rtol=0, atol=1e-12)
        rows.requires_grad_(True)
        (weighted_rows(weights, rows) * want).sum().backward()  # the gradient of a plain product
        assert torch.allclose(rows.grad, weights.unsqueeze(-1) * want.unsqueeze(1), atol=1e-12)
    once = with_feature_major({"keys": torch.randn(2, STREAMED_ROWS, 3)}, ("keys",))
    assert with_feature_major(once, ("keys",)) is once  # made once, then kept
    assert once["keys" + BY_FEATURE].shape == (2, 3, STREAMED_ROWS)


def test_byte_dropout_drops_where_a_random_byte_is_below_256p():
    from fairseq_monoattn.modules.dropout import Dropout, byte_dropout, byte_dropout_threshold

    assert [byte_dropout_threshold(p) for p in (0.5, 0.25, 3 / 256, 0.1, 0.0, 1.0)] == [128, 64, 3, None, None, None]
    x = torch.randn(4, 37, 5)  # 740 elements: not a multiple of 8
    torch.manual_seed(11)
    got = byte_dropout(x, 0.25)
    torch.manual_seed(11)
    random_bytes = torch.empty(93, dtype=torch.int64).random_(-(2**63), None).view(torch.uint8)[:740].view(x.shape)
    kept = random_bytes >= 64
    assert torch.equal(got, torch.where(kept, x * (1 / 0.75), torch.zeros_like(x)))
    assert 0.6 < kept.double().mean() < 0.9  # 740 draws of p = 0.75: the mean is within 7 standard deviations
    x.requires_grad_(True)
    torch.manual_seed(11)
    byte_dropout(x, 0.25).sum().backward()
    assert torch.equal(x.grad, kept.to(x.dtype) / 0.75)
    with pytest.raises(ValueError, match="multiple of 1/256"):
        byte_dropout(x, 0.1)
    # other probabilities, evaluation and other dtypes: torch's dropout, or the identity
    layer = Dropout(0.1)
    torch.manual_seed(5)
    a = layer(x.detach())
    torch.manual_seed(5)
    assert torch.equal(a, torch.nn.functional.dropout(x.detach(), 0.1, True))
    assert torch.equal(Dropout(0.5).eval()(x), x)
    half = Dropout(0.5)(torch.ones(64, dtype=torch.bfloat16))
    assert half.dtype == torch.bfloat16 and set(half.tolist()) <= {0.0, 2.0}


def test_the_softmax_focus_in_one_node_is_the_plain_one_with_its_gradient(kernels):
    from fairseq_monoattn.modules.normalizations import SoftmaxFocus
    from fairseq_monoattn.registry import FocusNormalization

    torch.manual_seed(1)
    lengths = torch.tensor([7, 4])
    positions = normalized_positions(lengths, 7, torch.float64)
    mask = padding_mask(lengths, 7)
    mu = torch.tensor([0.3, 0.8], dtype=torch.float64, requires_grad=True)
    sigma = torch.tensor([0.2, 0.05], dtype=torch.float64, requires_grad=True)
    focus = SoftmaxFocus()
    one_node = focus.focus if kernels is None else kernels.softmax_focus
    fused = one_node(positions, mu, sigma, mask)
    plain = FocusNormalization.focus(focus, positions, mu, sigma, mask)  # the composed default
    assert torch.allclose(fused, plain, atol=1e-15) and fused[1, 4:].abs().sum() == 0
    assert torch.autograd.gradcheck(lambda m, s: one_node(positions, m, s, mask), (mu, sigma))


def test_the_dwell_count_follows_its_recurrence_and_enters_the_step_logit():
    """c_t = c_{t-1} (1 - clamp(s_t, 0, 1)) + 1, and s_t = act(rho_t + w c_{t-1})."""
    module = location_attention(dwell_count=True)
    assert module.counts_dwell and module.dwell_weight.item() == 0.0  # the paper's function at first
    steps = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.25, 2.0, -1.0])
    dwell, counts = torch.zeros(()), []
    for s in steps:
        dwell = module.next_dwell(dwell, s)
        counts.append(dwell.item())
    assert counts == pytest.approx([1, 2, 3, 1, 2, 2.5, 1, 2])
    with torch.no_grad():
        module.dwell_weight.fill_(-0.5)
    lengths = torch.tensor([6, 6])
    memory = module.prepare(lengths, 6)
    heads, previous = torch.tensor([[0.3, 0.0], [0.3, 0.0]]), torch.tensor([0.2, 0.2])
    _, mu, s = module(heads, previous, memory, padding_mask(lengths, 6), step=4, dwell=torch.tensor([0.0, 2.0]))
    expected = torch.sigmoid(5 * (0.3 - 0.5 * torch.tensor([0.0, 2.0])))
    assert s.tolist() == pytest.approx(expected.tolist())
    assert mu.tolist() == pytest.approx((0.2 + expected / 5).tolist())
    assert location_attention().dwell_weight is None  # without the option: no parameter, no count
    assert location_attention(dwell_count=True, dwell_init=1.5).dwell_weight.item() == 1.5


def test_with_a_dwell_count_one_linear_step_logit_writes_recopy_at_any_length():
    """The count makes ReCopy (each digit d written k(d) = 1, 3 or 5 times) a threshold that does not
    depend on the length: with the step logit -b (k(y_{t-1}) - 1/2) read off the digit just written and
    a dwell weight w = b, rho + w c = b (c - k + 1/2): OneStep's focus stays on each digit until it has
    been written k(d) times, then steps.
    Fixed weights, teacher-forced as in training, reproduce the ReCopy output of 100 random digits."""
    from fairseq_monoattn.data.digits import recopy

    gain = 40.0
    digits = [str(d) for d in torch.randint(0, 10, (100,), generator=torch.Generator().manual_seed(3)).tolist()]
    target = recopy(digits)
    copies = {str(d): 1 if d <= 3 else 3 if d <= 6 else 5 for d in range(10)}
    length = len(digits) + 2  # START, the digits, END

    def read_with(dwell_weight):
        module = location_attention(step_activation="sigmoid", dwell_count=True, step_temperature=1.0)
        with torch.no_grad():
            module.dwell_weight.fill_(dwell_weight)
        memory = module.prepare(torch.tensor([length]), length)
        mask = padding_mask(torch.tensor([length]), length)
        position, dwell, read = torch.zeros(1), torch.zeros(1), []
        for t, previous in enumerate([None] + target[:-1], start=1):
            # the first step leaves START whatever the count; later ones step once k(previous) copies are written
            rho = torch.tensor([gain if previous is None else -gain * (copies[previous] - 0.5)])
            heads = torch.stack([rho, torch.tensor([-10.0])], dim=1)  # the narrowest focus, sigma = 0.27 / L
            weights, _, steps = module(heads, position, memory, mask, step=t, dwell=dwell)
            position, dwell = (weights * memory["positions"]).sum(dim=-1), module.next_dwell(dwell, steps)
            read.append(digits[weights[0].argmax().item() - 1])
        return read

    assert len(target) > 250 and read_with(gain) == target
    assert set(read_with(0.0)) == {digits[0]}  # without the count the same logits never leave the first digit


def test_location_heads_of_the_wrong_width_are_refused(kernels):
    """A readout of the wrong width is an error in both codes, not a focus read off its first columns."""
    module = location_attention()
    lengths = torch.tensor([3, 5])
    memory = module.prepare(lengths, 5)
    focus = module.focus_step if kernels is None else functools.partial(kernels.location_focus, module)
    with pytest.raises((ValueError, RuntimeError), match=r"heads.*\((B|2), 2\)"):
        focus(torch.zeros(2, 5), torch.zeros(2), memory, padding_mask(lengths, 5), 1)


def test_only_an_entrys_own_class_gets_its_compiled_form():
    """A subclass of a built-in entry that changes what it computes runs its own Python code: the
    C++ form of its parent is not inherited."""
    from fairseq_monoattn.modules.steps import SigmoidStep, SigmoidStepSettings
    from fairseq_monoattn.registry import compiled_form

    class HalfSigmoid(SigmoidStep):
        def forward(self, rho):
            return 0.5 * super().forward(rho)

    assert compiled_form(SigmoidStep(SigmoidStepSettings())) == ("sigmoid", 5.0, None)
    assert compiled_form(HalfSigmoid(SigmoidStepSettings())) is None
    from fairseq_monoattn.fast_path import FastPath

    module = location_attention()
    module.step = HalfSigmoid(SigmoidStepSettings())
    assert FastPath.location_form(module) is None
    assert FastPath.location_form(location_attention()) == (("sigmoid", 5.0, None), "previous")
    assert FastPath.location_form(location_attention(dwell_count=True)) is None
    assert FastPath.location_form(location_attention(location_normalization="sum")) is None


@pytest.mark.skipif(not gru_loops()[1:], reason="the C++ kernels are not built")
def test_the_cpp_step_nodes_refuse_what_they_cannot_compute():
    from fairseq_monoattn.modules.compiled import kernels

    gates, hidden = torch.zeros(3, 12), torch.zeros(3, 4)
    with pytest.raises(RuntimeError, match="gates must be \\[3, 12\\] for a hidden state of \\[3, 4\\]"):
        kernels.gru_step(gates, torch.zeros(3, 9), hidden)
    wrong_dtype = "gru_step: input_gates must be a CPU tensor of Float, not a cpu tensor of Double"
    with pytest.raises(RuntimeError, match=wrong_dtype):
        kernels.gru_step(gates.double(), gates, hidden)
    positions, mask = torch.zeros(2, 5), torch.zeros(2, 5, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="mu and sigma must be \\(2,\\)"):
        kernels.softmax_gaussian(positions, torch.zeros(3), torch.ones(2), mask)
    with pytest.raises(RuntimeError, match="padding_mask must be a bool tensor"):
        kernels.softmax_gaussian(positions, torch.zeros(2), torch.ones(2), mask.float())
    heads, row = torch.zeros(2, 2), torch.zeros(2)
    focus = dict(mono_gate=None, positions=positions, step_size=row, lengths=row + 5, padding_mask=mask,
                 step_temperature=5.0, step=1, sigma_min=0.27, clamp_slope=None)  # fmt: skip
    with pytest.raises(RuntimeError, match="unknown step activation 'tanh'"):
        kernels.location_focus(heads, row, step_activation="tanh", reference="previous", **focus)
    with pytest.raises(RuntimeError, match="heads must be \\(2, 4\\) for the reference 'gated'"):
        kernels.location_focus(heads, row, step_activation="sigmoid", reference="gated", **focus)
    with pytest.raises(RuntimeError, match="mono needs its gate logit"):
        kernels.location_focus(heads, row, step_activation="mono", reference="previous", **focus)
    # their backward passes are plain loops: a second derivative is refused, not silently wrong
    x = torch.randn(3, 12, dtype=torch.float64, requires_grad=True)
    out = kernels.gru_step(x, x, torch.randn(3, 4, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="double backward.*FAIRSEQ_MONOATTN_COMPILED=0"):
        torch.autograd.grad(out.sum(), x, create_graph=True)
    assert (
        torch.autograd.grad(kernels.gru_step(x, x, torch.zeros(3, 4, dtype=torch.float64)).sum(), x)[0].shape == x.shape
    )


@pytest.mark.parametrize(
    "options",
    [
        {"linear_init": "pytorch"},
        {"linear_init": "xavier"},
        {"value_path": "two"},
        {"value_path": "two", "linear_init": "xavier"},
    ],
)
def test_the_values_output_map_read_after_the_read_is_the_map_of_the_read_values(options):
    """sum_i a_i v_i with v_i = A u_i + b equals [A | b] applied to sum_i a_i [u_i; 1] (values of
    prepare(value_output=False), the map of value_output_map), whatever the weights sum to: here
    rows summing to 0.3, to 1 and to 0, and a padded row."""
    torch.manual_seed(0)
    attention = CrossAttention(6, 4, scorer=ContentScores, **options).double()
    e, lengths = torch.randn(3, 5, 6, dtype=torch.float64), torch.tensor([5, 5, 3])
    weights = torch.rand(3, 5, dtype=torch.float64)
    weights[0] *= 0.3 / weights[0].sum()
    weights[1] /= weights[1].sum()
    weights[2] = 0.0
    full = attention.prepare(e, None, lengths)["values"]
    before = attention.prepare(e, None, lengths, value_output=False)["values"]
    has_bias = options.get("linear_init", "pytorch") == "pytorch"
    assert before.shape == (3, 5, 4 + has_bias)
    output_map = attention.value_output_map()
    assert output_map.shape == (4, 4 + has_bias)
    want = torch.einsum("bs,bsd->bd", weights, full)
    got = torch.einsum("bs,bsd->bd", weights, before) @ output_map.t()
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert not torch.allclose(want[0], want[1])


@pytest.mark.parametrize("words", [10, 100])
def test_the_tied_output_layer_is_the_two_maps_in_turn(words):
    """logits = E (W h + b) + c: with no more words than embedding dimensions (10 + 4 special
    symbols against 64) E W is multiplied out first, with more (104) the two maps run in turn; either
    way the logits and every gradient are those of the two maps in turn (float64)."""
    from fairseq.data import Dictionary

    from monoattn_lab.benchmarking import build_preset

    dictionary = Dictionary()
    for i in range(words):
        dictionary.add_symbol(f"w{i}")
    decoder = build_preset("gru_onestep", dictionary).double().decoder
    assert decoder.share_input_output_embed and decoder.embed_tokens.weight.shape[1] == 64
    features = torch.randn(3, 5, 128, dtype=torch.float64, requires_grad=True)
    got = decoder.output_layer(features)
    want = torch.nn.functional.linear(decoder.out_proj(features), decoder.embed_tokens.weight, decoder.out_bias)
    assert got.shape == (3, 5, len(dictionary)) and torch.allclose(got, want, rtol=0, atol=1e-12)
    weights = torch.randn_like(want)
    params = [features, decoder.embed_tokens.weight, decoder.out_proj.weight, decoder.out_proj.bias, decoder.out_bias]
    for g, w in zip(
        torch.autograd.grad((got * weights).sum(), params), torch.autograd.grad((want * weights).sum(), params)
    ):
        assert torch.allclose(g, w, rtol=0, atol=1e-11)


@pytest.mark.parametrize("words", [10, 12])  # 14 and 16 symbols: torch's kernel takes the second
def test_the_decoders_log_probabilities_are_torchs_log_softmax(words):
    """The decoder's log-probabilities over a vocabulary whose size is not a multiple of 8 (where
    torch's CPU log_softmax is slow) are computed as x - m - log sum exp(x - m): torch's log_softmax
    to float rounding, and its gradient, in float32 (as fairseq returns them, also for half-precision
    logits) and float64; with 16 symbols fairseq's own log_softmax runs."""
    from fairseq import utils as fairseq_utils
    from fairseq.data import Dictionary

    from monoattn_lab.benchmarking import build_preset

    dictionary = Dictionary()
    for i in range(words):
        dictionary.add_symbol(f"w{i}")
    decoder = build_preset("gru_onestep", dictionary).decoder
    size = len(dictionary)
    for dtype, tolerance in ((torch.float32, 2e-6), (torch.float64, 1e-13)):
        logits = (10 * torch.randn(4, 7, size, dtype=dtype)).requires_grad_(True)
        got = decoder.get_normalized_probs((logits, None), log_probs=True)
        if size % 8 == 0:  # fairseq's own, which computes in float32
            assert torch.equal(got, fairseq_utils.log_softmax(logits, dim=-1))
            continue
        want = torch.log_softmax(logits, dim=-1)
        assert got.dtype == dtype and (got - want).abs().max() <= tolerance
        weights = torch.randn_like(want)
        (got_grad,) = torch.autograd.grad((got * weights).sum(), logits)
        (want_grad,) = torch.autograd.grad((want * weights).sum(), logits)
        assert (got_grad - want_grad).abs().max() <= 10 * tolerance
    half = decoder.get_normalized_probs((torch.randn(2, 3, size, dtype=torch.bfloat16), None), log_probs=True)
    assert half.dtype == torch.float32
    probs = decoder.get_normalized_probs((torch.randn(2, 3, size), None), log_probs=False)
    assert torch.allclose(probs.sum(-1), torch.ones(2, 3))
