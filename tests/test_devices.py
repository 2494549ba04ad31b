"""Ready for a GPU and for half precision: every test here runs on the CPU, and on the GPU too where
torch sees one (``model_helpers.DEVICES``).

Devices: every tensor the plugin's code makes must follow its inputs' device.  The plugin's code
(encoder, decoder, reordering, output) runs here with the *default* device set to "meta": a
tensor made without an explicit device lands there and the next operation that meets the real
inputs fails, exactly where on a GPU it would have been a CPU tensor meeting CUDA ones.  fairseq's
own generator runs with the CPU default, as it would on a GPU.

Precision: a training step in bfloat16 and in float16 (the model cast as fairseq's --bf16 and
--fp16 cast it; CPU kernels exist for both) runs the reference path (the C++ kernels take float32
and float64 CPU tensors only) and gives finite losses, log-probabilities and gradients, the
log-probabilities those of the same weights in float32 within half precision's rounding
(``half_tolerance``); incremental decoding matches the full pass within the same bound; the
location positions, steps and widths are computed in float32 at least, so the release's sum
normalisation (epsilon 1e-20, which is 0 in float16) neither underflows into NaN nor loses the
focus of a long source."""

import functools
from types import SimpleNamespace

import pytest
import torch
from fairseq import utils as fairseq_utils
from fairseq.sequence_generator import SequenceGenerator
from model_helpers import ALL_ARCHS, DEVICES, random_digits

from fairseq_monoattn.metrics import GreedyDecoder, greedy_hypotheses
from fairseq_monoattn.models.transformer_monoattn import (
    TRANSFORMER_PRESETS,
    LocationEncoderAttention,
    LocationTransformerDecoder,
)
from fairseq_monoattn.tasks.length_generalization import TaskOptionError, check_precision
from fairseq_monoattn.testing import batch, build, digit_dictionary, teacher_forced_scores

D = digit_dictionary()
# the GRU family and the Transformer presets (whose location layers are the plugin's code; the rest
# of a Transformer is fairseq's, which makes some tensors on the CPU and moves them)
DEVICE_ARCHS = ALL_ARCHS + list(TRANSFORMER_PRESETS)
SOURCES = [list("31415"), list("2718281828459045"), list("7"), list("123456789012345678901234567890")]
HALF_PRECISIONS = [torch.bfloat16, torch.float16]
# How far a model run in half precision may be from the same weights run in float32 (the weights
# rounded to the half precision first, so only the arithmetic differs): HALF_ULPS epsilons of the
# half precision (bfloat16 2^-7, float16 2^-10) relative to the largest magnitude compared (at
# least 1).  A log-probability is the end of a chain of rounded products, each off by at most half
# an epsilon relative to its own size; measured on the CPU over every preset of DEVICE_ARCHS, the
# largest difference is 3.9 epsilons in bfloat16 and 2.4 in float16 (a Transformer with the
# recency mask), incremental against full decoding 0.7 and 2.5.  8 leaves twice that for another
# device's order of the additions.  testing.ROUNDING_ULPS (1024) is float32's and float64's bound:
# in bfloat16 it would allow 8 times the log-probabilities themselves.
HALF_ULPS = 8


def half_tolerance(dtype: torch.dtype, values: torch.Tensor) -> float:
    return HALF_ULPS * torch.finfo(dtype).eps * max(1.0, values.abs().max().item())


def on(device, sample):
    """``sample`` with its tensors on ``device``, as fairseq's task moves a batch."""
    return fairseq_utils.apply_to_sample(lambda tensor: tensor.to(device), sample)


def meta_tensors(value):
    """The meta tensors in a returned value (tensors, and tuples, lists and dicts of them)."""
    if isinstance(value, torch.Tensor):
        return [value] if value.device.type == "meta" else []
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in meta_tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in meta_tensors(item)]
    return []


def on_meta_default(function):
    """``function`` run with the default device "meta"; a meta tensor in what it returns is an error
    too (fairseq's code may add a meta tensor to CPU ones without raising)."""

    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        with torch.device("meta"):
            result = function(*args, **kwargs)
        if meta_tensors(result):
            raise RuntimeError(f"{function.__qualname__} returned a tensor made on the default device")
        return result

    return wrapped


def plugin_code_on_meta_default(model):
    """Run every method of the plugin's model that fairseq calls with the default device "meta"
    (of a Transformer: its location layers', and the decoder's recency mask and window)."""
    if isinstance(model.decoder, LocationTransformerDecoder):
        locations = [m for m in model.modules() if isinstance(m, LocationEncoderAttention)]
        methods = [(m, ("forward", "reorder_incremental_state")) for m in locations]
        methods.append((model.decoder, ("forget_old_steps",)))
        # the recency mask runs as a hook the self-attentions hold: swap in the wrapped method there
        wrapped = on_meta_default(model.decoder.recency_mask_for_one_step)
        for layer in model.decoder.layers:
            hooks = layer.self_attn._forward_pre_hooks
            for key, hook in hooks.items():
                if hook == model.decoder.recency_mask_for_one_step:
                    hooks[key] = wrapped
    else:
        methods = (
            (model.encoder, ("forward", "reorder_encoder_out")),
            (model.decoder, ("forward", "reorder_incremental_state")),
            (model, ("get_normalized_probs",)),
        )
    for module, names in methods:
        for name in names:
            setattr(module, name, on_meta_default(getattr(module, name)))
    return model


