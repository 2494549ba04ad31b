"""Checks for a model or an attention entry of your own, the ones the plugin's tests run on its own.

Import it in your tests (``from fairseq_monoattn.testing import ...``); importing the plugin does
not import it.  It needs no test framework: a check that fails raises ``AssertionError`` with a
message saying what differed, which pytest, unittest or a plain script all report.

- Models: :func:`digit_dictionary`, :func:`build` (a model of any registered architecture or
  preset, in eval mode), :func:`batch` (a sample as fairseq's translation task makes it),
  :func:`teacher_forced_scores`, and the model checks :func:`assert_incremental_equals_full`
  and :func:`assert_padding_invariant`.
- Scorers: :func:`assert_scorer_steps_match_all` (``forward`` step by step against
  ``forward_all``).
- Position schemes of the Transformer models: :func:`assert_position_scheme_contract` (the model
  checks above on a Transformer with the scheme, alone and randomized).
- Float rounding: :func:`rounding_tolerance` and :func:`assert_same_up_to_rounding`.

How far two code paths that compute one function may differ is stated once, here.  Two paths that
compute the same function in another order (a fused C++ loop against per-step code, torch's
``_foreach`` kernels against a loop over tensors, one BLAS blocking against another) give the same
numbers only up to rounding: which vector unit, which BLAS kernel and which libm a CPU has decides
the order of the additions and whether a multiply-add is fused.  So no check here asserts bit
equality between two paths; bit equality is kept for one path run twice (determinism, resuming).
The bound: every rounding is at most ``eps`` (the dtype's machine epsilon) relative, a value
compared is made of a few thousand roundings at most (sums over hidden units and positions, steps
feeding the next), and the differences do not all add up in one direction.  ``ROUNDING_ULPS``
epsilons relative to the largest magnitude compared (at least 1) covers that with room, and is
still orders of magnitude below the differences a real error makes (a missing term, a wrong
gradient: 1e-3 and more).  In float64 it is 2.3e-13, in float32 1.2e-4.
"""

import argparse
from typing import List, Optional, Sequence

import torch
from fairseq.data import Dictionary, data_utils
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
from fairseq.sequence_generator import SequenceGenerator

from .registry import Scorer

__all__ = [
    "REFERENCE_ERROR_FACTOR",
    "ROUNDING_ULPS",
    "assert_incremental_equals_full",
    "assert_padding_invariant",
    "assert_position_scheme_contract",
    "assert_same_up_to_rounding",
    "assert_scorer_steps_match_all",
    "batch",
    "build",
    "digit_dictionary",
    "encode",
    "rounding_tolerance",
    "teacher_forced_scores",
]

ROUNDING_ULPS = 1024
# with a float64 reference, two paths may differ by this many times the error of the one compared against
REFERENCE_ERROR_FACTOR = 4


# --- float rounding -----------------------------------------------------------------------------


def rounding_tolerance(dtype: torch.dtype, scale: float = 1.0) -> float:
    """The largest difference two paths may show on values of magnitude ``scale`` (at least 1)."""
    return ROUNDING_ULPS * torch.finfo(dtype).eps * max(1.0, float(scale))


def assert_same_up_to_rounding(
    got: torch.Tensor, want: torch.Tensor, where: str = "", reference: Optional[torch.Tensor] = None
) -> None:
    """Assert that ``got`` and ``want`` have one shape and dtype, infinities and NaNs at the same
    places (the same infinities: masks), and finite values that differ by at most
    :func:`rounding_tolerance` of the largest finite magnitude of ``want``.  ``where`` starts the
    message.

    ``reference`` is the same function computed in float64 from the same inputs.  Where it is
    given, the bound also admits :data:`REFERENCE_ERROR_FACTOR` times the error ``want`` makes
    against it: a long recurrence in float32 can lose more than a fixed number of epsilons, and how
    many depends on the CPU's order of additions, so the error of one path measures the rounding
    the function itself amplifies."""
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"{where}: got {tuple(got.shape)} {got.dtype}, want {tuple(want.shape)} {want.dtype}")
    if reference is not None and reference.shape != want.shape:
        raise AssertionError(f"{where}: the reference is {tuple(reference.shape)}, want {tuple(want.shape)}")
    if want.numel() == 0:
        return
    finite = want.isfinite()
    if not torch.equal(got.isfinite(), finite):
        raise AssertionError(f"{where}: the finite values are at other places")
    if not torch.equal(got[~finite], want[~finite]):
        raise AssertionError(f"{where}: other infinities (or NaNs) at the same places")
    got, want = got[finite], want[finite]
    if want.numel() == 0:
        return
    tolerance = rounding_tolerance(want.dtype, want.abs().max().item())
    if reference is not None:
        error = (want.double() - reference[finite].double()).abs().max().item()
        tolerance = max(tolerance, REFERENCE_ERROR_FACTOR * error)
    difference = (got - want).abs().max().item()
    if not difference <= tolerance:
        raise AssertionError(f"{where}: the paths differ by {difference:.3g} > {tolerance:.3g}")


