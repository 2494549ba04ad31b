"""Every C++ kernel (fairseq_monoattn._kernels, built from fairseq_monoattn/csrc) beside the Python
code it stands for, its twin.

``TWINS`` names each function the module exports with its twin and the test that compares the two;
it must cover exactly what the module exports, so a new kernel without a twin fails here.  Each
comparison runs both on the same random inputs, in float64 and float32, and asserts the outputs and
the gradients agree within ``fairseq_monoattn.testing``'s rounding bound (two code paths: never bit
for bit).  The comparisons live in this file, except the decoder loop's, whose home is
tests/test_decoder_loop.py (it runs every preset the loop computes).  A last test scans csrc/ for
torch's internal autograd API: the kernels are written against the public extension API only.
"""

import functools
import importlib
import re
from pathlib import Path

import pytest
import torch
from model_helpers import location_attention

from fairseq_monoattn.fast_path import FastPath
from fairseq_monoattn.modules import compiled
from fairseq_monoattn.modules.positions import normalized_positions, padding_mask
from fairseq_monoattn.testing import assert_same_up_to_rounding

needs_kernels = pytest.mark.skipif(
    compiled.kernels is None,
    reason="the C++ kernels are not built (pip install --no-build-isolation --use-pep517 -e .)",
)
DTYPES = pytest.mark.parametrize("dtype", [torch.float64, torch.float32])

# kernel: (its Python twin as "module:attribute", the test comparing them as "[test module::]test")
TWINS = {
    "packed_gru_forward": ("fairseq_monoattn.modules.gru:_python_loop", "test_the_packed_gru_loop_is_the_python_loop"),
    "packed_gru_backward": ("fairseq_monoattn.modules.gru:_python_loop", "test_the_packed_gru_loop_is_the_python_loop"),
    "packing_plan": ("fairseq_monoattn.modules.gru:_Packing._plan", "test_the_packing_plan_is_the_python_plan"),
    "gru_step": ("fairseq_monoattn.modules.gru:_GRUUpdate", "test_the_gru_step_and_softmax_focus_are_the_python_nodes"),
    "softmax_gaussian": (
        "fairseq_monoattn.modules.normalizations:_SoftmaxGaussian",
        "test_the_gru_step_and_softmax_focus_are_the_python_nodes",
    ),
    "location_focus": (
        "fairseq_monoattn.modules.location:LocationAttention.focus_step",
        "test_the_location_focus_is_the_python_focus",
    ),
    "mixed_focus": (
        "fairseq_monoattn.modules.cross_attention:CrossAttention.attend_parts",
        "test_the_mix_is_the_python_mix",
    ),
    "step_product": ("fairseq_monoattn.modules.step_linear:_StepProduct", "test_the_step_product_is_the_python_node"),
    "step_read": (
        "fairseq_monoattn.modules.step_linear:_StepRead",
        "test_the_step_operands_are_the_python_nodes",
    ),
    "step_score": (
        "fairseq_monoattn.modules.step_linear:_StepScore",
        "test_the_step_operands_are_the_python_nodes",
    ),
    "PendingFactors": (
        "fairseq_monoattn.modules.step_linear:_PendingFactors",
        "test_the_step_operands_are_the_python_nodes",
    ),
    "decoder_loop": (
        "fairseq_monoattn.models.gru_seq2seq:GRUDecoder.reference_pass",
        "test_decoder_loop::test_the_loop_node_is_the_decoders_steps",
    ),
}
# kernels on integer tensors, compared for equality once (no float rounding to bound)
INTEGER_KERNELS = {"packing_plan"}


def resolve(path: str):
    """The object "module:attribute.attribute" names."""
    module, _, attributes = path.partition(":")
    target = importlib.import_module(module)
    for name in attributes.split("."):
        target = getattr(target, name)
    return target


def comparison(name: str):
    """The test function "[test module::]test" names (this module where no module is named)."""
    module, _, test = name.rpartition("::")
    return getattr(importlib.import_module(module) if module else importlib.import_module(__name__), test)


