"""fairseq-generate through ``--task length_generalization`` (fairseq_monoattn/generation.py): beam
search that ends a sentence only when no unfinished hypothesis can beat its best finished one, beam
1 giving greedy decoding's outputs, and outputs that do not depend on the batch."""

import math
from argparse import Namespace

import pytest
import torch
from fairseq.models import FairseqDecoder, FairseqEncoder, FairseqEncoderDecoderModel
from fairseq.sequence_generator import SequenceGenerator
from model_helpers import ALL_ARCHS, random_digits

from fairseq_monoattn.generation import BeamSearch, GenerationOptionError, floats_as
from fairseq_monoattn.metrics import GreedyDecoder, strip_pad_rows
from fairseq_monoattn.models.transformer_monoattn import TRANSFORMER_PRESETS
from fairseq_monoattn.testing import batch, build, digit_dictionary

D = digit_dictionary()
EOS_PROBABILITY = 0.05  # the scripted copier's second choice at every step


class ScriptedEncoder(FairseqEncoder):
    def forward(self, src_tokens, src_lengths=None, **kwargs):
        return {"source": src_tokens}

    def reorder_encoder_out(self, encoder_out, new_order):
        return {"source": encoder_out["source"].index_select(0, new_order)}


class ScriptedCopier(FairseqDecoder):
    """Step t puts probability 1 - q - (a few 1e-7) on the source's t-th token (the copy; </s>
    after the source) and q on </s>: the copy is the most probable output, every proper prefix of
    it ended by </s> scores log q + t log(1 - q), far below it."""

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        source = encoder_out["source"]
        steps = prev_output_tokens.size(1)
        wanted = torch.full((source.size(0), steps), D.eos(), dtype=torch.long)
        for row, tokens in enumerate(strip_pad_rows(source, D.pad())):
            copied = tokens[:steps]
            wanted[row, : len(copied)] = torch.tensor(copied)
        logits = torch.full((source.size(0), steps, len(D)), -16.0, dtype=torch.float64)
        logits[..., D.eos()] = math.log(EOS_PROBABILITY)
        logits.scatter_(2, wanted.unsqueeze(-1), math.log(1 - EOS_PROBABILITY))
        return logits, {"attn": [None]}

    def max_positions(self):
        return 10_000


def scripted_copier():
    return FairseqEncoderDecoderModel(ScriptedEncoder(D), ScriptedCopier(D)).eval()


COPY_SOURCES = [list("3141592653"), list("27182818284590"), list("1"), list("123456789")]


def copies(sources):
    return [[D.index(t) for t in source] + [D.eos()] for source in sources]


@pytest.mark.parametrize("lenpen", [0.0, 1.0])
def test_fairseqs_beam_ends_a_copy_early_where_the_plugins_finds_the_copy(lenpen):
    """fairseq's SequenceGenerator ends a sentence once --beam hypotheses ended: its beam fills
    with the copy's prefixes ended by </s> before the copy ends.  The plugin's search keeps going
    while the unfinished copy scores above them, and returns it."""
    model, sample = scripted_copier(), batch(D, COPY_SOURCES)
    fairseqs = SequenceGenerator([model], D, beam_size=5, max_len_b=30, len_penalty=lenpen).generate([model], sample)
    theirs = [hypos[0]["tokens"].tolist() for hypos in fairseqs]
    wanted = copies(COPY_SOURCES)
    # the sources longer than the beam come out cut short (the short ones fit in it)
    assert [t == w for t, w in zip(theirs, wanted)] == [False, False, True, False]
    assert all(w[: len(t) - 1] == t[:-1] for t, w in zip(theirs, wanted))
    for beam in (1, 3, 5):
        ours = BeamSearch([model], D, beam_size=beam, max_len_b=30, len_penalty=lenpen).generate([model], sample)
        assert [hypos[0]["tokens"].tolist() for hypos in ours] == wanted, beam
        for hypos, copy in zip(ours, wanted):
            # each token log(1 - q), the </s> after the source about log 1 (to the others' 1e-6 a step)
            log_prob = (len(copy) - 1) * math.log(1 - EOS_PROBABILITY)
            assert abs(float(hypos[0]["positional_scores"].sum()) - log_prob) < 1e-3
            assert (
                abs(float(hypos[0]["score"]) - float(hypos[0]["positional_scores"].sum()) / len(copy) ** lenpen) < 1e-12
            )


