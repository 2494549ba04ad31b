"""``--criterion seq_acc``: token-level cross-entropy that also reports how often the model
gets whole sequences right under teacher forcing.

Logged values (percentages are derived from summed counts, so they are exact over any
number of batches and workers):

* ``loss``: training loss per token (per sentence with ``--sentence-avg``), base 2;
* ``nll_loss``: negative log-likelihood per target token, base 2 (equals ``loss`` when
  ``--label-smoothing`` is 0);
* ``ppl``: 2 ** nll_loss;
* ``token_acc``: percent of non-pad target tokens whose argmax is the target token;
* ``exact_match``: percent of sequences whose every target token, EOS included, is the
  argmax: teacher-forced exact match.
"""

import math
from dataclasses import dataclass, field

from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics
from omegaconf import II

from ..metrics import summed_ratio

# logging-output key -> hidden meter summed over batches (fairseq hides names starting with "_")
SUMMED_COUNTS = {
    "ntokens": "_tokens",
    "nsentences": "_sentences",
    "n_correct_tokens": "_correct_tokens",
    "n_correct_sequences": "_correct_sequences",
}
# logging-output keys of the direction gate over a validation batch's sources: sum of g, count of
# g > 0.5, count (the length_generalization task reduces them)
GATE_COUNTS = ("_gate_sum", "_gate_forward", "_gate_total")


@dataclass
class SequenceAccuracyConfig(FairseqDataclass):
    label_smoothing: float = field(
        default=0.0, metadata={"help": "epsilon for label smoothing (0 = plain cross-entropy)"}
    )
    sentence_avg: bool = II("optimization.sentence_avg")


def smoothed_nll(lprobs, target, epsilon: float, pad: int):
    """Summed losses over non-pad positions: (smoothed loss, nll).

    The smoothed target puts 1 - eps on the gold token and eps / (V - 1) on each other
    token: loss = (1 - eps) * nll + eps / (V - 1) * (sum_k -log p_k - nll).
    """
    keep = target.ne(pad)
    gold = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    nll = gold[keep].sum()
    if epsilon == 0:
        return nll, nll
    others = (-lprobs.sum(-1) - gold)[keep].sum()
    vocab = lprobs.size(-1)
    return (1 - epsilon) * nll + epsilon / (vocab - 1) * others, nll


def correct_counts(lprobs, target, pad: int):
    """(number of non-pad target tokens predicted by argmax, number of sequences with all of them)."""
    keep = target.ne(pad)
    right = lprobs.argmax(-1).eq(target) | ~keep
    return (right & keep).sum(), right.all(dim=-1).sum()


def direction_gate_counts(net_output) -> dict:
    """GATE_COUNTS of the direction gate g of the pass (the decoder's extra["direction"]): sum of g,
    count of g > 0.5, count of sources; {} without a gate.  The length_generalization task reduces
    them to direction_gate and reads_forward."""
    extra = net_output[1] if isinstance(net_output, tuple) and len(net_output) > 1 else None
    gate = extra.get("direction") if isinstance(extra, dict) else None
    if gate is None:
        return {}
    gate = gate.detach().double()
    return dict(zip(GATE_COUNTS, (gate.sum().item(), int((gate > 0.5).sum()), gate.numel())))


def scores_given_outputs(criterion) -> bool:
    """Whether validation may hand ``criterion`` a teacher-forced output it assembled
    (``score_output``) instead of calling it: a ``seq_acc`` criterion whose ``forward`` is still
    the one that runs the model and scores its output (a subclass with its own ``forward`` is
    called as fairseq calls it)."""
    return isinstance(criterion, SequenceAccuracyCriterion) and (
        type(criterion).forward is SequenceAccuracyCriterion.forward
    )


@register_criterion("seq_acc", dataclass=SequenceAccuracyConfig)
class SequenceAccuracyCriterion(FairseqCriterion):
    def __init__(self, task, sentence_avg, label_smoothing=0.0):
        super().__init__(task)
        self.sentence_avg = sentence_avg
        self.epsilon = label_smoothing

    def forward(self, model, sample, reduce=True):
        """(loss summed over tokens, gradient denominator, logging output of sums);
        the loss is always summed (``reduce`` is accepted for fairseq's signature only)."""
        return self.score_output(model, sample, model(**sample["net_input"]))

    def score_output(self, model, sample, net_output):
        """``forward``'s result for the teacher-forced output ``net_output`` of ``model`` on
        ``sample`` (logits (B, T, V), extra), however it was computed: validation assembles it from
        the greedy decoding's steps (``length_generalization``)."""
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        target = model.get_targets(sample, net_output)
        loss, nll = smoothed_nll(lprobs, target, self.epsilon, self.padding_idx)
        correct_tokens, correct_sequences = correct_counts(lprobs, target, self.padding_idx)
        nsentences = target.size(0)
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll.data,
            "ntokens": sample["ntokens"],
            "nsentences": nsentences,
            "sample_size": nsentences if self.sentence_avg else sample["ntokens"],
            "n_correct_tokens": utils.item(correct_tokens),
            "n_correct_sequences": utils.item(correct_sequences),
        }
        if not model.training:
            logging_output.update(direction_gate_counts(net_output))
        return loss, logging_output["sample_size"], logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return utils.item(sum(log.get(key, 0) for log in logging_outputs))

        ntokens, sample_size = total("ntokens"), total("sample_size")
        # base 2, as fairseq reports losses: sum / count / ln 2
        metrics.log_scalar("loss", total("loss") / sample_size / math.log(2), sample_size, round=3)
        metrics.log_scalar("nll_loss", total("nll_loss") / ntokens / math.log(2), ntokens, round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))
        for key, meter in SUMMED_COUNTS.items():
            metrics.log_scalar_sum(meter, total(key))
        # percentages: 100 * correct / total
        metrics.log_derived("token_acc", lambda m: summed_ratio(m, "_correct_tokens", "_tokens", 100.0))
        metrics.log_derived("exact_match", lambda m: summed_ratio(m, "_correct_sequences", "_sentences", 100.0))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
