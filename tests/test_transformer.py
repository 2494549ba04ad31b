"""The plugin's location attention in fairseq's Transformer (models/transformer_monoattn.py):
every preset and layout decodes incrementally as its full pass does, with beams of 1 and 5,
alone as in a padded batch; the parallel scan over output steps gives the step-by-step focus of
the GRU decoder's location module; alignments; fairseq-train and fairseq-generate."""

import fairseq.utils
import pytest
import torch
import torch.nn.functional as F
from fairseq_cli_helpers import USER_DIR, hypotheses, run_command, write_copy_dataset
from model_helpers import greedy_decoder_lengths, random_digits

from fairseq_monoattn.models.transformer_monoattn import LENGTH_GENERALISATION, TRANSFORMER_PRESETS
from fairseq_monoattn.testing import (
    assert_incremental_equals_full,
    assert_padding_invariant,
    batch,
    build,
    digit_dictionary,
)
from monoattn_lab.sweeps import LENGTH_GENERALISATION_OPTIONS

D = digit_dictionary()
SOURCES = [list("31415"), list("2718281828459045"), list("7"), list("123456789012345678901234567890")]
CONFIGURATIONS = [(name, {}) for name in TRANSFORMER_PRESETS] + [
    ("transformer_monoattn", {"location_layers": "all"}),
    ("transformer_mix_onestep", {"location_layers": "shared"}),
    ("transformer_onestep", {"encoder_learned_pos": True, "decoder_learned_pos": True}),
    ("transformer_onestep", {"no_token_positional_embeddings": True, "direction_gate": False}),
    ("transformer_locattn_like", {}),
    ("transformer_onestep", {"no_token_positional_embeddings": True, "decoder_self_attention_window": 3}),
    ("transformer_small", {"decoder_self_attention_window": 1}),
    ("transformer_onestep", {"no_token_positional_embeddings": True, "decoder_recency_bias": 1.0}),
    ("transformer_monoattn", {"decoder_self_attention_window": 3, "decoder_recency_bias": 0.5}),
    ("transformer_onestep", {"no_token_positional_embeddings": True, "dwell_count": True}),
    ("transformer_mix_onestep", {"location_layers": "shared", "dwell_count": True}),
    ("transformer_monoattn_recency", {"direction_gate": False}),
    ("transformer_monoattn", {"direction_gate_hard": True}),
    ("transformer_monoattn", {"direction_gate_keep_end": True, "direction_temperature": 50.0}),
    ("transformer_monoattn_recency", {"decoder_recency_exempt_start": False}),
]


def build_configuration(name, options, seed):
    if name == "transformer_locattn_like":  # LocAttn's reference and softstair steps, relative content mixed in
        options = dict(reference="gated", step_activation="softstair", clamp_center=True, attention_scoring="relative")
        name = "transformer_onestep"
    model = build(name, D, seed=seed, **options)
    with torch.no_grad():  # a dwell weight away from its initial 0, where the count changes nothing
        for module in model.modules():
            if getattr(module, "dwell_weight", None) is not None:
                module.dwell_weight.fill_(-0.6)
    return model


@pytest.mark.parametrize("name, options", CONFIGURATIONS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONFIGURATIONS)])
def test_incremental_decoding_and_padding_invariance(name, options, monkeypatch):
    model = build_configuration(name, options, seed=1)
    for beam in (1, 5):
        assert_incremental_equals_full(model, D, SOURCES, beam)
    # in float64: padding must change nothing, and float32's rounding (which depends on the padded
    # width) can grow over 40 untrained steps past any tolerance.  fairseq's attention softmax
    # (fairseq.utils.softmax) computes in float32 whatever the model's dtype, which alone moves
    # the float64 logits by about 1e-7 between padded widths; taken in the model's dtype here
    monkeypatch.setattr(fairseq.utils, "softmax", lambda x, dim, onnx_trace=False: F.softmax(x, dim=dim))
    assert_padding_invariant(build_configuration(name, options, seed=2).double(), D, SOURCES, atol=1e-10)


