"""Decoding through fairseq's SequenceGenerator: incremental state, beam reordering, padding."""

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator
from model_helpers import ALL_ARCHS, LOCATION_ARCHS, greedy_decoder_lengths, random_digits

from fairseq_monoattn.models.transformer_monoattn import TRANSFORMER_PRESETS
from fairseq_monoattn.testing import (
    assert_incremental_equals_full,
    assert_padding_invariant,
    batch,
    build,
    digit_dictionary,
)

D = digit_dictionary()
# the last one long enough for decoding to stream the attention's products (STREAMED_ROWS), the
# others not: the streamed and the plain products must give the same hypotheses and scores
SOURCES = [
    list("31415"),
    list("2718281828459045"),
    list("7"),
    list("123456789012345678901234567890"),
    list("9876543210" * 7),
]


@pytest.mark.parametrize("beam", [1, 5])
@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_incremental_decoding_scores_equal_full_pass(arch, beam):
    assert_incremental_equals_full(build(arch, D, seed=1), D, SOURCES, beam)


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_padding_invariance(arch):
    """Alone or in a batch with longer and shorter examples: same hypotheses, same scores.  In
    float64: a location focus that steps across a position boundary amplifies rounding (MonoAttn on
    the 30-digit source: 2e-16 to 2e-14 in float64 over steps 23-28, 2.5e-7 to 1.3e-5 in float32),
    which a float32 tolerance would mistake for a dependence on the batch."""
    assert_padding_invariant(build(arch, D, seed=2).double(), D, SOURCES, atol=1e-10)


def with_dwell_count(arch, seed, **options):
    """``arch`` with --dwell-count and a dwell weight away from its initial 0 (at 0 the count is read
    but changes nothing)."""
    model = build(arch, D, seed=seed, dwell_count=True, **options)
    with torch.no_grad():
        model.decoder.attention.location.dwell_weight.fill_(-0.6)
    return model


# (MonoAttn with its gate open, sigmoid(0): at its initial sigmoid(20) = 1 the step is ReLU(rho), 0 for
# every rho < 0 whatever the count)
@pytest.mark.parametrize(
    "arch, options", [("gru_onestep", {}), ("gru_mix_monoattn_pr", {"mono_gate_init": 0.0}), ("gru_locattn", {})]
)
def test_a_dwell_count_decodes_incrementally_as_its_full_pass_and_ignores_padding(arch, options):
    model = with_dwell_count(arch, 1, **options)
    for beam in (1, 5):
        assert_incremental_equals_full(model, D, SOURCES, beam)
    assert_padding_invariant(with_dwell_count(arch, 2, **options).double(), D, SOURCES, atol=1e-10)
    # the count changes the function once its weight is not 0
    sample = batch(D, SOURCES, SOURCES)
    plain = build(arch, D, seed=1, dwell_count=True, **options)
    assert not torch.allclose(model(**sample["net_input"])[0], plain(**sample["net_input"])[0])


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_attention_is_a_distribution_over_real_positions(arch):
    """Rows sum to 1 over [START, tokens, (</s>,) END] (with the softmax normalisation: the
    release's "sum" normalisation may underflow to all zeros, see test_fidelity_options.py)."""
    model = build(arch, D, seed=3, location_normalization="softmax")
    model.make_generation_fast_(need_attn=True)  # as fairseq-generate --print-alignment does
    sample = batch(D, SOURCES, SOURCES)
    _, extra = model(**sample["net_input"])
    weights = extra["attention"]  # (B, T, positions)
    keeps_eos = model.encoder.keep_source_eos
    lengths = torch.tensor([len(s) + 2 + keeps_eos for s in SOURCES])  # START + tokens (+ EOS) + END
    real = torch.arange(weights.size(-1)).unsqueeze(0) < lengths.unsqueeze(1)
    assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:2]), atol=1e-5)
    assert (weights >= 0).all()
    assert (weights.masked_select(~real.unsqueeze(1).expand_as(weights)) == 0).all()
    # the fairseq-layout copy puts the same weights on src_tokens' columns, zero elsewhere
    src = sample["net_input"]["src_tokens"]
    attn = extra["attn"][0]
    for i in range(len(SOURCES)):
        columns = src[i].ne(D.pad()) & (src[i].ne(D.eos()) | keeps_eos)
        n = int(columns.sum())
        assert torch.equal(attn[i][:, columns], weights[i, :, 1 : n + 1])
        assert (attn[i][:, ~columns] == 0).all()


