"""The options that bring the authors' training dynamics into the plugin: the location
normalisation and its underflow reset, the initialisations, the location projection, one
shared embedding, the source EOS, and random batches drawn anew every epoch."""

import argparse
import random
import time
from types import SimpleNamespace

import pytest
import torch
from fairseq import options, tasks
from fairseq.data import Dictionary
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq_cli_helpers import USER_DIR, copy_examples
from model_helpers import location_attention

from fairseq_monoattn.data.writer import write_dataset
from fairseq_monoattn.modules import CrossAttention, LocationAttention
from fairseq_monoattn.modules.positions import padding_mask
from fairseq_monoattn.testing import batch, build, digit_dictionary

D = digit_dictionary()
location = location_attention


# ------------------------------------------------------------------- location normalisation


def test_sum_normalisation_equals_softmax_while_nothing_underflows():
    lengths = torch.tensor([7, 5])
    memory = LocationAttention.prepare(lengths, 7)
    mask = padding_mask(lengths, 7)
    heads = torch.tensor([[0.3, 0.5], [-0.2, 1.0]])
    previous = torch.tensor([0.2, 0.5])
    soft, mu_soft, _ = location(location_normalization="softmax")(heads, previous, memory, mask, step=2)
    summed, mu_sum, _ = location(location_normalization="sum")(heads, previous, memory, mask, step=2)
    assert torch.allclose(soft, summed, atol=1e-6) and torch.equal(mu_soft, mu_sum)
    assert summed[1, 5:].tolist() == [0.0, 0.0]


def test_sum_normalisation_underflows_far_past_the_end_and_resets_to_start():
    """A ReLU step of 20 positions from the END of a 6-position source lands 20 positions past it
    (sigma = 0.27 / L): every exp(-z^2/2) is 0 in float32, so there is no context, and the next
    reference position is 0, the START position.  The same step from START in a 21-position
    source lands on its END."""
    attention = CrossAttention(
        encoder_dim=6, query_dim=4, location=location(step_activation="relu", location_normalization="sum")
    )
    lengths = torch.tensor([6, 21])
    memory = attention.prepare(torch.randn(2, 21, 6), None, lengths)
    with torch.no_grad():
        attention.readout.weight.zero_()
        attention.readout.bias.copy_(torch.tensor([20.0, 0.0]))  # rho = 20: ReLU step of 20 positions
    hidden = torch.zeros(2, 4, requires_grad=True)
    context, weights, state = attention(hidden, memory, {"position": torch.tensor([1.0, 0.0])}, step=3)
    position = state["position"]
    assert weights[0].abs().sum().item() == 0.0 and context[0].abs().sum().item() == 0.0
    assert position[0].item() == 0.0  # back to START
    assert weights[1].sum().item() == pytest.approx(1.0) and weights[1].argmax().item() == 20
    (context.sum() + position.sum()).backward()
    assert torch.isfinite(hidden.grad).all()
    # the softmax normalisation never underflows: the focus sits on the last real position
    soft = CrossAttention(encoder_dim=6, query_dim=4, location=location(step_activation="relu"))
    soft.load_state_dict(attention.state_dict())
    memory = soft.prepare(torch.randn(2, 21, 6), None, lengths)
    _, weights, state = soft(hidden, memory, {"position": torch.tensor([1.0, 0.0])}, 3)
    position = state["position"]
    assert weights[0, 5].item() == pytest.approx(1.0) and position[0].item() == pytest.approx(1.0)


# ------------------------------------------------------------------------- initialisation


def big_dictionary(size=1000):
    dictionary = Dictionary()
    for i in range(size):
        dictionary.add_symbol(f"w{i}")
    return dictionary


@pytest.mark.parametrize("init, expected_std", [("scaled-normal", 64**-0.5), ("kaiming-fan-out", (2 / 1004) ** 0.5)])
def test_embedding_initialisation_statistics(init, expected_std):
    model = build("gru_onestep", big_dictionary(), embedding_init=init)
    weight = model.encoder.embed_tokens.weight.detach()
    real = torch.cat([weight[: D.pad()], weight[D.pad() + 1 :]])
    assert real.std().item() == pytest.approx(expected_std, rel=0.03)
    assert abs(real.mean().item()) < 0.1 * expected_std
    assert weight[D.pad()].abs().sum().item() == 0.0


def test_boundary_vectors_start_at_zero_or_random():
    zeros = build("gru_monoattn", D, boundary_init="zeros").encoder
    assert zeros.start.abs().sum().item() == 0.0 and zeros.end.abs().sum().item() == 0.0
    normal = build("gru_monoattn", D, boundary_init="normal").encoder
    assert normal.start.abs().sum().item() > 0.0