@needs_kernels
def test_the_table_names_every_kernel_with_its_twin_and_comparison():
    exported = {name for name in dir(compiled.kernels) if not name.startswith("_")}
    assert set(TWINS) == exported, (
        f"kernels without a twin in TWINS: {sorted(exported - set(TWINS))}; "
        f"entries for no kernel: {sorted(set(TWINS) - exported)}"
    )
    for kernel, (twin, test) in TWINS.items():
        assert callable(resolve(twin)), kernel
        marks = {
            mark.args[0]: mark.args[1]
            for mark in getattr(comparison(test), "pytestmark", [])
            if mark.name == "parametrize"
        }
        if kernel not in INTEGER_KERNELS:
            assert set(marks.get("dtype", ())) == {torch.float32, torch.float64}, f"{test} runs {kernel} in both dtypes"


# --- the encoder's packed GRU loop --------------------------------------------------------------


@needs_kernels
@DTYPES
def test_the_packed_gru_loop_is_the_python_loop(dtype):
    """The two loops on an encoder's batch (32 rows of 1-40 positions, two layers): the same
    outputs, final states and gradients of the input and of every weight to float rounding."""
    from fairseq_monoattn.modules.gru import bidirectional_gru

    torch.manual_seed(3)
    rnn = torch.nn.GRU(16, 8, num_layers=2, batch_first=True, bidirectional=True).to(dtype)
    lengths = torch.randint(1, 41, (32,))
    lengths[5] = 40
    x = torch.randn(32, 40, 16, dtype=dtype, requires_grad=True)
    params = [x] + list(rnn.parameters())
    runs = []
    for compiled_loop in (False, True):
        out, final = bidirectional_gru(rnn, x, lengths, fast_path=FastPath() if compiled_loop else None)
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(4), dtype=dtype)
        loss = (out * weights).sum() + final.pow(2).sum()
        runs.append((out, final, torch.autograd.grad(loss, params)))
    (want, want_final, want_grads), (got, got_final, got_grads) = runs
    assert_same_up_to_rounding(got, want, "states")
    assert_same_up_to_rounding(got_final, want_final, "final states")
    names = ["input"] + [name for name, _ in rnn.named_parameters()]
    for name, g, w in zip(names, got_grads, want_grads):
        assert_same_up_to_rounding(g, w, f"gradient of {name}")


@needs_kernels
def test_the_packing_plan_is_the_python_plan():
    """Where each row and position of a batch goes when the encoder steps it packed, from one C++ call:
    the same step sizes and index tensors as the Python code's, on 300 random batches (ties in the
    lengths, one row, rows as long as the batch is wide), and a clear refusal of a row length the
    batch cannot hold.  Integer indices: equal, not close."""
    from fairseq_monoattn.modules.gru import _Packing

    names = ("forward_inputs", "backward_inputs", "forward_outputs", "backward_outputs", "finals")
    generator = torch.Generator().manual_seed(0)
    for trial in range(300):
        batch = 1 if trial % 50 == 0 else int(torch.randint(1, 40, (1,), generator=generator))
        width = int(torch.randint(1, 30, (1,), generator=generator))
        lengths = torch.randint(1, width + 1, (batch,), generator=generator)
        lengths[0] = width if trial % 3 == 0 else lengths[0]
        got = _Packing(lengths, width)
        want = _Packing.__new__(_Packing)
        want._plan(lengths, width)
        assert got.sizes == want.sizes and got.total == want.total
        for name in names:
            assert torch.equal(getattr(got, name), getattr(want, name)), (trial, name)
            assert getattr(got, name).dtype == torch.int64
    with pytest.raises(RuntimeError, match="row 1 has length 6, outside 1 .. 5"):
        compiled.kernels.packing_plan(torch.tensor([2, 6]), 5)
    with pytest.raises(RuntimeError, match="row 0 has length 0"):
        compiled.kernels.packing_plan(torch.tensor([0, 3]), 5)


# --- the decoder step's nodes -------------------------------------------------------------------