# ------------------------------------------------------------------ every preset, random weights

EVERY_PRESET = ALL_ARCHS + sorted(TRANSFORMER_PRESETS)
LIMIT = 24  # tokens before the forced </s>
SOURCES = random_digits(torch.Generator().manual_seed(5), 14, 1, 30)
# for the tests that decode each source alone too (those decodings are most of their time): 8 of
# the 14, their lengths still from 1 to 27 (12, 8, 27, 23, 5, 20, 1, 3)
SPREAD = [SOURCES[i] for i in (0, 2, 4, 6, 9, 10, 11, 13)]


def source_lengths(encoder_out) -> torch.Tensor:
    """Each row's source length (B,) from the encoder output the decoder is given (the GRU's
    reorders lazily: its rows are read through ``encoder_rows``; the Transformer's padding mask)."""
    from fairseq_monoattn.models.gru_seq2seq import encoder_rows

    if "order" in encoder_out:
        return encoder_rows(encoder_out, "lengths")
    (source,) = encoder_out["encoder_out"]
    padding = encoder_out["encoder_padding_mask"]
    return (~padding[0]).sum(dim=1) if padding else torch.full((source.size(1),), source.size(0))


def raise_eos_with_position(model, start=-3.0, slope=0.6, per_source_token=-0.5):
    """</s>'s logit at output position p (0-based) of a source of n tokens moves by start + slope
    (p + 1) + per_source_token n, in the full pass and in incremental decoding alike (the decoder
    is given the whole prefix either way), so that an untrained model's sentences end at different
    steps and finished ones leave the batch.  The decoder's forward itself is wrapped: fairseq's
    ensemble calls ``decoder.forward``, past hooks."""
    original = model.decoder.forward

    def forward(prev_output_tokens, encoder_out=None, *args, **kwargs):
        logits, extra = original(prev_output_tokens, encoder_out, *args, **kwargs)
        logits = logits.clone()
        first = prev_output_tokens.size(1) - logits.size(1)  # incremental decoding: the last position only
        positions = torch.arange(first, prev_output_tokens.size(1), dtype=logits.dtype)
        lengths = source_lengths(encoder_out).to(logits.dtype).unsqueeze(1)
        logits[..., D.eos()] += start + slope * (positions + 1) + per_source_token * lengths
        dtypes.add(logits.dtype)
        return logits, extra

    dtypes = set()
    model.decoder.forward = forward
    return dtypes  # the float types the decoder computed in


def task_generator(models, **options):
    """The generator fairseq-generate gets from --task length_generalization."""
    from fairseq_monoattn.tasks.length_generalization import LengthGeneralizationConfig, LengthGeneralizationTask

    task = LengthGeneralizationTask(LengthGeneralizationConfig(), D, D)
    settings = dict(beam=1, nbest=1, max_len_a=0, max_len_b=LIMIT, min_len=0, lenpen=1.0, unkpen=0.0, temperature=1.0)
    return task.build_generator(models, Namespace(**dict(settings, **options)))


def in_batches(decode, sources, size):
    """decode(sample) -> per-example results, over ``sources`` cut into batches of ``size``."""
    results = []
    for start in range(0, len(sources), size):
        chunk = sources[start : start + size]
        results += decode(batch(D, chunk, targets=chunk))
    return results