def xavier_bound(fan_in, fan_out):
    return (6 / (fan_in + fan_out)) ** 0.5


def test_xavier_init_shapes_bounds_and_missing_biases():
    model = build("gru_mix_monoattn", D, linear_init="xavier", location_projection=True)
    attention = model.decoder.attention
    assert attention.values[2].bias is None and attention.keys.bias is None
    assert attention.location_heads.bias is None
    for layer, (fan_in, fan_out) in [
        (attention.values[0], (128, 128)),
        (attention.values[2], (128, 128)),
        (attention.keys, (128, 128)),
    ]:
        bound = xavier_bound(fan_in, fan_out)
        assert layer.weight.abs().max().item() <= bound
        assert layer.weight.std().item() == pytest.approx(bound / 3**0.5, rel=0.05)
    query, features, mix = attention.readout_parts(attention.readout.weight)
    query_bias, _, _ = attention.readout_parts(attention.readout.bias)
    assert query.abs().max().item() <= xavier_bound(128, 128) and query_bias.abs().sum().item() == 0.0
    assert features.shape == (128, 128) and features.abs().max().item() <= xavier_bound(128, 128)
    assert mix.abs().max().item() <= xavier_bound(128, 1)
    # each head vector is Xavier of a (1 x d) vector: bound sqrt(6 / (d + 1)), about 2.45x torch's 1/sqrt(d)
    heads = attention.location_heads.weight
    assert heads.shape == (2, 128) and heads.abs().max().item() <= xavier_bound(128, 1)
    assert heads.abs().max().item() > 1 / 128**0.5
    assert model.decoder.out_proj.weight.abs().max().item() <= xavier_bound(128, 64)
    default = build("gru_mix_monoattn", D, linear_init="pytorch").decoder.attention
    assert default.values[2].bias is not None and default.keys.bias is not None


def test_scorer_init_xavier_draws_the_relative_projection_and_nothing_else():
    """--scorer-init xavier redraws the scorer's weight matrices (the relative scorer's W_r, d x d)
    Xavier-uniform, bound sqrt(6 / 2d), after the rest of the attention's draws: the encoder and
    the attention's other weights are the default's, weight for weight; u and v stay zero; a model
    whose scorer has no weights is unchanged."""
    default = build("gru_relative", D)
    xavier = build("gru_relative", D, scorer_init="xavier")
    w_r, w_default = (
        xavier.decoder.attention.scorer.position_proj.weight,
        default.decoder.attention.scorer.position_proj.weight,
    )
    bound = xavier_bound(128, 128)
    assert w_r.abs().max().item() <= bound and w_r.std().item() == pytest.approx(bound / 3**0.5, rel=0.05)
    # torch's default draws U(-1/sqrt(d), 1/sqrt(d)): 1.73x narrower at d = 128
    assert w_default.abs().max().item() <= 1 / 128**0.5 < bound
    assert w_default.std().item() == pytest.approx(1 / 128**0.5 / 3**0.5, rel=0.05)
    ours, theirs = xavier.state_dict(), default.state_dict()
    drawn_before = [key for key in theirs if key.startswith(("encoder.", "decoder.attention."))]
    changed = [key for key in drawn_before if not torch.equal(ours[key], theirs[key])]
    assert changed == ["decoder.attention.scorer.position_proj.weight"]
    scorer = xavier.decoder.attention.scorer
    assert scorer.content_bias.abs().sum().item() == 0 and scorer.position_bias.abs().sum().item() == 0
    for arch in ("gru_content", "gru_birope", "gru_onestep"):
        plain, redrawn = build(arch, D).state_dict(), build(arch, D, scorer_init="xavier").state_dict()
        assert all(torch.equal(value, redrawn[key]) for key, value in plain.items())
    with pytest.raises(ValueError, match="--scorer-init"):
        build("gru_relative", D, scorer_init="normal")


@pytest.mark.parametrize("projection", [True, False])
def test_joint_head_init_draws_locattns_step_gate_and_bias_as_one_tensor(projection):
    """--location-head-init joint: LocAttn's step, bias and gate vectors share one Xavier fan
    (in d*k, out k, so bound sqrt(6 / (3 (d + 1))), 1/sqrt(3) of each vector's own); the width
    vector keeps its own fan; with the step as the only such vector (OneStep) both inits agree."""

    def heads(arch, init):
        torch.manual_seed(0)
        attention = build(
            arch, D, linear_init="xavier", location_projection=projection, location_head_init=init
        ).decoder.attention
        rows = attention.location_heads.weight if projection else attention.readout_parts(attention.readout.weight)[1]
        return attention.location.head_names, rows.detach()

    names, joint = heads("gru_locattn", "joint")
    _, per_head = heads("gru_locattn", "per-head")
    assert names == ("step", "width", "bias", "gate")
    d = joint.size(1)
    for i, name in enumerate(names):
        if name == "width":
            assert torch.equal(joint[i], per_head[i])
        else:  # the same draws, scaled to the joint bound
            assert joint[i].abs().max().item() <= xavier_bound(3 * d, 3)
            assert torch.allclose(joint[i], per_head[i] * (xavier_bound(3 * d, 3) / xavier_bound(d, 1)), atol=1e-6)
    assert torch.equal(heads("gru_onestep", "joint")[1], heads("gru_onestep", "per-head")[1])
    with pytest.raises(ValueError, match="--location-head-init"):
        build("gru_locattn", D, linear_init="xavier", location_head_init="rows")


