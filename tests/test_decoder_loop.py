"""The GRU decoder's time loop as one C++ autograd node (csrc/decoder_loop.cpp) against the decoder's
steps one by one: the same logits, attention and gradients to float rounding, for every preset it
computes, and the decoder steps aside from it where it cannot."""

import pytest
import torch
import torch.nn.functional as F
from model_helpers import random_digits

from fairseq_monoattn import fast_path
from fairseq_monoattn.fast_path import FastPath
from fairseq_monoattn.models.presets import PRESETS
from fairseq_monoattn.modules import compiled
from fairseq_monoattn.modules.steps import SigmoidStep, SigmoidStepSettings
from fairseq_monoattn.testing import assert_same_up_to_rounding, batch, build, digit_dictionary

pytestmark = pytest.mark.skipif(compiled.kernels is None, reason="the C++ kernels are not built")

# the presets whose attention the loop computes: the content scorer, the location focus, their mix
LOOPED = [name for name in PRESETS if PRESETS[name].get("attention_scoring") in ("content", "none")]


def node_name(node):
    """An autograd node's name, a C++ Function's (torch::autograd::CppNode<namespace::Name>) as Name."""
    name = node.name()
    return name.rsplit("::", 1)[-1].rstrip(">") if name.startswith("torch::autograd::CppNode<") else name


def graph_names(tensor):
    """The names of every autograd node behind ``tensor``."""
    names, stack, seen = set(), [tensor.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(node_name(node))
        stack.extend(next_node for next_node, _ in node.next_functions)
    return names


def samples(dictionary):
    """Two teacher-forced batches: Copy-like (5-10 digits, the values' output map applied at the
    source positions) and long mixed-length sources (the map folded into the input gates)."""
    generator = torch.Generator().manual_seed(3)
    short = random_digits(generator, 6, 5, 10)
    long = random_digits(generator, 12, 5, 45)
    return [batch(dictionary, short, short), batch(dictionary, long, [s[:12] for s in long])]


def pass_with_gradients(model, sample, dictionary):
    """Logits, attention, loss graph names and every parameter's gradient of one teacher-forced pass."""
    model.zero_grad()
    logits, extra = model(**sample["net_input"])
    log_probs = F.log_softmax(logits, dim=-1)
    loss = F.nll_loss(log_probs.flatten(0, 1), sample["target"].flatten(), ignore_index=dictionary.pad())
    names = graph_names(loss)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), extra["attention"].detach(), names, grads


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("arch", LOOPED)
def test_the_loop_node_is_the_decoders_steps(arch, dtype, monkeypatch):
    """Eval mode (no dropout) with gradients on, as a training pass without dropout: the loop's logits,
    attention and every gradient (the readout, the GRU, the values and keys, Mono's gate, the location
    heads' two maps) agree with the per-step C++ nodes' and the Python code's to float rounding
    (fairseq_monoattn/testing.py: three code paths, so never bit for bit)."""
    dictionary = digit_dictionary()
    model = build(arch, dictionary).to(dtype).eval()
    assert isinstance(model.fast_path, FastPath)  # chosen again after the cast: the fast path
    # the Python code in float64: the bound's measure of the rounding the long batch amplifies
    exact = build(arch, dictionary).to(torch.float64).eval()
    fast_path.install(exact, None)
    for sample in samples(dictionary):
        reference = pass_with_gradients(exact, sample, dictionary)
        runs = {}
        for way in ("loop", "steps", "python"):
            with monkeypatch.context() as patch:
                if way == "steps":
                    patch.setattr(FastPath, "loop", lambda *args, **kwargs: None)
                fast_path.install(model, None if way == "python" else model.fast_path)
                runs[way] = pass_with_gradients(model, sample, dictionary)
        loop, steps, python = runs["loop"], runs["steps"], runs["python"]
        assert "DecoderLoopBackward" in loop[2] and "DecoderLoopBackward" not in steps[2]
        assert set(loop[3]) == set(steps[3]) == set(python[3])
        for way, other in (("steps", steps), ("python", python)):
            assert_same_up_to_rounding(loop[0], other[0], f"logits against the {way}", reference[0])
            assert_same_up_to_rounding(loop[1], other[1], f"attention against the {way}", reference[1])
            for name, want in other[3].items():
                where = f"gradient of {name} against the {way}"
                assert_same_up_to_rounding(loop[3][name], want, where, reference[3][name])


def test_a_float64_reference_admits_the_rounding_the_function_amplifies_and_no_more():
    """With a reference, two float32 paths may differ by 4 times the error of the one compared
    against (each off the float64 value by e, in opposite directions); a path off by more is refused."""
    reference = torch.linspace(0, 1, 50, dtype=torch.float64)
    error = 1e-4  # 840 float32 epsilons: the twins differ by 1,680, beyond the plain bound of 1,024
    want, twin = (reference + error).float(), (reference - error).float()
    with pytest.raises(AssertionError, match="the paths differ by"):
        assert_same_up_to_rounding(twin, want, "twin")
    assert_same_up_to_rounding(twin, want, "twin", reference)
    with pytest.raises(AssertionError, match="the paths differ by"):
        assert_same_up_to_rounding(want + 5 * error, want, "wrong", reference)
    with pytest.raises(AssertionError, match="the reference is"):
        assert_same_up_to_rounding(twin, want, "short", reference[:10])


class ShiftedSigmoid(SigmoidStep):
    """A user's step: the sigmoid moved by 0.1 (a subclass of a built-in, so no C++ form)."""

    def forward(self, rho):
        return super().forward(rho) + 0.1