@needs_kernels
@DTYPES
def test_the_gru_step_and_softmax_focus_are_the_python_nodes(dtype):
    """The decoder step's GRU update and softmax focus as C++ nodes against the Python nodes on a
    batch of the presets' size: the same outputs and gradients to float rounding, the hidden gates
    read from a view of wider rows as the decoder passes them."""
    from fairseq_monoattn.modules.gru import gru_update
    from fairseq_monoattn.modules.normalizations import SoftmaxFocus

    generator = torch.Generator().manual_seed(5)
    readout = torch.randn(32, 7 + 384, generator=generator, dtype=dtype, requires_grad=True)
    input_gates = torch.randn(32, 384, generator=generator, dtype=dtype, requires_grad=True)
    hidden = torch.randn(32, 128, generator=generator, dtype=dtype, requires_grad=True)
    lengths = torch.randint(1, 46, (32,), generator=generator)
    positions = normalized_positions(lengths, 45, dtype)
    mask = padding_mask(lengths, 45)
    mu = torch.rand(32, generator=generator, dtype=dtype).mul(1.4).sub(0.2).requires_grad_()
    sigma = torch.rand(32, generator=generator, dtype=dtype).add(0.02).requires_grad_()
    upstream = torch.randn(32, 128, generator=generator, dtype=dtype)
    focus_upstream = torch.randn(32, 45, generator=generator, dtype=dtype)
    runs = {}
    for enabled in (False, True):
        code = FastPath() if enabled else None
        new_hidden = (gru_update if code is None else code.gru_update)(input_gates, readout[:, 7:], hidden)
        weights = (SoftmaxFocus().focus if code is None else code.softmax_focus)(positions, mu, sigma, mask)
        assert (type(new_hidden.grad_fn).__name__ == "CppFunction") == enabled
        loss = (new_hidden * upstream).sum() + (weights * focus_upstream).sum()
        runs[enabled] = (new_hidden, weights, torch.autograd.grad(loss, (readout, input_gates, hidden, mu, sigma)))
    (want_hidden, want_weights, want_grads), (got_hidden, got_weights, got_grads) = runs[False], runs[True]
    assert_same_up_to_rounding(got_hidden, want_hidden, "new hidden state")
    assert_same_up_to_rounding(got_weights, want_weights, "focus")
    assert got_weights[mask].abs().sum() == 0
    for name, got, want in zip(("readout", "input gates", "hidden", "mu", "sigma"), got_grads, want_grads):
        assert_same_up_to_rounding(got, want, f"gradient of {name}")
    assert got_grads[0][:, :7].abs().sum() == 0  # nothing flows into the columns the update does not read


@needs_kernels
@DTYPES
def test_the_location_focus_is_the_python_focus(dtype):
    """The whole location focus of a step (step activation, reference, leaky clamp, width, softmax
    focus and the attended position) as one C++ node against the Python modules, for every built-in
    step activation and reference, with and without the clamp, at the first step and a later one:
    the same outputs and gradients (the heads, the previous position, Mono's gate) to float
    rounding, no weight on padding.  Rows where the focus lands exactly on START (a ReLU step of 0
    from position 0) take the clamp's tie, where torch splits the gradient in half."""
    generator = torch.Generator().manual_seed(11)
    lengths = torch.randint(1, 46, (32,), generator=generator)
    mask = padding_mask(lengths, 45)
    tested = 0
    for step_activation in ("sigmoid", "mono", "relu", "softstair", "none"):
        for reference in ("previous", "gated", "initial-bias"):
            for clamp_slope in (None, 0.01):
                module = location_attention(reference, step_activation, clamp_slope=clamp_slope, mono_gate_init=0.3)
                module = module.to(dtype)
                memory = module.prepare(lengths, 45, dtype)
                heads = torch.randn(32, module.num_heads, generator=generator, dtype=dtype).mul(2).requires_grad_()
                previous = torch.rand(32, generator=generator, dtype=dtype).mul(1.2)
                previous[:4] = 0.0
                previous.requires_grad_()
                shapes = ((32, 45), (32,), (32,), (32,))  # weights, mu, steps, position
                upstream = [torch.randn(*shape, generator=generator, dtype=dtype) for shape in shapes]
                parameters = [heads, previous] + list(module.parameters())
                for step in (1, 3):
                    runs = {}
                    for enabled in (False, True):
                        code = FastPath() if enabled else None
                        focus_step = (
                            module.focus_step if code is None else functools.partial(code.location_focus, module)
                        )
                        weights, mu, steps, position = focus_step(heads, previous, memory, mask, step)
                        assert (position is not None) == enabled
                        if position is None:
                            position = (weights * memory["positions"]).sum(-1)
                        outputs = (weights, mu, steps, position)
                        loss = sum((o * u).sum() for o, u in zip(outputs, upstream))
                        runs[enabled] = outputs, torch.autograd.grad(loss, parameters, materialize_grads=True)
                    (want, want_grads), (got, got_grads) = runs[False], runs[True]
                    where = f"{step_activation}/{reference}/{clamp_slope}/step {step}"
                    for name, g, w in zip(("weights", "mu", "steps", "position"), got, want):
                        assert_same_up_to_rounding(g, w, f"{where}: {name}")
                    assert got[0][mask].abs().sum() == 0
                    for index, (g, w) in enumerate(zip(got_grads, want_grads)):
                        assert_same_up_to_rounding(g, w, f"{where}: gradient {index}")
                    tested += 1
    assert tested == 60