def centres_and_references(model, sample, steps):
    """Run the cross-attention by hand and record (mu_t, pa_{t-1}) at every step."""
    encoder_out = model.encoder(**{k: v for k, v in sample["net_input"].items() if k != "prev_output_tokens"})
    memory, state = model.decoder._start_state(encoder_out)
    attention = model.decoder.attention
    hidden, location, pairs = state["hidden"][-1], state["location"], []
    g = torch.Generator().manual_seed(0)
    for t in range(1, steps + 1):
        hidden = torch.randn(hidden.shape, generator=g) * 3  # any decoder state
        weight, bias, sizes = attention.step_readout()  # the location heads' maps multiplied out
        _, heads, _ = torch.nn.functional.linear(hidden, weight, bias).split(sizes, dim=-1)
        _, mu, _ = attention.location(heads, location["position"], memory, memory["padding_mask"], t)
        _, _, new_location = attention(hidden, memory, location, t)
        pairs.append((mu, location["position"]))
        location = new_location
    return pairs


@pytest.mark.parametrize("arch", ["gru_onestep", "gru_monoattn", "gru_rmonoattn"])
def test_unmixed_monotonic_centres_never_move_backwards(arch):
    model = build(arch, D, seed=4)
    for mu, previous in centres_and_references(model, batch(D, SOURCES, SOURCES), steps=30):
        assert (mu >= previous - 1e-6).all(), arch


def test_raw_step_ablation_can_move_backwards():
    """The check above can fail: with a raw (unbounded) step the centre does go back."""
    model = build("gru_onestep_minus_sigmoid", D, seed=4)
    pairs = centres_and_references(model, batch(D, SOURCES, SOURCES), steps=30)
    assert any((mu < previous - 1e-3).any() for mu, previous in pairs)


@pytest.mark.parametrize("arch", ["gru_onestep", "gru_relative", "gru_mix_monoattn_pr"])
def test_500_digit_inputs_train_and_decode(arch):
    model = build(arch, D, seed=5)
    g = torch.Generator().manual_seed(0)
    sources = random_digits(g, 2, 500, 500)
    sample = batch(D, sources, sources)
    model.train()
    logits, _ = model(**sample["net_input"])
    loss = torch.nn.functional.cross_entropy(
        logits.view(-1, logits.size(-1)), sample["target"].view(-1), ignore_index=D.pad()
    )
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    generator = SequenceGenerator([model], D, beam_size=1, max_len_a=1, max_len_b=5, min_len=500)
    hypos = generator.generate([model], batch(D, sources))
    assert all(len(h[0]["tokens"]) >= 501 for h in hypos)
    assert all(torch.isfinite(h[0]["positional_scores"]).all() for h in hypos)


@pytest.mark.parametrize("arch", LOCATION_ARCHS)
def test_gradients_reach_every_parameter(arch):
    model = build(arch, D, seed=6)
    model.train()
    sample = batch(D, SOURCES, SOURCES)
    logits, _ = model(**sample["net_input"])
    logits.sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not [n for n in missing if not n.endswith("step.gate_logit")], missing