def test_the_check_can_fail():
    class Careless(torch.nn.Module):
        def forward(self, x):
            return x + torch.arange(x.size(-1))  # no device: the default one

    careless = Careless()
    careless.forward = on_meta_default(careless.forward)
    with pytest.raises((RuntimeError, NotImplementedError)):
        careless(torch.zeros(3)).sum().item()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", DEVICE_ARCHS)
def test_no_tensor_is_made_on_a_fixed_device(arch, device):
    model = plugin_code_on_meta_default(build(arch, D, seed=1).to(device))
    model.train()
    sample = on(device, batch(D, SOURCES, [s[::-1] for s in SOURCES]))
    logits, _ = model(**sample["net_input"])
    logits.float().logsumexp(-1).sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(g.device.type == device for g in grads)
    model.eval()
    plain = on(device, batch(D, SOURCES))
    outputs = greedy_hypotheses(GreedyDecoder(D, max_len_b=20), [model], plain)
    assert len(outputs) == len(SOURCES)
    for hypos in SequenceGenerator([model], D, beam_size=5, max_len_b=20).generate([model], plain):
        assert hypos[0]["tokens"].device.type == device


def training_step(model, sample):
    """One forward and backward pass: the logits' dtype, the log-probabilities (float32) and the loss."""
    model.zero_grad()
    logits, _ = model(**sample["net_input"])
    lprobs = torch.log_softmax(logits.float(), dim=-1)
    loss = torch.nn.functional.nll_loss(lprobs.view(-1, lprobs.size(-1)), sample["target"].view(-1),
                                        ignore_index=D.pad())  # fmt: skip
    loss.backward()
    return logits.dtype, lprobs.detach(), loss


def gradients(model):
    return torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_PRECISIONS)
@pytest.mark.parametrize("arch", DEVICE_ARCHS)
def test_half_precision_trains_and_decodes(arch, dtype, device):
    """Forward and backward in training mode (dropout off, so both runs draw nothing), then
    decoding, in ``dtype`` against the same weights in float32."""
    g = torch.Generator().manual_seed(0)
    sources = random_digits(g, 6, 3, 40)
    sample = on(device, batch(D, sources, sources))
    model = build(arch, D, seed=1, dropout=0.0).to(device, dtype).train()
    reference = build(arch, D, seed=1, dropout=0.0).to(device, dtype).float().train()  # the rounded weights
    computed_in, lprobs, loss = training_step(model, sample)
    assert computed_in == dtype  # in half precision, not cast back to float32
    _, want_lprobs, want_loss = training_step(reference, sample)
    scored = sample["target"].ne(D.pad())
    assert lprobs[scored].isfinite().all() and loss.isfinite()
    difference = (lprobs - want_lprobs)[scored].abs().max().item()
    assert difference <= half_tolerance(dtype, want_lprobs[scored]), (arch, dtype, difference)
    assert abs(loss.item() - want_loss.item()) <= half_tolerance(dtype, want_loss)
    # gradients: finite; the location focus makes some of them sensitive (a narrow focus moved by
    # a rounding changes its gradient much more than its value), so only their direction is
    # bounded: measured on the CPU, the cosine with float32's is 0.93 at the least (gru_onestep, bfloat16)
    grads, want_grads = gradients(model), gradients(reference)
    assert grads.isfinite().all() and grads.abs().sum() > 0
    assert torch.nn.functional.cosine_similarity(grads, want_grads, dim=0).item() > 0.8
    model.eval()
    generator = SequenceGenerator([model], D, beam_size=1, max_len_b=15)
    for i, hypos in enumerate(generator.generate([model], on(device, batch(D, sources)))):
        src = on(device, batch(D, [sources[i]]))["net_input"]["src_tokens"]
        full = teacher_forced_scores(model, D, src, hypos[0]["tokens"])
        incremental = hypos[0]["positional_scores"]
        assert incremental.isfinite().all()
        difference = (full.float() - incremental.float()).abs().max().item()
        assert difference <= half_tolerance(dtype, full.float()), (arch, dtype, i, difference)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_PRECISIONS)