@needs_kernels
@DTYPES
def test_the_mix_is_the_python_mix(dtype):
    """The mix of the content and the location focus and the position it attends, as one C++ node,
    against the Python operations it stands for (CrossAttention.attend_parts): the same outputs and
    gradients (scores, location weights, mixing logit) to float rounding; padding gets no weight."""
    generator = torch.Generator().manual_seed(12)
    lengths = torch.randint(1, 46, (32,), generator=generator)
    mask, positions = padding_mask(lengths, 45), normalized_positions(lengths, 45, dtype)
    scores = torch.randn(32, 45, generator=generator, dtype=dtype).mul(3).requires_grad_()
    location_logits = torch.randn(32, 45, generator=generator, dtype=dtype).requires_grad_()
    mix_logit = torch.randn(32, 1, generator=generator, dtype=dtype).mul(2).requires_grad_()
    upstream = torch.randn(32, 45, generator=generator, dtype=dtype), torch.randn(32, generator=generator, dtype=dtype)
    runs = []
    for node in (False, True):
        location = location_logits.masked_fill(mask, float("-inf")).softmax(-1)
        if node:
            weights, position = compiled.kernels.mixed_focus(scores, mask, location, mix_logit, 0.7, positions)
        else:
            content = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
            m = torch.sigmoid(0.7 * mix_logit)
            weights = location + m * (content - location)
            position = (weights * positions).sum(-1)
        loss = (weights * upstream[0]).sum() + (position * upstream[1]).sum()
        runs.append((weights, position, torch.autograd.grad(loss, (scores, location_logits, mix_logit))))
    (want_w, want_p, want_grads), (got_w, got_p, got_grads) = runs
    assert_same_up_to_rounding(got_w, want_w, "weights")
    assert_same_up_to_rounding(got_p, want_p, "position")
    assert got_w[mask].abs().sum() == 0
    for name, got, want in zip(("scores", "location", "mix logit"), got_grads, want_grads):
        assert_same_up_to_rounding(got, want, f"gradient of {name}")


# --- the per-step products and the factors they file --------------------------------------------


@needs_kernels
@DTYPES
def test_the_step_product_is_the_python_node(dtype):
    """A recurrence h_t = tanh(o_t + h_{t-1} W^T + b) through StepLinear, its steps C++ nodes filing
    into a C++ PendingFactors and Python nodes filing into the Python one: the same outputs and
    gradients (W and b from the collector, the offsets and the start from the steps) to float rounding."""
    from fairseq_monoattn.modules.step_linear import StepLinear

    generator = torch.Generator().manual_seed(2)
    weight = torch.randn(24, 24, generator=generator, dtype=dtype).div(5).requires_grad_()
    bias = torch.randn(24, generator=generator, dtype=dtype, requires_grad=True)
    offsets = torch.randn(9, 32, 24, generator=generator, dtype=dtype, requires_grad=True)
    start = torch.randn(32, 24, generator=generator, dtype=dtype, requires_grad=True)
    scale = torch.arange(1.0, 10.0, dtype=dtype).view(9, 1, 1)
    runs = {}
    for enabled in (False, True):
        linear = StepLinear(weight, bias, kernels=compiled.kernels if enabled else None)
        h, outputs = start, []
        for offset in offsets.unbind(0):
            product = linear(h, offset)
            assert "StepProductBackward" in product.grad_fn.name()
            assert (type(product.grad_fn).__name__ == "CppFunction") == enabled
            h = torch.tanh(product)
            outputs.append(h)
        outputs = torch.stack(outputs)
        runs[enabled] = outputs, torch.autograd.grad((outputs * scale).sum(), [weight, bias, offsets, start])
    (want, want_grads), (got, got_grads) = runs[False], runs[True]
    assert_same_up_to_rounding(got, want, "states")
    for name, g, w in zip(("weight", "bias", "offsets", "start"), got_grads, want_grads):
        assert_same_up_to_rounding(g, w, f"gradient of {name}")


