"""Builders only the plugin's own tests use; the ones an extension's tests need too (a digit
dictionary, models by preset name, batches, the model checks) are fairseq_monoattn.testing."""

import torch
from fairseq.sequence_generator import SequenceGenerator

import fairseq_monoattn  # noqa: F401  (registers the architectures)
from fairseq_monoattn.metrics import GreedyDecoder, greedy_generator, greedy_hypotheses
from fairseq_monoattn.models.presets import PRESETS
from fairseq_monoattn.modules import LocationAttention
from fairseq_monoattn.registry import NORMALIZATIONS, REFERENCES, STEP_ACTIVATIONS

ALL_ARCHS = ["gru_seq2seq"] + list(PRESETS)
# the devices a test that takes one runs on: the CPU always, the GPU where torch sees one
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
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


def random_digits(generator, count, low, high):
    lengths = torch.randint(low, high + 1, (count,), generator=generator).tolist()
    return [[str(d) for d in torch.randint(0, 10, (n,), generator=generator).tolist()] for n in lengths]


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
