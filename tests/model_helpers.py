"""Small builders shared by the model tests: a digit dictionary, models by preset name,
and left-padded batches made the way fairseq's translation task makes them."""
import argparse

import torch
from fairseq.data import Dictionary, data_utils
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

import fairseq_monoattn  # noqa: F401  (registers the architectures)
from fairseq_monoattn.models.presets import PRESETS
from fairseq_monoattn.modules import LocationAttention
from fairseq_monoattn.registry import NORMALIZATIONS, REFERENCES, STEP_ACTIVATIONS

ALL_ARCHS = ["gru_seq2seq"] + list(PRESETS)
LOCATION_ARCHS = [name for name in PRESETS if PRESETS[name].get("location_attention")]


def location_attention(reference="previous", step_activation="sigmoid", location_normalization="softmax",
                       clamp_slope=None, sigma_min=0.27, **settings):
    """A LocationAttention from registry names (``settings``: the entries' own options)."""
    return LocationAttention(REFERENCES.build(reference, settings), STEP_ACTIVATIONS.build(step_activation, settings),
                             NORMALIZATIONS.build(location_normalization, settings), sigma_min=sigma_min,
                             clamp_slope=clamp_slope)


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