@needs_kernels
@DTYPES
def test_the_step_operands_are_the_python_nodes(dtype):
    """Values read and keys scored at every step of a recurrence through StepOperands, their steps
    C++ nodes filing into a C++ PendingFactors and Python nodes filing into the Python one: the same
    outputs and gradients (the keys and values from the collectors, the start, the map) to float
    rounding; the collectors find every step's factors and leave none behind."""
    from fairseq_monoattn.modules.step_linear import read_rows, score_rows, with_step_operands

    generator = torch.Generator().manual_seed(3)
    values = torch.randn(32, 17, 24, generator=generator, dtype=dtype, requires_grad=True)
    keys = torch.randn(32, 17, 24, generator=generator, dtype=dtype, requires_grad=True)
    start = torch.randn(32, 24, generator=generator, dtype=dtype, requires_grad=True)
    mix = torch.randn(24, 24, generator=generator, dtype=dtype).div(5).requires_grad_()
    runs = {}
    for enabled in (False, True):
        memory = with_step_operands(
            {"values": values, "keys": keys}, ("values", "keys"), kernels=compiled.kernels if enabled else None
        )
        pending = [operand.pending for operand in memory["step_operands"].values()]
        assert all(isinstance(p, compiled.kernels.PendingFactors) == enabled for p in pending)
        h, outputs = start, []
        for _ in range(6):  # a_t = softmax(K h_{t-1}), h_t = tanh(a_t V W)
            scores = score_rows(memory, "keys", h)
            context = read_rows(memory, "values", scores.softmax(dim=-1))
            assert "StepScoreBackward" in scores.grad_fn.name() and "StepReadBackward" in context.grad_fn.name()
            assert (type(context.grad_fn).__name__ == "CppFunction") == enabled
            h = torch.tanh(context @ mix)
            outputs.append(h)
        outputs = torch.stack(outputs)
        loss = (outputs * torch.arange(1.0, 7.0, dtype=dtype).view(6, 1, 1)).sum()
        runs[enabled] = outputs, torch.autograd.grad(loss, [values, keys, start, mix])
        assert all(p.take() == [] for p in pending)  # the collectors took every step's factors
    (want, want_grads), (got, got_grads) = runs[False], runs[True]
    assert_same_up_to_rounding(got, want, "states")
    for name, g, w in zip(("values", "keys", "start", "map"), got_grads, want_grads):
        assert_same_up_to_rounding(g, w, f"gradient of {name}")


# --- the kernels' source ------------------------------------------------------------------------

CSRC = Path(__file__).resolve().parent.parent / "fairseq_monoattn" / "csrc"
# torch's internal autograd API, which changes without notice between releases: the kernels use the
# public extension API (torch/extension.h, torch::autograd::Function, torch::class_) instead
FORBIDDEN = {
    "an internal torch header": re.compile(r"#\s*include\s*[<\"]torch/csrc/"),
    "a raw autograd Node": re.compile(r":\s*public\s+(torch::autograd::)?Node\b"),
    "set_history": re.compile(r"\bset_history\b"),
    "collect_next_edges": re.compile(r"\bcollect_next_edges\b"),
}


def forbidden_uses(directory: Path):
    """(file:line, what) for every use of torch's internal autograd API in directory's C++ sources."""
    found = []
    for path in sorted(directory.glob("*")):
        if path.suffix not in (".cpp", ".h", ".hpp", ".cc"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [(f"{path.name}:{number}", what) for what, pattern in FORBIDDEN.items() if pattern.search(line)]
    return found


def test_the_kernels_use_only_torchs_public_extension_api(tmp_path):
    assert sorted(path.name for path in CSRC.glob("*.cpp")), "no C++ sources found in fairseq_monoattn/csrc"
    assert forbidden_uses(CSRC) == []
    # the scan finds each of them
    (tmp_path / "node.cpp").write_text(
        "#include <torch/csrc/autograd/functions/utils.h>\n"
        "struct Backward : public torch::autograd::Node {};\n"
        "void f() { torch::autograd::set_history(out, node); auto e = collect_next_edges(x); }\n"
    )
    assert {what for _, what in forbidden_uses(tmp_path)} == set(FORBIDDEN)