@pytest.mark.parametrize("name, options", CONFIGURATIONS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONFIGURATIONS)])
def test_the_greedy_decoder_gives_fairseqs_greedy_outputs(name, options):
    """Validation and scoring decode the Transformer presets with metrics.GreedyDecoder: the same
    tokens as fairseq's SequenceGenerator (beam 1, no minimum length) for every example, with
    outputs that end at different steps (finished ones leave the batch) or at the length limit."""
    model = build_configuration(name, options, seed=3).eval()
    sample = batch(D, random_digits(torch.Generator().manual_seed(1), 12, 1, 30))
    # an untrained model rarely stops: </s>'s score rises by 0.25 a step from -6, so that each
    # sentence stops when the ramp overtakes its own margin (both decoders make one call a step)
    steps = [0]

    def eos_ramp(module, inputs, output):
        steps[0] += 1
        output = output.clone()
        output[..., D.eos()] += -6 + 0.25 * steps[0]
        return output

    def restart():
        steps[0] = 0

    model.decoder.output_projection.register_forward_hook(eos_ramp)
    lengths = set()
    for max_len_a, max_len_b in ((0, 3), (1.5, 2), (0, 40)):
        lengths |= greedy_decoder_lengths(model, D, sample, max_len_a, max_len_b, before_each=restart)
    assert len(lengths) >= 5, lengths  # sentences of several lengths, the limits included


def test_the_layouts_put_location_attention_where_they_say():
    from fairseq_monoattn.models.transformer_monoattn import LocationEncoderAttention

    def kinds(model):
        return [type(layer.encoder_attn).__name__ for layer in model.decoder.layers]

    assert kinds(build("transformer_small", D)) == ["MultiheadAttention"] * 3
    assert kinds(build("transformer_onestep", D)) == ["MultiheadAttention"] * 2 + ["LocationEncoderAttention"]
    shared = build("transformer_onestep", D, location_layers="shared").decoder.layers
    assert all(isinstance(layer.encoder_attn, LocationEncoderAttention) for layer in shared)
    assert [layer.encoder_attn.leads for layer in shared] == [True, False, False]
    assert shared[0].encoder_attn.shared is shared[2].encoder_attn.shared


def test_a_shared_focus_is_the_first_layers():
    """--location-layers shared: the layers after the first read its focus; with no content mixed
    in, every layer attends with the same weights."""
    model = build("transformer_onestep", D, seed=3, location_layers="shared").eval()
    model.decoder.layers[1].encoder_attn.attention.readout.weight.data.mul_(3.0)  # its own heads would differ
    sample = batch(D, SOURCES, SOURCES)
    focus = []
    for layer in model.decoder.layers:
        layer.need_attn = True
        original = layer.encoder_attn.forward

        def record(*args, original=original, **kwargs):
            kwargs["need_weights"] = True
            out, weights = original(*args, **kwargs)
            focus.append(weights.squeeze(0) if weights.dim() == 4 else weights)  # the alignment layer's: per head
            return out, weights

        layer.encoder_attn.forward = record
    model(**sample["net_input"])
    assert torch.equal(focus[0], focus[1]) and torch.equal(focus[0], focus[2])


def test_a_shared_focus_reads_every_layers_values_in_the_leaders_direction():
    """--location-layers shared with a direction gate: one gate for the layers (the focus names
    positions of the leader's g e + (1 - g) reverse(e)), whatever the followers' own draws were."""
    model = build(
        "transformer_onestep",
        D,
        seed=5,
        location_layers="shared",
        direction_gate_summary="none",
        direction_temperature=50.0,
    ).eval()
    attentions = [layer.encoder_attn.attention for layer in model.decoder.layers]
    assert attentions[1].direction_gate is attentions[0].direction_gate is attentions[2].direction_gate
    with torch.no_grad():
        attentions[0].direction_gate.proj.bias.fill_(-0.2)  # g = sigmoid(-10): reversed
    sample = batch(D, SOURCES, SOURCES)
    gates = []
    for layer in model.decoder.layers:
        original = layer.encoder_attn.prepare

        def record(*args, original=original, **kwargs):
            memory = original(*args, **kwargs)
            gates.append(memory["direction"])
            return memory

        layer.encoder_attn.prepare = record
    model(**sample["net_input"])
    assert len(gates) == 3 and all(torch.equal(gates[0], g) for g in gates[1:])
    assert (gates[0] < 1e-4).all()
    # the parameters are one set: fairseq's optimizer sees the gate once
    names = [n for n, _ in model.named_parameters() if "direction_gate" in n]
    assert len(names) == 2  # proj.weight and proj.bias of the leader