def test_location_projection_reads_heads_off_an_intermediate_layer():
    """heads = W_heads (W_l h + b_l): the paper's l_t = f_l(h) then the heads."""
    model = build("gru_onestep", D, location_projection=True)
    attention = model.decoder.attention
    assert attention.readout_sizes == [0, 128, 0]
    hidden = torch.randn(3, 128)
    _, features, _ = attention.readout(hidden).split(attention.readout_sizes, dim=-1)
    w_l, b_l = attention.readout.weight, attention.readout.bias
    expected = (hidden @ w_l.t() + b_l) @ attention.location_heads.weight.t()
    assert torch.allclose(attention.location_heads(features), expected, atol=1e-5)
    direct = build("gru_onestep", D, location_projection=False).decoder.attention
    assert direct.location_heads is None and direct.readout_sizes == [0, 2, 0]


# ---------------------------------------------------------------- embeddings and source EOS


def test_share_all_embeddings_uses_one_matrix_and_needs_one_dictionary():
    model = build("gru_monoattn", D, share_all_embeddings=True)
    assert model.encoder.embed_tokens is model.decoder.embed_tokens
    assert model.decoder.share_input_output_embed
    other = digit_dictionary()
    other.add_symbol(":")

    class TwoDictionaries:
        source_dictionary, target_dictionary = D, other

    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    args = argparse.Namespace(arch="gru_monoattn", share_all_embeddings=True)
    ARCH_CONFIG_REGISTRY["gru_monoattn"](args)
    with pytest.raises(ValueError, match="one dictionary for source and target"):
        ARCH_MODEL_REGISTRY["gru_monoattn"].build_model(args, TwoDictionaries())


def test_without_source_eos_the_encoder_sees_only_the_tokens():
    model = build("gru_monoattn", D, source_eos=False, seed=4)
    with_eos = batch(D, [list("3141"), list("27")])["net_input"]
    out = model.encoder(**with_eos)
    assert out["lengths"].tolist() == [6, 4]  # START, 4 tokens, END / START, 2 tokens, END
    no_eos = torch.tensor([[D.index(c) for c in "3141"]])
    alone = model.encoder(no_eos, torch.tensor([4]))
    assert torch.allclose(alone["encodings"][0], out["encodings"][0, :6], atol=1e-6)
    kept = build("gru_monoattn", D, source_eos=True, seed=4).encoder(**with_eos)
    assert kept["lengths"].tolist() == [7, 5]
    # --print-alignment: the dropped </s> column gets no attention
    model.make_generation_fast_(need_attn=True)
    sample = batch(D, [list("3141"), list("27")], [list("3141"), list("27")])
    _, extra = model(**sample["net_input"])
    eos_columns = sample["net_input"]["src_tokens"].eq(D.eos())
    assert extra["attn"][0].masked_select(eos_columns.unsqueeze(1)).abs().sum().item() == 0.0


# ------------------------------------------------------------------------------ batches


@pytest.fixture(scope="module")
def mixed_copy(tmp_path_factory):
    """300 training pairs of 2-12 digits."""
    rng = random.Random(0)
    out = tmp_path_factory.mktemp("mixed") / "data"
    write_dataset({"train": copy_examples(rng, 300, 2, 12), "valid": copy_examples(rng, 10, 2, 5)}, out, "copy", 0)
    return out / "bin"


def training_task(data, extra):
    """The length_generalization task of a training command (batches of 32), its train split loaded."""
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [
            str(data),
            "--arch",
            "gru_onestep",
            "--task",
            "length_generalization",
            "--batch-size",
            "32",
            "--required-batch-size-multiple",
            "1",
            "--user-dir",
            USER_DIR,
            *extra,
        ],
    )
    task = tasks.setup_task(convert_namespace_to_omegaconf(args).task)
    task.load_dataset("train")
    return task