# --- models -------------------------------------------------------------------------------------


def digit_dictionary() -> Dictionary:
    """A fairseq dictionary of the ten digits (and fairseq's special symbols)."""
    d = Dictionary()
    for c in "0123456789":
        d.add_symbol(c)
    return d


class _Task:
    def __init__(self, dictionary):
        self.source_dictionary = dictionary
        self.target_dictionary = dictionary


def build(arch: str, dictionary: Optional[Dictionary] = None, seed: int = 0, **overrides):
    """A model of the registered architecture or preset ``arch`` (yours too, once your package is
    imported), its options the architecture's defaults but for ``overrides`` (``step_activation=
    "tanh"``, ``tanh_step_scale=2.0``), weights drawn from ``seed``, in eval mode."""
    dictionary = dictionary or digit_dictionary()
    args = argparse.Namespace(arch=arch, **overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(seed)
    model = ARCH_MODEL_REGISTRY[arch].build_model(args, _Task(dictionary))
    return model.eval()


def encode(dictionary: Dictionary, sequences: Sequence[Sequence[str]]) -> List[torch.Tensor]:
    """Token lists -> list of 1-D tensors ending in EOS."""
    return [torch.tensor([dictionary.index(t) for t in seq] + [dictionary.eos()]) for seq in sequences]


def batch(dictionary: Dictionary, sources, targets=None) -> dict:
    """A fairseq-style sample of token lists (``[list("314"), list("27")]``): left-padded sources,
    and with ``targets`` right-padded targets and the previous output tokens."""
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


def teacher_forced_scores(model, dictionary: Dictionary, src_tokens: torch.Tensor, tokens: torch.Tensor):
    """log p(token_t | tokens_<t, source) from one full (non-incremental) pass of one example
    (``src_tokens`` (1, S) unpadded, ``tokens`` 1-D ending in EOS, both on the model's device)."""
    prev = torch.cat([tokens.new_tensor([dictionary.eos()]), tokens[:-1]]).unsqueeze(0)
    logits, _ = model(src_tokens, src_tokens.new_tensor([src_tokens.size(1)]), prev)
    lprobs = model.get_normalized_probs((logits, None), log_probs=True)
    return lprobs[0].gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def assert_incremental_equals_full(model, dictionary: Dictionary, sources, beam: int, max_len_b: int = 25) -> None:
    """Assert that fairseq's generator (incremental state, beam reordering) scores each of the best
    three hypotheses of every source as one full teacher-forced pass of its example alone does
    (to 1e-5): what a decoder's incremental state or ``reorder_incremental_state`` gets wrong shows."""
    sample = batch(dictionary, sources)
    generator = SequenceGenerator([model], dictionary, beam_size=beam, max_len_b=max_len_b)
    hypos = generator.generate([model], sample)
    for i, nbest in enumerate(hypos):
        src = sample["net_input"]["src_tokens"][i : i + 1]
        src = src[src.ne(dictionary.pad())].unsqueeze(0)  # the example alone, unpadded
        for rank, hypo in enumerate(nbest[:3]):
            full = teacher_forced_scores(model, dictionary, src, hypo["tokens"])
            if not torch.allclose(full, hypo["positional_scores"], atol=1e-5):
                difference = (full - hypo["positional_scores"]).abs().max().item()
                raise AssertionError(
                    f"beam {beam}, source {i}, hypothesis {rank}: incremental decoding scores differ "
                    f"from a full pass by {difference:.3g}"
                )


def assert_padding_invariant(model, dictionary: Dictionary, sources, atol: float = 1e-5) -> None:
    """Assert that every source decodes alone as in a batch with longer and shorter ones (beam 3):
    the same hypotheses, their scores to ``atol``; and that its teacher-forced logits (the target
    the source reversed) are the same alone as in the batch, to ``atol``."""
    generator = SequenceGenerator([model], dictionary, beam_size=3, max_len_b=40)
    together = generator.generate([model], batch(dictionary, sources))
    for i, source in enumerate(sources):
        alone = generator.generate([model], batch(dictionary, [source]))[0]
        for rank, (a, b) in enumerate(zip(alone, together[i])):
            if not torch.equal(a["tokens"], b["tokens"]):
                raise AssertionError(f"source {i}, hypothesis {rank}: other tokens alone than in a padded batch")
            if not torch.allclose(a["positional_scores"], b["positional_scores"], atol=atol):
                raise AssertionError(f"source {i}, hypothesis {rank}: other scores alone than in a padded batch")
    targets = [s[::-1] for s in sources]
    full = batch(dictionary, sources, targets)
    logits, _ = model(**full["net_input"])
    for i, (source, target) in enumerate(zip(sources, targets)):
        one = batch(dictionary, [source], [target])
        alone, _ = model(**one["net_input"])
        if not torch.allclose(alone[0], logits[i, : len(target) + 1], atol=atol):
            raise AssertionError(f"source {i}: other teacher-forced logits alone than in a padded batch")


# --- scorers ------------------------------------------------------------------------------------


def assert_scorer_steps_match_all(
    scorer: Scorer,
    batch_size: int = 3,
    source_length: int = 7,
    steps: int = 5,
    first_step: int = 1,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
) -> None:
    """Assert that a scorer's ``forward``, one decoder step at a time (as a GRU decoder and
    incremental decoding call it), gives (B, S) scores, and that ``forward_all`` (as a Transformer
    decoder calls it, every step at once) gives the same scores to float rounding, on random keys
    and queries of the scorer's ``dim`` drawn from ``seed``, steps ``first_step`` to ``first_step +
    steps - 1``.  The scorer runs in ``dtype`` (its parameters are converted in place)."""
    generator = torch.Generator().manual_seed(seed)
    scorer = scorer.to(dtype)
    keys = torch.randn(batch_size, source_length, scorer.dim, generator=generator, dtype=dtype)
    queries = torch.randn(batch_size, steps, scorer.dim, generator=generator, dtype=dtype)
    with torch.no_grad():
        memory = scorer.prepare(keys)
        one_by_one = []
        for t in range(steps):
            scores = scorer(queries[:, t], memory, first_step + t)
            if tuple(scores.shape) != (batch_size, source_length):
                raise AssertionError(
                    f"{type(scorer).__name__}.forward gave scores of shape {tuple(scores.shape)}, "
                    f"want (batch, source length) = {(batch_size, source_length)}"
                )
            one_by_one.append(scores)
        together = scorer.forward_all(queries, memory, first_step)
    assert_same_up_to_rounding(
        together, torch.stack(one_by_one, dim=1), f"{type(scorer).__name__}.forward_all against forward step by step"
    )


# --- position schemes ---------------------------------------------------------------------------

CONTRACT_SOURCES = [list("31415"), list("2718281828459045"), list("7"), list("12345678901234567890")]


def assert_position_scheme_contract(
    name: str, arch: str = "transformer_small", dictionary: Optional[Dictionary] = None, seed: int = 0, **options
) -> None:
    """Assert that the position scheme ``name`` (``--positions NAME``, yours too once your package is
    imported) keeps the model checks on ``arch`` with ``options``, in float64: fairseq's generator
    (beams 1 and 5) scores every hypothesis as a full pass does (:func:`assert_incremental_equals_full`),
    and every source decodes alone as in a left-padded batch (:func:`assert_padding_invariant`, to
    1e-6: fairseq's attention softmax computes in float32), the scheme alone and under
    ``randomized`` (in evaluation, the plain positions)."""
    dictionary = dictionary or digit_dictionary()
    for wrapped in ({"positions": name}, {"positions": "randomized", "randomized_base": name}):
        if name == "randomized" and "randomized_base" in wrapped:
            continue
        where = f"--positions {name}" + (" under randomized" if "randomized_base" in wrapped else "")
        model = build(arch, dictionary, seed=seed, **wrapped, **options).double()
        try:
            for beam in (1, 5):
                assert_incremental_equals_full(model, dictionary, CONTRACT_SOURCES, beam)
            assert_padding_invariant(model, dictionary, CONTRACT_SOURCES, atol=1e-6)
        except AssertionError as error:
            raise AssertionError(f"{where}: {error}") from None