@pytest.mark.parametrize("normalization", ["sum", "sum-per-column", "softmax"])
def test_the_normalisations_neither_underflow_nor_blur_in_half_precision(dtype, normalization, device):
    """A focus far past a 6-position source: the sum normalisations give zeros (the release's
    reset to START), never NaN; on a 300-position source the focus still sits on one position."""
    model = build("gru_rmonoattn", D, seed=2, location_normalization=normalization).to(device, dtype).eval()
    attention = model.decoder.attention
    far = on(device, batch(D, [list("12345")]))
    encoder_out = model.encoder(**{k: v for k, v in far["net_input"].items() if k != "prev_output_tokens"})
    memory, state = model.decoder._start_state(encoder_out)
    heads = torch.tensor([[20.0, 0.0]], dtype=dtype, device=device)  # a ReLU step of 20 positions, the narrowest width
    weights, _, _ = attention.location(heads, torch.tensor([1.0], device=device), memory, memory["padding_mask"],
                                       step=3)  # fmt: skip
    assert not torch.isnan(weights).any()
    if normalization == "softmax":
        assert weights[0].sum().item() == pytest.approx(1.0, abs=1e-6)
    else:
        assert weights.abs().sum().item() == 0.0
    long = on(device, batch(D, [[str(i % 10) for i in range(298)]]))
    encoder_out = model.encoder(**{k: v for k, v in long["net_input"].items() if k != "prev_output_tokens"})
    memory, _ = model.decoder._start_state(encoder_out)
    assert memory["positions"].dtype == torch.float32
    centre = torch.tensor([200 / 299], device=device)  # position 200 of 0..299
    step = torch.tensor([[0.0, 0.0]], dtype=dtype, device=device)  # no step, the narrowest width
    weights, _, _ = attention.location(step, centre, memory, memory["padding_mask"], step=3)
    assert weights[0].argmax().item() == 200 and weights[0, 200].item() > 0.95


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", DEVICE_ARCHS)
def test_mixed_precision_under_autocast_trains(arch, device):
    """What fairseq's --amp does on a GPU (autocast to float16), and the CPU's autocast (to
    bfloat16): float32 weights, products in half precision; the gradients are finite and float32,
    and the log-probabilities are float32's within half precision's rounding."""
    dtype = torch.float16 if device == "cuda" else torch.bfloat16
    g = torch.Generator().manual_seed(0)
    sources = random_digits(g, 6, 3, 40)
    sample = on(device, batch(D, sources, sources))
    model = build(arch, D, seed=1, dropout=0.0).to(device).train()
    with torch.autocast(device, dtype=dtype):
        computed_in, lprobs, loss = training_step(model, sample)
    assert computed_in == dtype  # the output projection's product in half precision
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert torch.isfinite(loss) and grads and all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads)
    _, want_lprobs, want_loss = training_step(build(arch, D, seed=1, dropout=0.0).to(device).train(), sample)
    scored = sample["target"].ne(D.pad())
    assert (lprobs - want_lprobs)[scored].abs().max().item() <= half_tolerance(dtype, want_lprobs[scored])
    assert abs(loss.item() - want_loss.item()) <= half_tolerance(dtype, want_loss)


# --- the task's check of --fp16 and --bf16 -------------------------------------------------------


def precision_options(**flags):
    """The task config's copies of fairseq's common options that check_precision reads."""
    return SimpleNamespace(**{name: flags.get(name, False) for name in ("fp16", "bf16", "cpu", "tpu")})


@pytest.mark.parametrize("cuda", [False, True], ids=["no-gpu", "gpu"])
def test_the_precision_check_refuses_only_what_cannot_run(monkeypatch, cuda):
    """fairseq-train --fp16 needs CUDA (its FP16Optimizer); fairseq-train --bf16 sets --tpu, which
    needs torch_xla; bfloat16 without --tpu (fairseq-hydra-train's common.bf16=true) runs on any
    device.  A machine with a GPU is stood in for by torch.cuda.is_available."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(fairseq_utils, "xm", None, raising=False)  # no torch_xla
    allowed = [{}, {"bf16": True}, {"bf16": True, "cpu": True}, *([{"fp16": True}] if cuda else [])]
    for flags in allowed:
        check_precision(precision_options(**flags))
    refused = {
        "--fp16: fairseq trains in float16 on a CUDA device only, and --cpu was given; drop --fp16": {
            "fp16": True,
            "cpu": True,
        },
        "--bf16: fairseq-train's --bf16 implies --tpu, a TPU through torch_xla, which is not installed here; "
        "drop --bf16 (fairseq-hydra-train's common.bf16=true trains in bfloat16 without a TPU)": {
            "bf16": True,
            "tpu": True,
        },
    }
    if not cuda:
        refused["--fp16: fairseq trains in float16 on a CUDA device only, and torch has no CUDA device here; "
                "drop --fp16"] = {"fp16": True}  # fmt: skip
    for message, flags in refused.items():
        with pytest.raises(TaskOptionError) as refusal:
            check_precision(precision_options(**flags))
        assert str(refusal.value) == message and "\n" not in message
    monkeypatch.setattr(fairseq_utils, "xm", object())  # torch_xla installed: a TPU run is fairseq's
    check_precision(precision_options(bf16=True, tpu=True))