def train_batches(data, extra, epoch):
    task = training_task(data, extra)
    iterator = task.get_batch_iterator(task.dataset("train"), max_sentences=32, seed=1, epoch=1)
    batches = [sample["id"].tolist() for sample in iterator.next_epoch_itr(shuffle=True)]
    for _ in range(epoch - 1):
        batches = [sample["id"].tolist() for sample in iterator.next_epoch_itr(shuffle=True)]
    return batches, task.dataset("train").src_sizes


def test_random_batches_are_new_mixed_draws_every_epoch(mixed_copy):
    first, sizes = train_batches(mixed_copy, ["--train-batches", "random"], epoch=1)
    second, _ = train_batches(mixed_copy, ["--train-batches", "random"], epoch=2)
    again, _ = train_batches(mixed_copy, ["--train-batches", "random"], epoch=2)
    for batches in (first, second):
        assert sorted(i for b in batches for i in b) == list(range(300))  # every example once
        assert sorted(len(b) for b in batches)[1:] == [32] * 9  # 9 full batches and 300 - 288 = 12
    assert second == again  # a seed and an epoch fix the batches
    assert {frozenset(b) for b in first}.isdisjoint({frozenset(b) for b in second})
    spread = [max(sizes[b]) - min(sizes[b]) for b in first]
    assert min(spread) >= 5  # lengths 2..12 mixed in every batch


def test_random_batches_leave_no_data_loading_process_behind(mixed_copy):
    """fairseq-train asks the task for a new training iterator every epoch; each epoch's loader
    process must end with its epoch, not live (idle, polling) to the end of the run."""
    import multiprocessing

    task = training_task(mixed_copy, ["--train-batches", "random"])
    before = set(multiprocessing.active_children())
    iterators = []  # kept, as a run keeps what fairseq-train holds on to
    for epoch in (1, 2, 3):
        iterators.append(
            task.get_batch_iterator(
                task.dataset("train"), max_sentences=32, seed=1, epoch=epoch, num_workers=1, data_buffer_size=10
            )
        )
        assert sum(len(sample["id"]) for sample in iterators[-1].next_epoch_itr(shuffle=True)) == 300
        deadline = time.time() + 10
        while set(multiprocessing.active_children()) - before and time.time() < deadline:
            time.sleep(0.05)
        assert set(multiprocessing.active_children()) - before == set(), f"after epoch {epoch}"


def test_random_batches_are_the_tasks_default(mixed_copy):
    default, _ = train_batches(mixed_copy, [], epoch=1)
    assert default == train_batches(mixed_copy, ["--train-batches", "random"], epoch=1)[0]


def test_fairseq_batches_keep_their_contents_across_epochs(mixed_copy):
    first, sizes = train_batches(mixed_copy, ["--train-batches", "sorted"], epoch=1)
    second, _ = train_batches(mixed_copy, ["--train-batches", "sorted"], epoch=2)
    assert {frozenset(b) for b in first} == {frozenset(b) for b in second}
    assert max(max(sizes[b]) - min(sizes[b]) for b in first) <= 2  # about 27 examples a length: 2 or 3 lengths a batch


def test_random_batches_refuse_max_tokens(mixed_copy):
    with pytest.raises(ValueError, match="--train-batches random"):
        args = options.parse_args_and_arch(
            options.get_training_parser(),
            [
                str(mixed_copy),
                "--arch",
                "gru_onestep",
                "--task",
                "length_generalization",
                "--max-tokens",
                "500",
                "--train-batches",
                "random",
                "--user-dir",
                USER_DIR,
            ],
        )
        task = tasks.setup_task(convert_namespace_to_omegaconf(args).task)
        task.load_dataset("train")
        task.get_batch_iterator(task.dataset("train"), max_tokens=500, seed=1)


# ------------------------------------------------------------------- the presets' choices