@pytest.mark.parametrize("arch", EVERY_PRESET)
def test_fairseq_generate_and_the_scorer_give_the_same_outputs_in_any_batch(arch):
    """The task's generator at --beam 1 (float32 weights, decoded in float64) and the scorer's greedy
    decoding (the weights in float64, as fairseq-monoattn-score loads them) give every example the
    same output in batches of 1, 7 and 256, with sentences ending at different steps; the task's
    scores agree across batches to float rounding, and the weights come back in float32."""
    from fairseq_monoattn.scoring import decode_batch

    model = build(arch, D, seed=6)
    scorer_model = build(arch, D, seed=6).double()
    decoded_in = raise_eos_with_position(model)
    raise_eos_with_position(scorer_model)
    generator = task_generator([model])
    greedy = GreedyDecoder(D, max_len_b=LIMIT)
    outputs, scores = {}, {}
    for size in (1, 7, 256):
        hypos = in_batches(lambda sample: generator.generate([model], sample), SPREAD, size)
        outputs[("task", size)] = [h[0]["tokens"].tolist() for h in hypos]
        scores[size] = torch.stack([h[0]["positional_scores"].sum() for h in hypos])
        outputs[("scorer", size)] = in_batches(
            lambda sample: decode_batch(greedy, [scorer_model], sample, D.pad())[0], SPREAD, size
        )
    first = outputs[("task", 1)]
    assert all(found == first for found in outputs.values()), arch
    assert len({len(output) for output in first}) >= 5, first  # sentences of several lengths
    for size in (7, 256):
        assert torch.allclose(scores[size], scores[1], rtol=0, atol=1e-5), arch
    assert decoded_in == {torch.float64}
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.parametrize("arch", ["gru_onestep", "transformer_monoattn"])
def test_a_length_limit_from_the_source_is_each_examples_own(arch):
    """--max-len-a: fairseq multiplies the longest source of the batch; the task's generator each
    example's own, so an output cut at its limit is the one fairseq gives the example alone."""
    model = build(arch, D, seed=6).double()
    raise_eos_with_position(model, start=-30.0)  # no sentence ends before its limit
    generator = task_generator([model], max_len_a=0.5, max_len_b=1)
    ours = [h[0]["tokens"].tolist() for h in generator.generate([model], batch(D, SOURCES))]
    fairseqs = SequenceGenerator([model], D, beam_size=1, max_len_a=0.5, max_len_b=1, min_len=0)
    alone = [fairseqs.generate([model], batch(D, [source]))[0][0]["tokens"].tolist() for source in SOURCES]
    assert ours == alone
    assert [len(output) for output in ours] == [int(0.5 * (len(source) + 1) + 1) + 1 for source in SOURCES]


@pytest.mark.parametrize("arch", EVERY_PRESET)
def test_every_beam_hypothesis_scores_as_a_teacher_forced_pass_of_it_alone(arch):
    """Beam 5 reorders the decoder's state at every step and drops finished sentences from the batch
    (sentences end at different steps here): each of the 5 hypotheses it returns per example scores,
    token for token, what one full teacher-forced pass of that example alone gives it, so no state
    is read from another row.  Returned best first."""
    from fairseq_monoattn.testing import teacher_forced_scores

    model = build(arch, D, seed=7).double()
    raise_eos_with_position(model)
    sources = SOURCES[:8]
    generator = task_generator([model], beam=5, nbest=5, lenpen=0.0)
    hypos = generator.generate([model], batch(D, sources))
    ended_at = set()
    for source, nbest in zip(sources, hypos):
        assert len(nbest) == 5
        assert [float(h["score"]) for h in nbest] == sorted((float(h["score"]) for h in nbest), reverse=True)
        alone = torch.tensor([[D.index(t) for t in source] + [D.eos()]])
        for hypo in nbest:
            full = teacher_forced_scores(model, D, alone, hypo["tokens"])
            assert torch.allclose(full.double(), hypo["positional_scores"], rtol=0, atol=1e-5), arch
            ended_at.add(len(hypo["tokens"]))
    assert len(ended_at) >= 3, ended_at