def test_mono_gate_saturates_at_the_release_initialisation():
    """Mono's gate s = sigmoid(b) starts at b = 20 (the authors' constant): in float32
    sigmoid(20) is exactly 1, so s gets no gradient and Mono starts as pure ReLU steps.
    A smaller --mono-gate-init makes the gate trainable."""
    sample = batch(D, SOURCES, SOURCES)
    grads = {}
    for init in (20.0, 0.0):
        model = build("gru_monoattn", D, seed=6, mono_gate_init=init)
        model.train()
        logits, _ = model(**sample["net_input"])
        logits.sum().backward()
        grads[init] = model.decoder.attention.location.step.gate_logit.grad.item()
    assert torch.sigmoid(torch.tensor(20.0)).item() == 1.0
    assert grads[20.0] == 0.0 and grads[0.0] != 0.0


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_the_greedy_decoder_gives_fairseqs_greedy_outputs(arch):
    """metrics.GreedyDecoder (validation and scoring) against fairseq's SequenceGenerator with
    beam 1 and no minimum length: the same tokens for every example, including outputs that end
    early, run to the length limit (</s> forced) or finish at different steps."""
    g = torch.Generator().manual_seed(1)
    sample = batch(D, random_digits(g, 12, 1, 30))

    def check(model, max_len_a, max_len_b):
        return len(greedy_decoder_lengths(model, D, sample, max_len_a, max_len_b))

    model = build(arch, D, seed=8)
    for max_len_a, max_len_b in ((0, 3), (1.5, 2)):
        check(model, max_len_a, max_len_b)
    # an untrained model rarely stops: push </s> up, as built and with its weights moved, so that
    # sentences end at different steps (and the finished ones leave the batch)
    lengths = 0
    noise = torch.Generator().manual_seed(2)
    for moved, biases in ((False, (0.2, 0.4, 0.6, 0.8)), (True, (0.0, 0.5, 1.0, 2.0, 3.0))):
        with torch.no_grad():
            for parameter in model.parameters() if moved else ():
                parameter.add_(0.5 * torch.randn(parameter.shape, generator=noise))
            base = model.decoder.out_bias[D.eos()].item()
        for eos_bias in biases:
            with torch.no_grad():
                model.decoder.out_bias[D.eos()] = base + eos_bias
            lengths = max(lengths, check(model, 0, 40))
            with torch.no_grad():
                model.decoder.out_bias[D.eos()] = base
    assert lengths >= 3


def half_its_own_outputs(model, generator):
    """A batch of SOURCES whose even rows have the model's own greedy outputs as targets and whose
    odd rows have targets it does not decode (the copies of their sources), and those outputs."""
    from fairseq.data import data_utils

    from fairseq_monoattn.metrics import strip_pad_rows

    sources = batch(D, SOURCES)
    outputs = generator.generate([model], sources)
    targets = [
        torch.tensor(output) if row % 2 == 0 else torch.tensor([D.index(t) for t in SOURCES[row]] + [D.eos()])
        for row, output in enumerate(outputs)
    ]
    sample = dict(sources)
    sample["target"] = data_utils.collate_tokens(targets, D.pad())
    sample["ntokens"] = int(sample["target"].ne(D.pad()).sum())
    sample["net_input"] = dict(
        sources["net_input"],
        prev_output_tokens=data_utils.collate_tokens(targets, D.pad(), D.eos(), move_eos_to_beginning=True),
    )
    matching = [t == o for t, o in zip(strip_pad_rows(sample["target"], D.pad()), outputs)]
    assert matching[0::2] == [True] * 3 and not any(matching[1::2])  # both kinds of example are there
    return sample, outputs