def test_every_preset_trains_as_the_release_except_sharing_and_the_sum_normalisation():
    """The presets' defaults are the settings RESULTS.md found to reproduce the paper: the
    release's initialisations, no source EOS, the location projection and the mix weight without
    beta (sigmoid(f(h))), LocAttn's head vectors drawn as one tensor; the softmax focus and
    separate embeddings (the two release settings that slowed learning); the base model keeps
    fairseq's habits."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    from fairseq_monoattn.models.gru_seq2seq import config_defaults, fill_missing
    from fairseq_monoattn.models.presets import PRESETS

    def resolved(arch):  # what the model is built with: the arch's options over the defaults
        args = argparse.Namespace(arch=arch)
        ARCH_CONFIG_REGISTRY[arch](args)
        fill_missing(args, config_defaults())
        return args

    release = dict(
        embedding_init="kaiming-fan-out",
        boundary_init="zeros",
        linear_init="xavier",
        source_eos=False,
        location_projection=True,
        location_normalization="softmax",
        share_all_embeddings=False,
        mix_temperature=1.0,
        location_head_init="joint",
    )
    for arch in PRESETS:
        args = resolved(arch)
        assert {k: getattr(args, k) for k in release} == release, arch
    base = resolved("gru_seq2seq")
    assert (
        base.embedding_init,
        base.boundary_init,
        base.linear_init,
        base.source_eos,
        base.location_projection,
        base.mix_temperature,
        base.location_head_init,
    ) == ("scaled-normal", "normal", "pytorch", True, False, 5.0, "per-head")


def test_the_step2_ablation_is_locattns_reference_with_its_clamp_and_joint_heads():
    """-Step 2 is OneStep with LocAttn's reference g*pa + b; as in the release's ablation, the
    centre is leaky-clamped to [0, 1] and the step, bias and gate vectors share one Xavier fan;
    the other ablations keep OneStep's unclamped reference pa."""
    ablation = build("gru_onestep_minus_step2", D).decoder.attention
    assert ablation.location.head_names == ("step", "width", "bias", "gate")
    d = ablation.location_heads.weight.size(1)
    shared = ablation.location_heads.weight[[0, 2, 3]]
    assert shared.abs().max().item() <= xavier_bound(3 * d, 3)
    # every head saturated upwards: ref = sigmoid(g) * 0.9 + sigmoid(b) ~ 1.9, plus a step
    logits, previous = torch.full((2, 4), 30.0), torch.tensor([0.9, 0.9])
    memory = ablation.location.prepare(torch.tensor([5, 5]), 5)
    _, mu, _ = ablation.location(logits, previous, memory, torch.zeros(2, 5, dtype=torch.bool), step=2)
    unclamped = 0.9 + 1.0 + 1.0 / 4
    assert torch.allclose(mu, torch.full((2,), 1.0 + 0.01 * unclamped))
    for arch in ("gru_onestep", "gru_onestep_minus_step3", "gru_onestep_minus_sigmoid"):
        location = build(arch, D).decoder.attention.location
        assert location.head_names == ("step", "width") and location.clamp_slope is None, arch