def test_options_the_search_does_not_take_are_refused_by_name_and_fairseqs_tasks_keep_fairseqs_generator():
    from fairseq.sequence_generator import SequenceGenerator as FairseqGenerator
    from fairseq.sequence_scorer import SequenceScorer
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    model = build("gru_onestep", D, seed=1)
    assert isinstance(task_generator([model]), BeamSearch)
    assert isinstance(task_generator([model], score_reference=True), SequenceScorer)
    assert isinstance(task_generator([model], sampling=True), FairseqGenerator)
    for option, value in (("no_repeat_ngram_size", 2), ("diverse_beam_groups", 2), ("prefix_size", 1)):
        name = "--" + option.replace("_", "-")
        with pytest.raises(GenerationOptionError, match=name):
            task_generator([model], **{option: value})
    with pytest.raises(GenerationOptionError, match="--nbest 3 is more than --beam 2"):
        task_generator([model], beam=2, nbest=3)
    stock = TranslationTask(TranslationConfig(), D, D).build_generator([model], Namespace(beam=5))
    assert type(stock) is FairseqGenerator


def test_decoding_in_float64_leaves_the_weights_as_they_were():
    model = build("transformer_monoattn", D, seed=1)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    parameters = list(model.parameters())
    with floats_as([model], torch.float64):
        assert all(p.dtype == torch.float64 for p in model.parameters())
    assert list(model.parameters()) == parameters  # the same objects (an optimizer's)
    after = model.state_dict()
    assert all(after[name].dtype == before[name].dtype and torch.equal(after[name], before[name]) for name in before)


@pytest.mark.parametrize("arch", EVERY_PRESET)
def test_fairseqs_generator_decodes_each_row_of_a_shrinking_batch_as_alone(arch, monkeypatch):
    """The models' state under fairseq's own SequenceGenerator (what --task translation decodes
    with): sentences end at different steps, fairseq drops them from the batch and reorders the
    decoder's state and the encoder's output with a shorter new_order; every row still gets the
    hypotheses and scores it gets decoded alone (float64, fairseq's attention softmax taken in
    float64 too: its float32 one alone moves a Transformer's logits by 1e-7 between batches)."""
    import fairseq.utils
    import torch.nn.functional as F

    monkeypatch.setattr(fairseq.utils, "softmax", lambda x, dim, onnx_trace=False: F.softmax(x, dim=dim))
    model = build(arch, D, seed=6).double()
    raise_eos_with_position(model)
    sources = SPREAD
    for beam in (1, 5):
        generator = SequenceGenerator([model], D, beam_size=beam, max_len_b=LIMIT, min_len=0)
        together = generator.generate([model], batch(D, sources))
        lengths = set()
        for i, source in enumerate(sources):
            alone = generator.generate([model], batch(D, [source]))[0]
            for a, b in zip(alone, together[i]):
                assert torch.equal(a["tokens"], b["tokens"]), (arch, beam, i)
                assert torch.allclose(a["positional_scores"], b["positional_scores"], rtol=0, atol=1e-6), (beam, i)
            lengths.add(len(together[i][0]["tokens"]))
        assert len(lengths) >= 2, (beam, lengths)  # rows left the batch before others


@pytest.mark.parametrize("arch", ["gru_onestep", "gru_content", "transformer_monoattn"])
def test_with_length_normalisation_the_answer_scores_at_least_fairseqs(arch, monkeypatch):
    """--lenpen 1: the search follows fairseq's (the same candidates end and go on) and ends no
    earlier, so its finished hypotheses include fairseq's and its best normalised score is at least
    fairseq's, example by example (float64, fairseq's attention softmax in float64 too)."""
    import fairseq.utils
    import torch.nn.functional as F

    monkeypatch.setattr(fairseq.utils, "softmax", lambda x, dim, onnx_trace=False: F.softmax(x, dim=dim))
    model = build(arch, D, seed=6).double()
    raise_eos_with_position(model, start=-1.0, slope=0.3)  # </s> often among the beam's candidates
    sample = batch(D, SOURCES)
    fairseqs = SequenceGenerator([model], D, beam_size=5, max_len_b=LIMIT, min_len=0).generate([model], sample)
    ours = task_generator([model], beam=5, lenpen=1.0).generate([model], sample)
    theirs = torch.tensor([float(h[0]["score"]) for h in fairseqs])
    found = torch.tensor([float(h[0]["score"]) for h in ours])
    assert bool((found >= theirs - 1e-6).all()), (found - theirs).min()
