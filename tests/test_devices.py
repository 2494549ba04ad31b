"""Ready for a GPU and for half precision, checked without a GPU.

Devices: every tensor the plugin's code makes must follow its inputs' device.  The plugin's code
(encoder, decoder, reordering, output) runs here with the *default* device set to "meta": a
tensor made without an explicit device lands there and the next operation that meets the CPU
inputs fails, exactly where on a GPU it would have been a CPU tensor meeting CUDA ones.  fairseq's
own generator runs with the CPU default, as it would on a GPU.

Precision: training steps in bfloat16 and float16 (CPU kernels exist for both) give finite losses
and gradients; incremental decoding matches the full pass within half precision's rounding; the
location positions, steps and widths are computed in float32 at least, so the release's sum
normalisation (epsilon 1e-20, which is 0 in float16) neither underflows into NaN nor loses the
focus of a long source."""

import functools

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator
from model_helpers import ALL_ARCHS, random_digits

from fairseq_monoattn.metrics import GreedyDecoder, greedy_hypotheses
from fairseq_monoattn.models.transformer_monoattn import (
    TRANSFORMER_PRESETS,
    LocationEncoderAttention,
    LocationTransformerDecoder,
)
from fairseq_monoattn.testing import batch, build, digit_dictionary

D = digit_dictionary()
# the GRU family and the Transformer presets (whose location layers are the plugin's code; the rest
# of a Transformer is fairseq's, which makes some tensors on the CPU and moves them)
DEVICE_ARCHS = ALL_ARCHS + list(TRANSFORMER_PRESETS)
SOURCES = [list("31415"), list("2718281828459045"), list("7"), list("123456789012345678901234567890")]


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


@pytest.mark.parametrize("arch", DEVICE_ARCHS)
def test_no_tensor_is_made_on_a_fixed_device(arch):
    model = plugin_code_on_meta_default(build(arch, D, seed=1))
    model.train()
    sample = batch(D, SOURCES, [s[::-1] for s in SOURCES])
    logits, _ = model(**sample["net_input"])
    logits.float().logsumexp(-1).sum().backward()
    assert all(p.grad is None or p.grad.device.type == "cpu" for p in model.parameters())
    model.eval()
    plain = batch(D, SOURCES)
    outputs = greedy_hypotheses(GreedyDecoder(D, max_len_b=20), [model], plain)
    assert len(outputs) == len(SOURCES)
    for hypos in SequenceGenerator([model], D, beam_size=5, max_len_b=20).generate([model], plain):
        assert hypos[0]["tokens"].device.type == "cpu"


def training_step(model, sample):
    model.zero_grad()
    logits, _ = model(**sample["net_input"])
    loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), sample["target"].view(-1),
                                             ignore_index=D.pad())  # fmt: skip
    loss.backward()
    return loss


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("arch", DEVICE_ARCHS)
def test_half_precision_trains_and_decodes(arch, dtype):
    g = torch.Generator().manual_seed(0)
    sources = random_digits(g, 6, 3, 40)
    sample = batch(D, sources, sources)
    model = build(arch, D, seed=1).to(dtype)
    model.train()
    loss = training_step(model, sample)
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    reference = build(arch, D, seed=1)  # the same weights in float32
    reference.train()
    assert abs(loss.item() - training_step(reference, sample).item()) < 0.05 * max(1.0, loss.item())
    model.eval()
    generator = SequenceGenerator([model], D, beam_size=1, max_len_b=15)
    for i, hypos in enumerate(generator.generate([model], batch(D, sources))):
        tokens = hypos[0]["tokens"]
        src = batch(D, [sources[i]])["net_input"]["src_tokens"]
        prev = torch.cat([torch.tensor([D.eos()]), tokens[:-1]]).unsqueeze(0)
        logits, _ = model(src, torch.tensor([src.size(1)]), prev)
        full = (
            model.get_normalized_probs((logits, None), log_probs=True)[0].gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        )
        # incremental == full pass within half precision's rounding of the logits
        assert torch.allclose(full, hypos[0]["positional_scores"], atol=0.1), (arch, dtype, i)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("normalization", ["sum", "sum-per-column", "softmax"])
def test_the_normalisations_neither_underflow_nor_blur_in_half_precision(dtype, normalization):
    """A focus far past a 6-position source: the sum normalisations give zeros (the release's
    reset to START), never NaN; on a 300-position source the focus still sits on one position."""
    model = build("gru_rmonoattn", D, seed=2, location_normalization=normalization).to(dtype).eval()
    attention = model.decoder.attention
    far = batch(D, [list("12345")])
    encoder_out = model.encoder(**{k: v for k, v in far["net_input"].items() if k != "prev_output_tokens"})
    memory, state = model.decoder._start_state(encoder_out)
    heads = torch.tensor([[20.0, 0.0]], dtype=dtype)  # a ReLU step of 20 positions, the narrowest width
    weights, _, _ = attention.location(heads, torch.tensor([1.0]), memory, memory["padding_mask"], step=3)
    assert not torch.isnan(weights).any()
    if normalization == "softmax":
        assert weights[0].sum().item() == pytest.approx(1.0, abs=1e-6)
    else:
        assert weights.abs().sum().item() == 0.0
    long = batch(D, [[str(i % 10) for i in range(298)]])
    encoder_out = model.encoder(**{k: v for k, v in long["net_input"].items() if k != "prev_output_tokens"})
    memory, _ = model.decoder._start_state(encoder_out)
    assert memory["positions"].dtype == torch.float32
    centre = torch.tensor([200 / 299])  # position 200 of 0..299
    step = torch.tensor([[0.0, 0.0]], dtype=dtype)  # no step, the narrowest width
    weights, _, _ = attention.location(step, centre, memory, memory["padding_mask"], step=3)
    assert weights[0].argmax().item() == 200 and weights[0, 200].item() > 0.95


@pytest.mark.parametrize("arch", DEVICE_ARCHS)
def test_mixed_precision_under_autocast_trains(arch):
    """What fairseq's --amp does on a GPU, on the CPU's autocast: float32 weights, products in
    bfloat16; the gradients are finite and float32, and the loss is the float32 one within rounding."""
    g = torch.Generator().manual_seed(0)
    sources = random_digits(g, 6, 3, 40)
    sample = batch(D, sources, sources)
    model = build(arch, D, seed=1)
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = training_step(model, sample)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert torch.isfinite(loss) and grads and all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads)
    reference = build(arch, D, seed=1)
    reference.train()
    assert abs(loss.item() - training_step(reference, sample).item()) < 0.05 * max(1.0, loss.item())