@pytest.mark.parametrize("arch", ALL_ARCHS + sorted(TRANSFORMER_PRESETS))
def test_scoring_takes_the_gate_and_the_attention_peak_from_the_decoding_where_the_output_is_the_target(arch):
    """The scorer's attention peak is a teacher-forced quantity: where an output equals its target,
    decode_batch keeps it from the greedy decoding, and runs the teacher-forced pass on the other
    examples only.  Against one teacher-forced pass over the whole batch (what it replaces), with
    half the targets the model's own outputs and half not: the same peaks (1e-10, float64), the
    same gates and the same outputs."""
    from fairseq_monoattn.metrics import GreedyDecoder
    from fairseq_monoattn.scoring import attention_peaks, decode_batch, direction_of, teacher_forced_extra

    model = build(arch, D, seed=3).to(torch.float64)
    generator = GreedyDecoder(D, max_len_b=40)
    sample, outputs = half_its_own_outputs(model, generator)
    passes = []
    hooks = [
        model.encoder.register_forward_hook(lambda _module, args, _out: passes.append(("encoder", len(args[0])))),
        model.decoder.register_forward_hook(lambda _module, args, _out: passes.append(("decoder", args[0].shape))),
    ]
    with torch.no_grad():
        hypotheses, gates, peaks = decode_batch(generator, [model], sample, D.pad())
        for hook in hooks:
            hook.remove()
        extra = teacher_forced_extra(model, sample)
        expected_gates = direction_of(model, sample, extra)
        expected_peaks = attention_peaks(extra.get("attention"), sample["target"], D.pad())
    assert hypotheses == outputs
    if expected_gates is None:
        assert gates is None
    else:
        assert torch.equal(gates, expected_gates)
    if expected_peaks is None:
        assert peaks is None
    else:
        assert peaks.shape == (len(SOURCES),)
        torch.testing.assert_close(peaks, expected_peaks, rtol=0, atol=1e-10)
        # the encoder once, then the decoding's steps, then the decoder over the odd rows (decoded wrong)
        assert passes[-1] == ("decoder", (len(SOURCES) // 2, sample["target"].size(1)))
    assert [kind for kind, _ in passes].count("encoder") == 1


@pytest.mark.parametrize("arch", ALL_ARCHS + sorted(TRANSFORMER_PRESETS))
def test_greedy_decoding_keeps_each_steps_logits_which_are_the_teacher_forced_ones_on_its_output(arch):
    """GreedyDecoder.decode(logits=True): at each step of an example, the decoder's output there,
    zeros after its last step; on the decoded outputs as targets (the runaway ones too, cut at the
    limit with the EOS the decoder forces) the teacher-forced pass gives the same logits (1e-10,
    float64)."""
    from fairseq.data import data_utils

    from fairseq_monoattn.metrics import GreedyDecoder

    model = build(arch, D, seed=3).to(torch.float64)
    sources = batch(D, SOURCES)
    decoded = GreedyDecoder(D, max_len_b=12).decode([model], sources, logits=True)
    outputs = [torch.tensor(output) for output in decoded.hypotheses]
    lengths = torch.tensor([len(output) for output in outputs])
    assert decoded.logits.shape == (len(SOURCES), int(lengths.max()), len(D))
    with torch.no_grad():
        forced, _ = model(
            src_tokens=sources["net_input"]["src_tokens"],
            src_lengths=sources["net_input"]["src_lengths"],
            prev_output_tokens=data_utils.collate_tokens(outputs, D.pad(), D.eos(), move_eos_to_beginning=True),
        )
    steps = torch.arange(decoded.logits.size(1)).unsqueeze(0) < lengths.unsqueeze(1)  # (B, steps)
    torch.testing.assert_close(decoded.logits[steps], forced[steps], rtol=0, atol=1e-10)
    assert not decoded.logits[~steps].any()


ORACLE_ARCHS = ["gru_content", "gru_onestep", "gru_mix_monoattn_pr", "transformer_monoattn_recency"]


@pytest.mark.parametrize("arch", ORACLE_ARCHS)
def test_decoding_told_the_lengths_writes_exactly_them_and_otherwise_the_most_probable_token(arch):
    """GreedyDecoder.decode(output_lengths=...), Newman et al.'s length oracle: each output has its
    length and then EOS, and every other token is the step's most probable one but EOS and pad;
    fairseq's generator told one length (metrics.told_length_generator) writes the same outputs."""
    from fairseq_monoattn.metrics import GreedyDecoder, greedy_hypotheses, told_length_generator

    model = build(arch, D, seed=3).to(torch.float64)
    lengths = torch.tensor([3, 0, 7, 12, 1])
    decoded = GreedyDecoder(D, max_len_b=40).decode([model], batch(D, SOURCES), logits=True, output_lengths=lengths)
    for row, (output, length) in enumerate(zip(decoded.hypotheses, lengths.tolist())):
        assert len(output) == length + 1 and output[-1] == D.eos() and D.eos() not in output[:-1]
        for step in range(length):
            logits = decoded.logits[row, step].clone()
            logits[[D.pad(), D.eos()]] = float("-inf")
            assert output[step] == int(logits.argmax())
    with pytest.raises(ValueError, match="past the length limit 40"):
        GreedyDecoder(D, max_len_b=40).decode([model], batch(D, SOURCES), output_lengths=lengths + 30)
    # fairseq's generator told each length (one example at a time here): the same outputs
    for row, length in enumerate(lengths.tolist()):
        alone = batch(D, SOURCES[row : row + 1])
        told = greedy_hypotheses(told_length_generator([model], D, length), [model], alone)
        assert told == [decoded.hypotheses[row]], (row, length)


@pytest.mark.parametrize("arch", ORACLE_ARCHS)
def test_the_outputs_told_their_lengths_are_the_whole_batch_decoded_told_with_only_the_short_ones_decoded_again(arch):
    """scoring.told_outputs against decoding the whole batch told each target's length: the same
    outputs, with targets made from the model's own outputs so that every kind is there (right, cut
    short, gone on past the target, ended early and wrong), and one encoder pass over the rows that
    ended early alone; fairseq's generator gives the same; under a shorter output limit a target
    past it keeps its greedy output."""
    from fairseq_monoattn.metrics import GreedyDecoder, is_cut_short, is_exact_match, without_eos
    from fairseq_monoattn.scoring import told_outputs

    model = build(arch, D, seed=3).to(torch.float64)
    sample = batch(D, SOURCES)
    # (untrained, these models end at once or run to the limit; scoring's limit is well past every target)
    outputs = GreedyDecoder(D, max_len_b=12).generate([model], sample)
    generator = GreedyDecoder(D, max_len_b=40)
    eos, one, two = D.eos(), D.index("1"), D.index("2")
    body = [without_eos(output, eos) for output in outputs]
    other = two if body[4][:1] == [one] else one
    targets = [
        outputs[0],  # right
        body[1] + [one, two, eos],  # cut short: the output stops two tokens early
        body[2][:-1] + [eos],  # the output goes on past the target (or is it)
        None,  # cut short, and right when told its length: below
        [other] + body[4] + [one, eos],  # ended early, wrong from its first token (cut short if it has none)
    ]
    # the model's own output told two tokens more than it wrote (the same tokens up to its end)
    told_two_more = torch.tensor([len(body[3]) + 2] * len(SOURCES))
    targets[3] = generator.decode([model], sample, output_lengths=told_two_more).hypotheses[3]
    assert [row for row, (h, t) in enumerate(zip(outputs, targets)) if is_cut_short(h, t, eos)][:2] == [1, 3]
    sources = []
    hook = model.encoder.register_forward_hook(lambda _module, args, _out: sources.append(len(args[0])))
    told = told_outputs(generator, [model], sample, outputs, targets, D)
    hook.remove()
    assert sources == [3]  # rows 1, 3 and 4 ended before their targets' lengths: decoded again together
    lengths = torch.tensor([len(t) - 1 for t in targets])
    assert told == generator.decode([model], sample, output_lengths=lengths).hypotheses
    assert all(is_exact_match(told[row], targets[row]) for row in (0, 2, 3)) and not is_exact_match(told[4], targets[4])
    # fairseq's generator (the models GreedyDecoder does not decode), told one length a batch: the same outputs
    fairseqs = SequenceGenerator([model], D, beam_size=1, max_len_b=40, min_len=0)
    assert told_outputs(fairseqs, [model], sample, outputs, targets, D) == told
    # under an output limit shorter than a target, that target keeps its greedy output (wrong told its length too)
    short = GreedyDecoder(D, max_len_b=len(targets[1]) - 2)
    told_short = told_outputs(short, [model], sample, outputs, targets, D)
    past = [row for row, target in enumerate(targets) if len(target) - 1 > short.max_len_b]
    assert 1 in past and all(told_short[row] == outputs[row] for row in past)
    assert all(told_short[row] == told[row] for row in range(len(targets)) if row not in past)


def test_validation_calls_a_criterion_that_has_its_own_forward():
    """A subclass of seq_acc with its own forward (an extra loss term, say) is called as fairseq
    calls it; the decoding's outputs are only handed to the plain criterion."""
    from fairseq_monoattn.criterions.sequence_accuracy import SequenceAccuracyCriterion
    from fairseq_monoattn.metrics import GreedyDecoder
    from fairseq_monoattn.tasks.length_generalization import LengthGeneralizationConfig, LengthGeneralizationTask

    calls = []

    class WithItsOwnForward(SequenceAccuracyCriterion):
        def forward(self, model, sample, reduce=True):
            calls.append(len(sample["target"]))
            return super().forward(model, sample, reduce)

    model = build("gru_onestep", D, seed=3)
    task = LengthGeneralizationTask(LengthGeneralizationConfig(eval_accuracy=True), D, D)
    task.greedy_generator = GreedyDecoder(D)
    sample, _ = half_its_own_outputs(model, GreedyDecoder(D, max_len_b=40))
    task.valid_step(sample, model, WithItsOwnForward(task, sentence_avg=False))
    assert calls == [len(SOURCES)]
    task.valid_step(sample, model, SequenceAccuracyCriterion(task, sentence_avg=False))
    assert calls == [len(SOURCES)]


def ending_on_their_own(arch):
    """``arch`` (float64) whose greedy outputs of the even rows of SOURCES end with an EOS it chose,
    before 40 tokens: the GRU presets' EOS bias raised in steps of 0.5 until they do."""
    from fairseq_monoattn.metrics import GreedyDecoder

    model = build(arch, D, seed=3).to(torch.float64)
    for _ in range(9):
        outputs = GreedyDecoder(D, max_len_b=40).generate([model], batch(D, SOURCES))
        if all(len(output) <= 40 for output in outputs[0::2]):
            return model
        with torch.no_grad():
            model.decoder.out_bias[D.eos()] += 0.5
    raise AssertionError(f"{arch}: no EOS bias up to +4 ends the outputs")


@pytest.mark.parametrize("arch", ALL_ARCHS + sorted(TRANSFORMER_PRESETS))
def test_validation_takes_the_teacher_forced_pass_from_the_decoding_where_the_output_is_the_target(arch):
    """--eval-accuracy validation decodes every example greedily; where an output equals its target
    the decoding went through the teacher-forced steps, so the criterion's loss, token and sequence
    counts and gate are taken from it, and only the other examples get a teacher-forced pass.  Against
    what it replaces (the criterion's own pass over the whole batch, then the decoding), with half the
    targets the model's own outputs and half not, label smoothing on: the same loss and nll (1e-10,
    float64), the same counts."""
    from fairseq_monoattn.criterions.sequence_accuracy import SequenceAccuracyCriterion
    from fairseq_monoattn.metrics import GreedyDecoder
    from fairseq_monoattn.tasks.length_generalization import LengthGeneralizationConfig, LengthGeneralizationTask

    model = ending_on_their_own(arch)
    task = LengthGeneralizationTask(LengthGeneralizationConfig(eval_accuracy=True), D, D)
    task.greedy_generator = GreedyDecoder(D)
    sample, _ = half_its_own_outputs(model, GreedyDecoder(D, max_len_b=40))
    criterion = SequenceAccuracyCriterion(task, sentence_avg=False, label_smoothing=0.1)
    passes = []
    model.encoder.register_forward_hook(lambda _module, args, _out: passes.append(("encoder", len(args[0]))))
    model.decoder.register_forward_hook(lambda _module, args, _out: passes.append(("decoder", args[0].shape)))
    loss, size, log = task.valid_step(sample, model, criterion)
    # the encoder once, then the decoding's steps, then the decoder over the two examples decoded wrong
    assert passes[0] == ("encoder", 5) and passes[-1] == ("decoder", (2, sample["target"].size(1)))
    assert [kind for kind, _ in passes].count("encoder") == 1
    passes.clear()
    with torch.no_grad():
        expected_loss, expected_size, expected = criterion(model, sample)
        tally = task.greedy_tally(sample, model)
    assert (log["_acc_total"], log["_acc_correct"], log["_acc_edit_distance"]) == (
        tally.size,
        tally.correct,
        tally.edit_distance,
    )
    assert tally.correct == 3 and size == expected_size
    torch.testing.assert_close(loss, expected_loss, rtol=1e-10, atol=0)
    torch.testing.assert_close(log["nll_loss"], expected["nll_loss"], rtol=1e-10, atol=0)
    counts = ("ntokens", "nsentences", "n_correct_tokens", "n_correct_sequences", "_gate_forward", "_gate_total")
    assert {k: log.get(k) for k in counts} == {k: expected.get(k) for k in counts}
    assert ("_gate_sum" in log) == ("_gate_sum" in expected)
    if "_gate_sum" in expected:
        assert log["_gate_sum"] == pytest.approx(expected["_gate_sum"], rel=1e-12)


@pytest.mark.parametrize("arch", ["gru_content", "gru_mix_locattn_s_pr"])
def test_decoding_makes_the_step_readout_once_and_keeps_it_in_the_incremental_state(arch):
    """The readout weights (the attention's rows, the location heads multiplied out, the GRU's hidden
    gates) do not change between the steps of a decoding: made at its first step, kept after; a
    beam search over the kept weights gives the full pass's scores (test_incremental_* above)."""
    model = build(arch, D, seed=1)
    made = []
    readout = model.decoder.attention.step_readout
    model.decoder.attention.step_readout = lambda: made.append(1) or readout()
    with torch.no_grad():
        hypotheses = SequenceGenerator([model], D, beam_size=5, max_len_b=12).generate([model], batch(D, SOURCES))
    assert len(made) == 1 and all(len(h[0]["tokens"]) > 1 for h in hypotheses)


@pytest.mark.parametrize(
    "arch, options",
    [
        ("gru_monoattn", {}),
        ("gru_mix_locattn_s_pr", {"linear_init": "pytorch"}),  # the values' output map with a bias
        ("gru_mix_locattn_s", {"value_path": "two", "attention_query_bias": False}),
        ("gru_content", {"decoder_layers": 2}),
    ],
)
def test_the_values_output_map_folded_into_the_input_gates_is_the_same_function(arch, options, monkeypatch):
    """The decoder applies the values' output map at every source position or leaves it to the
    context's input gates (W_c A multiplied out), whichever takes fewer operations: both give the
    same logits and parameter gradients (1e-10, float64), and the choice follows the batch's
    source positions against the input gates' rows."""
    from fairseq_monoattn.fast_path import FastPath

    model = build(arch, D, seed=5, **options).to(torch.float64).train()
    if model.fast_path is None:
        pytest.skip("the C++ kernels are not built: the reference applies the map at every source position")
    sample = batch(D, SOURCES, [s[::-1] for s in SOURCES])
    encoder_out = model.encoder(sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"])
    gate_rows = model.decoder.cells[0].weight_ih.size(0)
    positions = len(SOURCES) * encoder_out["encodings"].size(1)
    assert FastPath.folds_value_output(model.decoder, encoder_out) == (positions > gate_rows)
    assert FastPath.folds_value_output(model.decoder, encoder_out, incremental_state={})
    results = []
    for fold in (False, True):
        monkeypatch.setattr(FastPath, "folds_value_output", lambda *args, fold=fold: fold)
        torch.manual_seed(0)  # the same dropout masks
        model.zero_grad()
        logits, _ = model(**sample["net_input"])
        logits.logsumexp(-1).sum().backward()
        results.append(
            (logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        )
    (plain, plain_grads), (folded, folded_grads) = results
    torch.testing.assert_close(folded, plain, rtol=0, atol=1e-10)
    assert sorted(folded_grads) == sorted(plain_grads)
    for name in plain_grads:
        torch.testing.assert_close(folded_grads[name], plain_grads[name], rtol=1e-9, atol=1e-10, msg=name)