@pytest.mark.parametrize(
    "options, expected_state", [({}, ["position"]), ({"dwell_count": True}, ["position", "dwell"])], ids=["", "dwell"]
)
def test_the_scan_over_steps_is_the_step_by_step_location_focus(options, expected_state):
    """attend_all (every step's query at once, the Transformer's way) against attend (one step
    at a time, the GRU decoder's way) on the same readouts: the same weights, context and
    positions (and dwell counts), for a mixing, position-reference attention."""
    model = build("gru_mix_monoattn_pr", D, seed=4, mono_gate_init=0.0, **options).double()
    attention = model.decoder.attention
    if attention.location.counts_dwell:
        with torch.no_grad():
            attention.location.dwell_weight.fill_(-0.8)
    g = torch.Generator().manual_seed(0)
    encodings = torch.randn(3, 9, 128, generator=g, dtype=torch.float64)
    lengths = torch.tensor([9, 4, 6])
    memory = attention.prepare(encodings, torch.randn(3, 128, generator=g, dtype=torch.float64), lengths)
    weight, bias, sizes = attention.step_readout()
    readout = torch.nn.functional.linear(torch.randn(3, 7, 128, generator=g, dtype=torch.float64), weight, bias)
    context_all, weights_all, _, last = attention.attend_all(readout, sizes, memory, attention.initial_state(memory), 1)
    state = attention.initial_state(memory)
    for t in range(7):
        context, weights, state = attention.attend(readout[:, t], sizes, memory, state, t + 1)
        assert torch.allclose(weights, weights_all[:, t], atol=1e-12) and torch.allclose(context, context_all[:, t])
    assert state.keys() == last.keys() == set(expected_state)
    for name in expected_state:
        assert torch.allclose(state[name], last[name], atol=1e-12), name


def test_alignments_are_the_location_weights_over_the_source_columns():
    model = build("transformer_onestep", D, seed=5).eval()
    model.decoder.layers[-1].need_attn = True
    sample = batch(D, SOURCES, SOURCES)
    _, extra = model(**sample["net_input"])
    attn = extra["attn"][0]  # (B, T, S): the last layer's, the alignment layer
    src = sample["net_input"]["src_tokens"]
    assert attn.shape == (len(SOURCES), sample["net_input"]["prev_output_tokens"].size(1), src.size(1))
    assert torch.allclose(attn.sum(-1), torch.ones(attn.shape[:2]), atol=1e-5)
    assert (attn.masked_select(src.eq(D.pad()).unsqueeze(1).expand_as(attn)) == 0).all()


@pytest.mark.long(12)
def test_train_and_generate_through_fairseqs_commands(tmp_path):
    data = write_copy_dataset(tmp_path / "data", {"train": (96, 2, 5), "valid": (12, 3, 6), "test": (10, 3, 7)})
    save = tmp_path / "ck"
    run_command("fairseq-train", str(data / "bin"), "--user-dir", USER_DIR, "--arch", "transformer_monoattn",
                "--task", "length_generalization", "--criterion", "seq_acc", "--eval-accuracy",
                "--best-checkpoint-metric", "accuracy", "--maximize-best-checkpoint-metric", "--optimizer", "adam",
                "--lr", "1e-3", "--batch-size", "16", "--max-epoch", "2", "--save-dir", str(save),
                "--no-epoch-checkpoints", "--seed", "1")  # fmt: skip
    output = run_command("fairseq-generate", str(data / "bin"), "--user-dir", USER_DIR, "--path",
                         str(save / "checkpoint_best.pt"), "--task", "length_generalization", "--gen-subset", "test",
                         "--beam", "5", "--batch-size", "4", "--print-alignment")  # fmt: skip
    assert sorted(hypotheses(output.splitlines())) == list(range(10))
    assert any(line.startswith("A-") for line in output.splitlines())