@pytest.mark.parametrize(
    "arch,overrides",
    [
        ("gru_relative", {}),  # the relative scorer has no C++ form
        ("gru_onestep", {"decoder_layers": 2}),
        ("gru_onestep", {"dwell_count": True}),
        ("gru_onestep", {"location_normalization": "sum"}),
        ("gru_onestep", {"user_step": True}),
    ],
)
def test_the_decoder_steps_aside_from_the_loop_where_it_cannot_compute_the_model(arch, overrides):
    dictionary = digit_dictionary()
    user_step = overrides.pop("user_step", False)
    model = build(arch, dictionary, **overrides).eval()
    if user_step:
        model.decoder.attention.location.step = ShiftedSigmoid(SigmoidStepSettings())
    sample = samples(dictionary)[0]
    assert "DecoderLoopBackward" not in pass_with_gradients(model, sample, dictionary)[2]


def test_the_loop_runs_in_training_only():
    """Decoding (incremental state) and passes without gradients take the decoder's steps."""
    dictionary = digit_dictionary()
    model = build("gru_monoattn", dictionary).eval()
    sample = samples(dictionary)[0]
    assert "DecoderLoopBackward" in pass_with_gradients(model, sample, dictionary)[2]
    with torch.no_grad():
        logits, _ = model(**sample["net_input"])
    assert logits.grad_fn is None
    with torch.no_grad():
        full = model(**sample["net_input"])[0]
    looped = model(**sample["net_input"])[0]
    assert torch.allclose(looped, full, rtol=0, atol=1e-5)


def test_a_second_backward_pass_needs_retain_graph():
    dictionary = digit_dictionary()
    model = build("gru_mix_monoattn", dictionary).double().eval()
    sample = samples(dictionary)[1]
    logits, _ = model(**sample["net_input"])
    loss = logits.logsumexp(-1).sum()
    first = torch.autograd.grad(loss, list(model.parameters()), retain_graph=True, allow_unused=True)
    second = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    for a, b in zip(first, second):
        assert (a is None and b is None) or torch.equal(a, b)
    with pytest.raises(RuntimeError, match="retain_graph"):
        loss.backward()


def test_the_loop_refuses_inputs_that_do_not_fit_together():
    B, T, H, S, D = 2, 3, 4, 5, 6
    args = dict(
        input_gates=torch.zeros(B, T, 3 * H), hidden0=torch.zeros(B, H), read_weight=torch.zeros(D + 3 * H, H),
        read_bias=torch.zeros(D + 3 * H), context_weight=torch.zeros(3 * H, D), values=torch.zeros(B, S, D),
        keys=torch.zeros(B, S, D), mono_gate=None, positions=None, step_size=None, lengths=None,
        padding_mask=torch.zeros(B, S, dtype=torch.bool), readout_sizes=[D, 0, 0], step_activation=None,
        step_temperature=0.0, reference=None, sigma_min=0.27, clamp_slope=None, mix_temperature=1.0,
        location_reference=False,
    )  # fmt: skip
    outputs, weights, position = compiled.kernels.decoder_loop(**args)
    assert outputs.shape == (B, T, H) and weights.shape == (B, T, S) and position is None
    assert torch.allclose(weights, torch.full((B, T, S), 1 / S))  # equal scores: a uniform softmax
    for change, message in [
        (dict(read_bias=torch.zeros(D + 3 * H + 1)), "inconsistent sizes"),
        (dict(values=torch.zeros(B, S, D, dtype=torch.float64)), "values must be a CPU tensor of Float"),
        (dict(keys=None), "do not fit the keys"),
        (dict(padding_mask=torch.zeros(B, S)), "padding_mask must be a bool"),
        (dict(readout_sizes=[D, 0]), "readout_sizes"),
    ]:
        with pytest.raises(RuntimeError, match=message):
            compiled.kernels.decoder_loop(**{**args, **change})


@pytest.mark.parametrize("arch", [name for name in PRESETS if name not in LOOPED])
def test_the_fast_paths_step_nodes_are_the_reference_where_the_loop_does_not_apply(arch):
    """The presets whose scorer has no C++ form: the fast path steps them with its C++ step nodes
    (the scorer in Python), the reference in the modules' Python; the same logits, attention and
    gradients to float rounding (float64), in training and in incremental decoding."""
    dictionary = digit_dictionary()
    model = build(arch, dictionary).double().eval()
    chosen = model.fast_path
    assert isinstance(chosen, FastPath) and chosen.training_code(model.decoder) == fast_path.STEP_NODES
    sample = samples(dictionary)[1]
    runs = {}
    for way, code in (("fast", chosen), ("reference", None)):
        fast_path.install(model, code)
        logits, attention, names, grads = pass_with_gradients(model, sample, dictionary)
        with torch.no_grad():  # every step incrementally, as a generator decodes
            net_input = sample["net_input"]
            encoder_out = model.encoder(net_input["src_tokens"], net_input["src_lengths"])
            state, tokens = {}, net_input["prev_output_tokens"]
            steps = [model.decoder(tokens[:, : t + 1], encoder_out, incremental_state=state)[0] for t in range(3)]
        runs[way] = logits, attention, grads, torch.cat(steps, dim=1), names
    (fast, reference) = runs["fast"], runs["reference"]

    def stepped(names):
        return any("StepProductBackward" in name for name in names)

    assert stepped(fast[4]) and not stepped(reference[4])
    assert_same_up_to_rounding(fast[0], reference[0], "logits")
    assert_same_up_to_rounding(fast[1], reference[1], "attention")
    assert set(fast[2]) == set(reference[2])
    for name, want in reference[2].items():
        assert_same_up_to_rounding(fast[2][name], want, f"gradient of {name}")
    assert_same_up_to_rounding(fast[3], reference[3], "incremental logits")
    assert_same_up_to_rounding(fast[3], fast[0][:, :3], "incremental against full logits")