def test_options_a_model_does_not_read_change_nothing_in_it():
    """unused_options (which the resume check skips): for every preset, another value of each
    option it lists builds the same parameters and the same outputs; and two options it does
    read (the step and mix temperatures) change the outputs, so the comparison can tell."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    from fairseq_monoattn.models.gru_seq2seq import config_defaults, fill_missing
    from fairseq_monoattn.models.options import CONVENTION_OPTIONS, option_fields, unused_options, valid_choices
    from fairseq_monoattn.models.presets import PRESETS

    sample = batch(D, [list("3141"), list("59265")], [list("3141"), list("59265")])

    def outputs(arch, **overrides):
        model = build(arch, D, **overrides)
        with torch.no_grad():
            return model.state_dict(), model(**sample["net_input"])[0]

    def other_value(name, value):
        kind = option_fields()[name].type
        if kind is bool:
            return not value
        if valid_choices(name):
            return next(choice for choice in valid_choices(name) if choice != value)
        return value * 2 + 0.5

    checked = 0
    for arch in PRESETS:
        args = argparse.Namespace(arch=arch)
        ARCH_CONFIG_REGISTRY[arch](args)
        fill_missing(args, config_defaults())
        resolved = vars(args)
        params, logits = outputs(arch)
        group = {key: resolved[key] for key in CONVENTION_OPTIONS}  # the values --conventions resolved to
        for name in sorted(unused_options(resolved)):
            other_params, other_logits = outputs(arch, **{**group, name: other_value(name, resolved[name])})
            assert other_params.keys() == params.keys(), (arch, name)
            assert all(torch.equal(other_params[k], params[k]) for k in params), (arch, name)
            assert torch.equal(other_logits, logits), (arch, name)
            checked += 1
    assert checked > 100
    for arch, name in (("gru_onestep", "step_temperature"), ("gru_mix_onestep", "mix_temperature")):
        assert name not in unused_options(PRESETS[arch])
        assert not torch.equal(outputs(arch)[1], outputs(arch, **{name: 0.5})[1]), (arch, name)


def test_training_the_way_known_to_break_the_presets_warns_once_naming_the_options(mixed_copy, caplog):
    import logging

    from fairseq_monoattn.training_notes import WARNED

    def warnings(*argv, passes=2, training=True):
        """The warnings of building a model for the task of a training command ARGV and taking
        ``passes`` forward passes (in training mode, or eval mode as a generator would)."""
        WARNED.clear()
        caplog.clear()
        args = options.parse_args_and_arch(
            options.get_training_parser(), [str(mixed_copy), *argv, "--batch-size", "8", "--user-dir", USER_DIR]
        )
        cfg = convert_namespace_to_omegaconf(args)
        with caplog.at_level(logging.WARNING):
            task = tasks.setup_task(cfg.task)
            model = task.build_model(cfg.model).train(training)
            sample = batch(task.source_dictionary, [["1", "2", "3"]], [["1", "2", "3"]])
            for _ in range(passes):
                model(**sample["net_input"])
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    told = warnings("--arch", "gru_monoattn", "--task", "length_generalization", "--train-batches", "sorted")
    assert sum("add --train-batches random" in w for w in told) == 1
    assert sum("add --eval-accuracy --best-checkpoint-metric accuracy" in w for w in told) == 1
    paper = ["--task", "length_generalization", "--eval-accuracy", "--best-checkpoint-metric", "accuracy",
             "--maximize-best-checkpoint-metric"]  # fmt: skip
    assert warnings("--arch", "gru_monoattn", *paper) == []  # the paper's way (random batches): silent
    assert warnings("--arch", "transformer_monoattn", *paper) == []
    # fairseq's own task sorts its batches and cannot be told otherwise: the location presets say so,
    # once, when they train
    for arch in ("gru_monoattn", "transformer_monoattn"):
        (note,) = warnings("--arch", arch, "--task", "translation")
        assert note.startswith(f"{arch}: the translation task makes batches of examples of similar length")
        assert "train with --task length_generalization" in note
        assert warnings("--arch", arch, "--task", "translation", training=False) == []  # generating: silent
        assert warnings("--arch", arch, "--task", "translation", passes=0) == []  # built, not trained yet
    assert warnings("--arch", "gru_content", "--task", "translation") == []  # not a location preset


def test_a_preset_on_prepared_dedupe_data_without_the_source_end_marker_warns(tmp_path, caplog):
    """Data prepared as DeDupe (its manifest says so) calls for --source-eos True: a preset trained
    on it without that option is told so once, with it (or on another task's data) it is silent,
    and fairseq's Transformer, which has no such option, is never told."""
    import logging

    from fairseq_monoattn.training_notes import WARNED

    rng = random.Random(0)
    for task in ("dedupe", "copy"):
        write_dataset(
            {"train": copy_examples(rng, 20, 2, 5), "valid": copy_examples(rng, 4, 2, 5)}, tmp_path / task, task, 0
        )

    def warnings(task, *extra):
        WARNED.clear()
        caplog.clear()
        args = options.parse_args_and_arch(
            options.get_training_parser(),
            [str(tmp_path / task / "bin"), "--task", "length_generalization", "--eval-accuracy",
             "--best-checkpoint-metric", "accuracy", "--maximize-best-checkpoint-metric", "--user-dir", USER_DIR,
             *extra],
        )  # fmt: skip
        cfg = convert_namespace_to_omegaconf(args)
        with caplog.at_level(logging.WARNING):
            tasks.setup_task(cfg.task).build_model(cfg.model)
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    (told,) = warnings("dedupe", "--arch", "gru_onestep")
    assert "dedupe" in told and told.endswith("add --source-eos True")
    assert warnings("dedupe", "--arch", "gru_onestep", "--source-eos", "True") == []
    assert warnings("copy", "--arch", "gru_onestep") == []
    assert warnings("dedupe", "--arch", "transformer_onestep") == []


# ------------------------------------------------------------------- the conventions, one switch


def parsed(arch, *argv):
    """The model options fairseq's own parser gives ``fairseq-train --arch ARCH ARGV``, beside what the
    plugin's records expect of the same command without fairseq (they must agree)."""
    from monoattn_lab.spec import parsed_model_config, planned_model_config

    command = ["fairseq-train", "data", "--arch", arch, "--user-dir", USER_DIR, *argv]
    model = parsed_model_config(command)
    planned = planned_model_config(command)
    assert {k: v for k, v in model.items() if k != "task"} == {k: v for k, v in planned.items() if k != "task"}
    return model


def test_one_switch_sets_the_conventions_group_and_each_option_given_overrides_it():
    from fairseq_monoattn.models.options import CONVENTION_OPTIONS, CONVENTIONS

    def group(model):
        return {name: model[name] for name in CONVENTION_OPTIONS}

    assert group(parsed("gru_seq2seq")) == CONVENTIONS["plugin"] and parsed("gru_seq2seq")["conventions"] == "plugin"
    assert group(parsed("gru_onestep")) == CONVENTIONS["presets"] and parsed("gru_onestep")["conventions"] == "presets"
    assert CONVENTIONS["plugin"] != CONVENTIONS["presets"] != CONVENTIONS["release"]
    # the plugin's presets leave the group to the switch, so that --conventions sets all of it over them
    from fairseq_monoattn.models.presets import PRESETS

    assert all(
        values["conventions"] == "presets" and not set(values) & set(CONVENTION_OPTIONS) for values in PRESETS.values()
    )
    for arch in ("gru_seq2seq", "gru_content", "gru_onestep"):
        for name, values in CONVENTIONS.items():
            assert group(parsed(arch, "--conventions", name)) == values, (arch, name)
        given = parsed(arch, "--conventions", "release", "--decoder-start", "eos", "--linear-init", "pytorch")
        assert group(given) == dict(CONVENTIONS["release"], decoder_start="eos", linear_init="pytorch"), arch
    # the switch builds the model the options of its group give one by one, and another model than the preset's
    sample = batch(D, [list("3141"), list("59265")], [list("3141"), list("59265")])
    with torch.no_grad():
        switched = build("gru_mix_onestep", D, conventions="release")
        one_by_one = build("gru_mix_onestep", D, **CONVENTIONS["release"])
        preset = build("gru_mix_onestep", D)
        assert switched.state_dict().keys() == one_by_one.state_dict().keys() != preset.state_dict().keys()
        assert all(torch.equal(v, one_by_one.state_dict()[k]) for k, v in switched.state_dict().items())
        assert torch.equal(switched(**sample["net_input"])[0], one_by_one(**sample["net_input"])[0])
    assert switched.decoder.start_index == D.bos() and preset.decoder.start_index is None


def test_hydra_configs_take_the_switch_too():
    """model._name=gru_seq2seq model.conventions=release (and a preset's config switched back to
    plugin): the group's options follow, unless given."""
    from types import SimpleNamespace

    from fairseq.models import MODEL_DATACLASS_REGISTRY
    from omegaconf import OmegaConf

    from fairseq_monoattn.models.gru_seq2seq import GRUSeq2SeqModel
    from fairseq_monoattn.models.options import CONVENTION_OPTIONS, CONVENTIONS

    task = SimpleNamespace(source_dictionary=D, target_dictionary=D)
    for config, overrides, expected in (
        ("gru_seq2seq", {}, CONVENTIONS["plugin"]),
        ("gru_seq2seq", {"conventions": "release"}, CONVENTIONS["release"]),
        ("gru_onestep", {}, CONVENTIONS["presets"]),
        ("gru_onestep", {"conventions": "plugin"}, CONVENTIONS["plugin"]),
        (
            "gru_onestep",
            {"conventions": "release", "value_path": "folded"},
            dict(CONVENTIONS["release"], value_path="folded"),
        ),
    ):
        cfg = OmegaConf.structured(MODEL_DATACLASS_REGISTRY[config]())
        for key, value in overrides.items():
            setattr(cfg, key, value)
        GRUSeq2SeqModel.build_model(cfg, task)
        assert {name: cfg[name] for name in CONVENTION_OPTIONS} == expected, (config, overrides)


@pytest.mark.parametrize(
    "command",
    [["--arch", "gru_mix_locattn"], ["--arch", "gru_seq2seq", "--linear-init", "xavier", "--source-eos", "False"]],
    ids=["preset", "options-one-by-one"],
)
def test_a_checkpoint_from_before_the_switch_loads_the_same_model(tmp_path, command):
    """A checkpoint whose configuration has no ``conventions`` (every checkpoint before it) builds the
    model it recorded: every option of the group as the checkpoint holds it (fairseq fills the missing
    ``conventions`` from the architecture's config: the preset's, or plugin's for gru_seq2seq), the same
    weights and outputs."""
    from fairseq_cli_helpers import train, write_copy_dataset

    from fairseq_monoattn.scoring import load_checkpoint

    data = write_copy_dataset(tmp_path / "copy", {"train": (32, 3, 6), "valid": (8, 3, 6), "test": (8, 3, 6)}) / "bin"
    train([str(data), *command, "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "16", "--max-update", "2",
           "--no-progress-bar", "--num-workers", "0", "--disable-validation", "--no-epoch-checkpoints",
           "--no-save-optimizer-state", "--save-dir", str(tmp_path / "save")])  # fmt: skip
    new = tmp_path / "save" / "checkpoint_last.pt"
    state = torch.load(new, map_location="cpu", weights_only=False)
    assert state["cfg"]["model"]["linear_init"] == "xavier" and state["cfg"]["model"]["source_eos"] is False
    del state["cfg"]["model"]["conventions"]
    old = tmp_path / "old.pt"
    torch.save(state, old)
    (new_model,), task, _ = load_checkpoint(new, data)
    (old_model,), _, _ = load_checkpoint(old, data)
    assert old_model.encoder.keep_source_eos is False  # the checkpoint's value, not the group's
    assert new_model.state_dict().keys() == old_model.state_dict().keys()
    assert all(torch.equal(v, old_model.state_dict()[k]) for k, v in new_model.state_dict().items())
    sample = batch(task.target_dictionary, [list("3141"), list("592")], [list("3141"), list("592")])
    with torch.no_grad():
        assert torch.equal(new_model(**sample["net_input"])[0], old_model(**sample["net_input"])[0])


# ------------------------------------------------------------------- what each builder reads


class RecordingOptions(argparse.Namespace):
    """A model config that records the name of every attribute read."""

    def __getattribute__(self, name):
        if not name.startswith("_"):
            object.__getattribute__(self, "__dict__").setdefault("_read", set()).add(name)
        return super().__getattribute__(name)


class RecordingSettings:
    """An entry's settings that record the name of every field read."""

    def __init__(self, settings, read: set):
        object.__setattr__(self, "_settings", settings)
        object.__setattr__(self, "_read", read)

    def __getattr__(self, name):
        self._read.add(name)
        return getattr(self._settings, name)


def configurations():
    """(arch, overrides): every preset, and every registered entry of every registry chosen in a
    model that reads it, with the options that switch parts on and off."""
    from fairseq_monoattn.models.presets import PRESETS
    from fairseq_monoattn.registry import REGISTRIES

    yield from ((arch, {}) for arch in PRESETS)
    yield "gru_seq2seq", {}
    for name in REGISTRIES["attention_scoring"].entries:
        yield "gru_content", {"attention_scoring": name}
        yield "gru_mix_onestep", {"attention_scoring": name}
    for option in ("step_activation", "reference", "location_normalization"):
        for name in REGISTRIES[option].names():
            yield "gru_onestep", {option: name}
            yield "gru_onestep", {option: name, "linear_init": "pytorch", "clamp_center": True, "dwell_count": True}
    yield "gru_onestep", {"direction_gate": False, "location_projection": False}


def test_every_builder_reads_exactly_the_options_it_declares(monkeypatch):
    """Built with a config that records what is read, every model reads the options
    options.options_read declares for it (the base builders' declarations and the chosen entries'
    settings), no more and no fewer, and each chosen entry reads every field of its settings: the
    plugin's entries and the example package's (examples/extension), as a user's register them."""
    from pathlib import Path

    from fairseq import utils
    from fairseq.models import ARCH_CONFIG_REGISTRY

    utils.import_user_module(
        argparse.Namespace(user_dir=str(Path(__file__).parents[1] / "examples/extension/attention_extras"))
    )
    from fairseq_monoattn.registry import REGISTRIES as registered

    assert "tanh" in registered["step_activation"].entries and "additive" in registered["attention_scoring"].entries

    from fairseq_monoattn.models import gru_seq2seq
    from fairseq_monoattn.models.options import option_fields, options_read, resolved_options
    from fairseq_monoattn.registry import REGISTRIES, Registry

    sample = batch(D, [list("3141"), list("59265")], [list("3141"), list("59265")])
    settings_read = {}
    settings_for = Registry.settings_for

    def recording_settings_for(registry, name, options):
        settings = settings_for(registry, name, options)
        return (
            None
            if settings is None
            else RecordingSettings(settings, settings_read.setdefault((registry.option, name), set()))
        )

    resolved = []
    for arch, overrides in configurations():
        args = argparse.Namespace(arch=arch, **overrides)
        ARCH_CONFIG_REGISTRY[arch](args)
        resolved.append((arch, overrides, resolved_options(vars(args))))
    assert len({str(values) for _, _, values in resolved}) > 40  # distinct models (resolved before the patch)
    monkeypatch.setattr(Registry, "settings_for", recording_settings_for)
    monkeypatch.setattr(gru_seq2seq, "fill_missing", lambda cfg, values: None)  # the config is complete already
    checked = 0
    for arch, overrides, values in resolved:
        cfg = RecordingOptions(**values)
        settings_read.clear()
        model = gru_seq2seq.GRUSeq2SeqModel.build_model(cfg, SimpleNamespace(source_dictionary=D, target_dictionary=D))
        with torch.no_grad():
            model.eval()(**sample["net_input"])
        read = vars(cfg)["_read"] & set(option_fields())
        assert read == options_read(values), (arch, overrides, read ^ options_read(values))
        for (option, name), fields in settings_read.items():
            if option not in read:  # a registry's choice the model has no part for (checked, never built)
                continue
            assert fields == set(REGISTRIES[option].entries[name].option_names), (option, name)
        checked += 1
    assert checked > 40