def test_a_self_attention_window_hides_older_steps_and_only_those():
    """With --decoder-self-attention-window 2, each of the 3 decoder layers looks one step back, so
    (no location layer, whose scanned position carries history) the output at step i depends on
    the inputs at steps i-3 .. i alone; without the window, on every earlier step."""
    model = build("transformer_small", D, seed=3, decoder_self_attention_window=2).eval()
    sample = batch(D, SOURCES[:2], [list("12345678901"), list("10987654321")])
    tokens = sample["net_input"]["prev_output_tokens"]
    changed = tokens.clone()
    changed[:, 1] = D.index("9")  # the input at step 1 only
    net_input = {k: v for k, v in sample["net_input"].items() if k != "prev_output_tokens"}

    def moved(model):  # per step, how far the outputs moved
        return (
            (model(prev_output_tokens=tokens, **net_input)[0] - model(prev_output_tokens=changed, **net_input)[0])
            .abs()
            .amax(dim=(0, 2))
        )

    windowed = moved(model)
    assert (windowed[1:5] > 1e-4).all() and (windowed[5:] < 1e-6).all()
    assert (moved(build("transformer_small", D, seed=3).eval())[5:] > 1e-4).all()


def test_a_negative_window_is_refused_by_name():
    with pytest.raises(ValueError, match="--decoder-self-attention-window"):
        build("transformer_small", D, seed=1, decoder_self_attention_window=-1)


def test_the_recency_bias_lowers_each_score_by_slope_times_distance():
    """--decoder-recency-bias M: the full pass's self-attention mask is - M (i - j) for j <= i and
    -inf after i (with a window K, also -inf where i - j >= K)."""
    x = torch.zeros(5, 2, 8)
    mask = build("transformer_small", D, seed=1, decoder_recency_bias=0.5).decoder.buffered_future_mask(x)
    i, j = torch.meshgrid(torch.arange(5), torch.arange(5), indexing="ij")
    assert torch.equal(mask[j <= i], -0.5 * (i - j)[j <= i].float()) and torch.isinf(mask[j > i]).all()
    windowed = build("transformer_small", D, seed=1, decoder_recency_bias=0.5, decoder_self_attention_window=2)
    mask = windowed.decoder.buffered_future_mask(x)
    near = (j <= i) & (i - j < 2)
    assert torch.equal(mask[near], -0.5 * (i - j)[near].float()) and torch.isinf(mask[~near]).all()


def test_an_exempt_start_is_as_near_as_the_step_itself_at_every_step():
    """--decoder-recency-exempt-start: the start symbol's column loses nothing (so what a head puts
    on it does not fade with the output's length); every other score keeps - M (i - j)."""
    x = torch.zeros(6, 2, 8)
    model = build("transformer_small", D, seed=1, decoder_recency_bias=0.5, decoder_recency_exempt_start=True)
    mask = model.decoder.buffered_future_mask(x)
    i, j = torch.meshgrid(torch.arange(6), torch.arange(6), indexing="ij")
    assert torch.equal(mask[:, 0], torch.zeros(6))
    later = (j <= i) & (j > 0)
    assert torch.equal(mask[later], -0.5 * (i - j)[later].float()) and torch.isinf(mask[j > i]).all()


def test_an_exempt_start_needs_a_bias_and_no_window():
    with pytest.raises(ValueError, match="--decoder-recency-exempt-start True needs a --decoder-recency-bias"):
        build("transformer_small", D, seed=1, decoder_recency_exempt_start=True)
    with pytest.raises(ValueError, match="--decoder-self-attention-window: the window drops the start"):
        build(
            "transformer_small",
            D,
            seed=1,
            decoder_recency_bias=1.0,
            decoder_recency_exempt_start=True,
            decoder_self_attention_window=4,
        )


def test_a_negative_recency_bias_is_refused_by_name():
    with pytest.raises(ValueError, match="--decoder-recency-bias"):
        build("transformer_small", D, seed=1, decoder_recency_bias=-1.0)


def test_the_direction_gate_is_the_sigmoid_of_the_mean_encoding_whatever_the_padding():
    """model.direction_gate (what validation logs): g = sigmoid(5 f(mean of the encoder's outputs
    over real positions)), the same for a source alone as in a padded batch; None without a gate."""
    model = build("transformer_onestep", D, seed=4).double().eval()
    sample = batch(D, SOURCES, [list("1")] * len(SOURCES))
    tokens, lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
    with torch.no_grad():
        gates = model.direction_gate(tokens, lengths)
        gate_module = model.decoder.layers[-1].encoder_attn.attention.direction_gate
        for row, source in enumerate(SOURCES):
            alone = batch(D, [source], [list("1")])["net_input"]
            encoded = model.encoder(alone["src_tokens"], src_lengths=alone["src_lengths"])["encoder_out"][0]
            by_hand = torch.sigmoid(5.0 * gate_module.proj(encoded[:, 0].mean(dim=0)))
            assert gates[row].item() == pytest.approx(by_hand.item(), abs=1e-12)
    assert build("transformer_onestep", D, seed=4, direction_gate=False).direction_gate(tokens, lengths) is None
    assert build("transformer_small", D, seed=4).direction_gate(tokens, lengths) is None


