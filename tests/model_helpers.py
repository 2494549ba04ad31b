"""Small builders shared by the model tests: a digit dictionary, models by preset name,
and left-padded batches made the way fairseq's translation task makes them."""

import argparse

import torch
from fairseq.data import Dictionary, data_utils
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
from fairseq.sequence_generator import SequenceGenerator

import fairseq_monoattn  # noqa: F401  (registers the architectures)
from fairseq_monoattn.metrics import GreedyDecoder, greedy_generator, greedy_hypotheses
from fairseq_monoattn.models.presets import PRESETS
from fairseq_monoattn.modules import LocationAttention
from fairseq_monoattn.registry import NORMALIZATIONS, REFERENCES, STEP_ACTIVATIONS

ALL_ARCHS = ["gru_seq2seq"] + list(PRESETS)
LOCATION_ARCHS = [name for name in PRESETS if PRESETS[name].get("location_attention")]


def location_attention(
    reference="previous",
    step_activation="sigmoid",
    location_normalization="softmax",
    clamp_slope=None,
    sigma_min=0.27,
    dwell_count=False,
    dwell_init=0.0,
    **settings,
):
    """A LocationAttention from registry names (``settings``: the entries' own options)."""
    return LocationAttention(
        REFERENCES.build(reference, settings),
        STEP_ACTIVATIONS.build(step_activation, settings),
        NORMALIZATIONS.build(location_normalization, settings),
        sigma_min=sigma_min,
        clamp_slope=clamp_slope,
        dwell_count=dwell_count,
        dwell_init=dwell_init,
    )


def digit_dictionary():
    d = Dictionary()
    for c in "0123456789":
        d.add_symbol(c)
    return d


class _Task:
    def __init__(self, dictionary):
        self.source_dictionary = dictionary
        self.target_dictionary = dictionary


def build(arch, dictionary=None, seed=0, **overrides):
    dictionary = dictionary or digit_dictionary()
    args = argparse.Namespace(arch=arch, **overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(seed)
    model = ARCH_MODEL_REGISTRY[arch].build_model(args, _Task(dictionary))
    return model.eval()


def encode(dictionary, sequences):
    """Token lists -> list of 1-D tensors ending in EOS."""
    return [torch.tensor([dictionary.index(t) for t in seq] + [dictionary.eos()]) for seq in sequences]


def batch(dictionary, sources, targets=None):
    """A fairseq-style sample: left-padded sources, right-padded targets, prev outputs."""
    src = encode(dictionary, sources)
    sample = {
        "id": torch.arange(len(src)),
        "net_input": {
            "src_tokens": data_utils.collate_tokens(src, dictionary.pad(), left_pad=True),
            "src_lengths": torch.tensor([len(s) for s in src]),
        },
        "nsentences": len(src),
    }
    if targets is not None:
        tgt = encode(dictionary, targets)
        sample["target"] = data_utils.collate_tokens(tgt, dictionary.pad(), left_pad=False)
        sample["net_input"]["prev_output_tokens"] = data_utils.collate_tokens(
            tgt, dictionary.pad(), dictionary.eos(), left_pad=False, move_eos_to_beginning=True
        )
        sample["ntokens"] = sum(len(t) for t in tgt)
    return sample


def random_digits(generator, count, low, high):
    lengths = torch.randint(low, high + 1, (count,), generator=generator).tolist()
    return [[str(d) for d in torch.randint(0, 10, (n,), generator=generator).tolist()] for n in lengths]


def teacher_forced_scores(model, dictionary, src_tokens, tokens):
    """log p(token_t | tokens_<t, source) from one full (non-incremental) pass of one example."""
    prev = torch.cat([torch.tensor([dictionary.eos()]), tokens[:-1]]).unsqueeze(0)
    logits, _ = model(src_tokens, torch.tensor([src_tokens.size(1)]), prev)
    lprobs = model.get_normalized_probs((logits, None), log_probs=True)
    return lprobs[0].gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def assert_incremental_equals_full(model, dictionary, sources, beam: int, max_len_b: int = 25):
    """fairseq's generator (incremental state, beam reordering) scores every hypothesis as one full
    teacher-forced pass of its example alone does."""
    sample = batch(dictionary, sources)
    generator = SequenceGenerator([model], dictionary, beam_size=beam, max_len_b=max_len_b)
    hypos = generator.generate([model], sample)
    for i, nbest in enumerate(hypos):
        src = sample["net_input"]["src_tokens"][i : i + 1]
        src = src[src.ne(dictionary.pad())].unsqueeze(0)  # the example alone, unpadded
        for hypo in nbest[:3]:
            full = teacher_forced_scores(model, dictionary, src, hypo["tokens"])
            assert torch.allclose(full, hypo["positional_scores"], atol=1e-5), (beam, i)


def assert_padding_invariant(model, dictionary, sources, atol=1e-5):
    """Alone or in a batch with longer and shorter examples: the same hypotheses, and the same
    scores and teacher-forced logits to ``atol``."""
    generator = SequenceGenerator([model], dictionary, beam_size=3, max_len_b=40)
    together = generator.generate([model], batch(dictionary, sources))
    for i, source in enumerate(sources):
        alone = generator.generate([model], batch(dictionary, [source]))[0]
        for a, b in zip(alone, together[i]):
            assert torch.equal(a["tokens"], b["tokens"]), i
            assert torch.allclose(a["positional_scores"], b["positional_scores"], atol=atol), i
    targets = [s[::-1] for s in sources]
    full = batch(dictionary, sources, targets)
    logits, _ = model(**full["net_input"])
    for i, (source, target) in enumerate(zip(sources, targets)):
        one = batch(dictionary, [source], [target])
        alone, _ = model(**one["net_input"])
        assert torch.allclose(alone[0], logits[i, : len(target) + 1], atol=atol), i


def greedy_decoder_lengths(model, dictionary, sample, max_len_a, max_len_b, before_each=lambda: None):
    """Assert that metrics.GreedyDecoder (validation and scoring) decodes ``sample`` to the tokens of
    fairseq's SequenceGenerator with beam 1 and no minimum length; return the set of output lengths.
    ``before_each`` runs before each of the two decodings (e.g. to reset a hook's step count)."""
    ours = greedy_generator([model], dictionary, max_len_a, max_len_b)
    assert isinstance(ours, GreedyDecoder)
    fairseqs = SequenceGenerator([model], dictionary, beam_size=1, max_len_a=max_len_a, max_len_b=max_len_b, min_len=0)
    before_each()
    expected = [h[0]["tokens"].tolist() for h in fairseqs.generate([model], sample)]
    before_each()
    assert greedy_hypotheses(ours, [model], sample) == expected, (max_len_a, max_len_b)
    return {len(h) for h in expected}