def test_a_gate_that_reads_no_summary_is_one_learned_number_for_every_sequence():
    """--direction-gate-summary none: g = sigmoid(5 b), b the gate's bias, whatever the source and its
    length; the decoder's outputs move with b (the gate is in the computation)."""
    model = build("transformer_monoattn", D, seed=4, direction_gate_summary="none",
                  no_token_positional_embeddings=True).double().eval()  # fmt: skip
    sample = batch(D, SOURCES, [list("12")] * len(SOURCES))
    tokens, lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
    gate_module = model.decoder.layers[-1].encoder_attn.attention.direction_gate
    with torch.no_grad():
        gate_module.proj.bias.fill_(0.3)
        expected = torch.sigmoid(torch.tensor(5.0 * 0.3, dtype=torch.float64))
        assert torch.allclose(model.direction_gate(tokens, lengths), expected.expand(len(SOURCES)), atol=1e-15)
        forward = model(**sample["net_input"])[0]
        gate_module.proj.bias.fill_(-0.3)
        backward = model(**sample["net_input"])[0]
    assert not torch.allclose(forward, backward)
    assert build("transformer_monoattn", D, seed=4).decoder.layers[-1].encoder_attn.gate_summary == "mean"


def test_the_scorer_reads_the_direction_gate_of_gru_and_transformer_models():
    """Both decoders hand their gate over in the pass's extra, so the scorer runs no second encoder
    pass for it (records of Transformer runs have it as GRU runs do); without a gate, None."""
    from fairseq_monoattn.scoring import direction_of, teacher_forced_extra

    sample = batch(D, SOURCES, SOURCES)
    net_input = sample["net_input"]
    for name in ("gru_onestep", "transformer_onestep"):
        model = build(name, D, seed=3)
        with torch.no_grad():
            expected = model.direction_gate(net_input["src_tokens"], net_input["src_lengths"])
            model.direction_gate = None  # the scorer must not need it
            gate = direction_of(model, sample, teacher_forced_extra(model, sample))
        assert gate.shape == (len(SOURCES),) and torch.allclose(gate, expected), name
    plain = build("transformer_small", D)
    assert direction_of(plain, sample, teacher_forced_extra(plain, sample)) is None


@pytest.mark.parametrize("step", ["onestep", "monoattn"])
def test_a_recency_preset_is_its_base_preset_with_the_length_generalisation_options(step):
    """fairseq's parser leaves --no-token-positional-embeddings False, not None: the preset must still
    turn it on; the model is then the base preset given those options on the command line."""
    from fairseq import options

    def parsed(argv):
        return options.parse_args_and_arch(options.get_training_parser(), ["data", "--user-dir", USER_DIR, *argv])

    preset = parsed(["--arch", f"transformer_{step}_recency"])
    chosen = {k: getattr(preset, k) for k in LENGTH_GENERALISATION}
    expected = dict(no_token_positional_embeddings=True, direction_gate=True, direction_gate_summary="none",
                    direction_temperature=50.0, direction_gate_keep_end=True, decoder_recency_bias=1.0,
                    decoder_recency_exempt_start=True)  # fmt: skip
    assert chosen == expected
    base = parsed(["--arch", f"transformer_{step}", *LENGTH_GENERALISATION_OPTIONS])
    differing = {k for k in vars(preset) if k not in ("arch", "_name") and getattr(preset, k) != getattr(base, k, None)}
    assert differing == set(), differing
    assert parsed(["--arch", f"transformer_{step}"]).no_token_positional_embeddings is False
    models = [build(f"transformer_{step}_recency", D, seed=4)]
    models.append(build(f"transformer_{step}", D, seed=4, **LENGTH_GENERALISATION))
    sample = batch(D, SOURCES, targets=[list(reversed(source)) for source in SOURCES])
    outputs = [model(**sample["net_input"])[0] for model in models]
    assert outputs[0].shape == outputs[1].shape and torch.equal(outputs[0], outputs[1])
    assert models[0].decoder.embed_positions is None and models[0].encoder.embed_positions is None
