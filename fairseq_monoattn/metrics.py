"""Sequence accuracy and edit distance: one definition for validation, scoring and tests.

Exact match: the whole output, EOS included, equals the target (no oracle length, no
truncation).  Edit distance: the Levenshtein distance between output and target tokens (EOS
excluded; unit costs, no transpositions), the value NLTK's ``edit_distance`` gives, as in the
paper's appendix.  Per-token accuracy: the share of the target's positions where the output has
the target's token, as Delétang et al. (ICLR 2023) score their benchmark (see
:func:`aligned_matches`).
"""

from dataclasses import asdict, dataclass
from typing import Dict, Hashable, List, Mapping, Optional, Sequence, Tuple

import torch


def strip_pad_rows(tokens: torch.Tensor, pad: int) -> List[List[int]]:
    """Every row of a batch (B, T) without its padding, wherever it is, as lists of token ids: one
    conversion of the whole batch (a validation batch of 256 rows indexed row by row makes 256
    indexing calls)."""
    return [[token for token in row if token != pad] for row in tokens.tolist()]


def is_exact_match(hypothesis: Sequence[int], target: Sequence[int]) -> bool:
    return list(hypothesis) == list(target)


def levenshtein(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Levenshtein distance (insert, delete, substitute, each costing 1) in O(len(b)) steps on
    bit vectors of len(a) bits (Myers 1999, in Hyyro's 2001 form), instead of the len(a) x len(b)
    table, so long outputs are compared quickly.

    Column j of the table D[i][j] (distance of a[:i] and b[:j]) is kept as its vertical steps
    D[i][j] - D[i-1][j] in {+1, 0, -1}: bit i of ``plus``/``minus`` is set where the step is
    +1/-1.  ``distance`` follows the last row, D[len(a)][j]."""
    if len(a) > len(b):
        a, b = b, a
    if not a:
        return len(b)
    occurs = {}  # token -> bit i set where a[i] == token
    for i, token in enumerate(a):
        occurs[token] = occurs.get(token, 0) | (1 << i)
    mask, last_row = (1 << len(a)) - 1, 1 << (len(a) - 1)
    plus, minus, distance = mask, 0, len(a)  # first column: D[i][0] = i, every step +1
    for token in b:
        match = occurs.get(token, 0)
        vertical_change = match | minus
        # horizontal steps D[i][j] - D[i][j-1]: the carry of (match & plus) + plus runs along the
        # diagonals where a match lets the distance stay put
        horizontal_change = ((((match & plus) + plus) ^ plus) | match) & mask
        h_plus = (minus | ~(horizontal_change | plus)) & mask
        h_minus = plus & horizontal_change
        if h_plus & last_row:
            distance += 1
        elif h_minus & last_row:
            distance -= 1
        # shift the horizontal steps down one row; row 0 (D[0][j] = j) always steps +1
        h_plus = ((h_plus << 1) | 1) & mask
        h_minus = (h_minus << 1) & mask
        plus = (h_minus | ~(vertical_change | h_plus)) & mask
        minus = h_plus & vertical_change
    return distance


def without_eos(tokens: Sequence[int], eos: int) -> List[int]:
    tokens = list(tokens)
    return tokens[:-1] if tokens and tokens[-1] == eos else tokens


def edit_distance(hypothesis: Sequence[int], target: Sequence[int], eos: int) -> int:
    return levenshtein(without_eos(hypothesis, eos), without_eos(target, eos))


def is_cut_short(hypothesis: Sequence[int], target: Sequence[int], eos: int) -> bool:
    """Every token of the output right but its EOS too early: the output (EOS excluded) is a
    proper prefix of the target's tokens."""
    output, wanted = without_eos(hypothesis, eos), without_eos(target, eos)
    return len(output) < len(wanted) and wanted[: len(output)] == output


def gives_the_whole_target(hypothesis: Sequence[int], target: Sequence[int], eos: int) -> bool:
    """The target's tokens (EOS excluded) begin the output: an exact match, or an output that
    gives the whole target and goes on (or never writes EOS)."""
    wanted = without_eos(target, eos)
    return without_eos(hypothesis, eos)[: len(wanted)] == wanted


# --- per-token accuracy (Delétang et al., ICLR 2023) -------------------------------------------


def aligned_matches(hypothesis: Sequence[int], target: Sequence[int], eos: int) -> Tuple[int, int, bool]:
    """One output against its target, position by position as Delétang et al. score: (how many
    of the target's positions, EOS excluded, hold the target's token in the output; how many
    positions the target has; whether the output's EOS stands where the target's does).

    Their models write exactly as many tokens as the answer has, so their accuracy compares
    position i with position i.  An output of another length is compared the same way, with no
    alignment: positions past its end are wrong, tokens past the target's end are not counted
    (exact match and edit distance see them).  The original's tasks whose answers vary in length
    (Binary Addition) end the answer with a termination token and count its position too; the EOS
    is that token here (``with_eos`` below)."""
    output, wanted = without_eos(hypothesis, eos), without_eos(target, eos)
    matches = sum(a == b for a, b in zip(output, wanted))
    eos_placed = len(hypothesis) > len(wanted) and hypothesis[len(wanted)] == eos
    return matches, len(wanted), eos_placed


def per_token_accuracy(hypothesis: Sequence[int], target: Sequence[int], eos: int, with_eos: bool = False) -> float:
    """Percentage of the target's positions (and, ``with_eos``, its EOS's position) that the output
    gets right (:func:`aligned_matches`)."""
    matches, positions, eos_placed = aligned_matches(hypothesis, target, eos)
    if with_eos:
        matches, positions = matches + eos_placed, positions + 1
    if positions == 0:
        raise ValueError("per-token accuracy of an empty target without its EOS has no positions to score")
    return 100.0 * matches / positions


def mean_per_token_accuracy(
    scores: Mapping[str, Mapping[str, float]], splits: Sequence[str], with_eos=False, told=False
) -> float:
    """Delétang et al.'s score: per-token accuracy per test length, averaged over the lengths with
    equal weight.  ``scores``: the per-split results of a scoring run (``Tally.as_dict()`` of each
    split, as ``fairseq-monoattn-score`` writes them), one split per length; ``told``: of the
    outputs told each target's length (the scorer's ``length_oracle_`` scores)."""
    key = ("length_oracle_" if told else "") + ("per_token_accuracy_with_eos" if with_eos else "per_token_accuracy")
    if not splits:
        raise ValueError("no splits to average over")
    missing = [split for split in splits if key not in scores.get(split, {})]
    if missing:
        raise ValueError(f"no {key} for split(s) {', '.join(missing)}")
    return sum(scores[split][key] for split in splits) / len(splits)


def greedy_generator(models, target_dictionary, max_len_a: float = 0.0, max_len_b: int = 200):
    """Plain greedy decoding: beam 1 and no minimum length (EOS may come first; fairseq's default
    min_len=1 would forbid it).  The output is cut at max_len_a * source length + max_len_b
    tokens (then EOS is forced).  One model of this plugin decodes with :class:`GreedyDecoder`
    (the tokens fairseq's SequenceGenerator gives, at a fraction of its cost); anything else with
    fairseq's SequenceGenerator."""
    if len(models) == 1 and getattr(models[0].decoder, "decodes_greedily", False):
        return GreedyDecoder(target_dictionary, max_len_a=max_len_a, max_len_b=max_len_b)
    from fairseq.sequence_generator import SequenceGenerator

    return SequenceGenerator(
        models, target_dictionary, beam_size=1, max_len_a=max_len_a, max_len_b=max_len_b, min_len=0
    )


def output_length_limit(generator, models, src_tokens: torch.Tensor) -> int:
    """The most tokens before EOS that ``generator`` (fairseq's SequenceGenerator or
    :class:`GreedyDecoder`) lets ``models`` write for a batch of sources: max_len_a times the
    padded source width (EOS included), plus max_len_b, within the decoders' positions."""
    limit = int(generator.max_len_a * src_tokens.size(1) + generator.max_len_b)
    return min(limit, min(model.max_decoder_positions() for model in models) - 1)


def told_length_generator(models, target_dictionary, length: int):
    """fairseq's SequenceGenerator, beam 1, told the output's length: ``length`` tokens (EOS
    forbidden before them) and then EOS, for the models :class:`GreedyDecoder` does not decode
    (which is told a length per example instead)."""
    from fairseq.sequence_generator import SequenceGenerator

    return SequenceGenerator(models, target_dictionary, beam_size=1, max_len_a=0, max_len_b=length, min_len=length)


class GreedyDecoder:
    """Greedy decoding as fairseq's SequenceGenerator does it with beam 1 and min_len 0: the
    first input is </s>; each step takes the most probable token (never <pad>); a sentence ends at
    its first </s>, and at the length limit max_len_a * (padded source width) + max_len_b the </s>
    is forced; finished sentences leave the batch.  Without a beam there is nothing else to keep:
    no scores, no candidates, no reordering but the one that drops finished sentences."""

    def __init__(self, target_dictionary, max_len_a: float = 0.0, max_len_b: int = 200):
        self.pad, self.eos = target_dictionary.pad(), target_dictionary.eos()
        self.max_len_a, self.max_len_b = max_len_a, max_len_b

    def max_length(self, model, src_tokens: torch.Tensor) -> int:
        return output_length_limit(self, [model], src_tokens)

    @torch.no_grad()
    def generate(self, models, sample, encoder_out=None) -> List[List[int]]:
        """The outputs of the batch; ``encoder_out``: the model's encoder output for this batch's
        sources if the caller has it already (in evaluation mode), else it is computed here."""
        return self.decode(models, sample, encoder_out).hypotheses

    @torch.no_grad()
    def decode(
        self,
        models,
        sample,
        encoder_out=None,
        attention_peaks: bool = False,
        logits: bool = False,
        output_lengths: Optional[torch.Tensor] = None,
    ) -> "GreedyOutput":
        """The outputs of the batch, with the direction gate of each example (the decoder's
        ``extra["direction"]`` at the first step, or None) and, with ``attention_peaks``, how sharp
        each example's attention was on its own output, with ``logits`` the decoder's output at
        each example's steps (see :class:`GreedyOutput`).  ``output_lengths`` (B,): decode told
        each example's length, the oracle of Newman et al. (2020): EOS is never chosen before that
        many tokens and is forced after them."""
        (model,) = models
        net_input = sample["net_input"]
        src_tokens = net_input["src_tokens"]
        batch = src_tokens.size(0)
        max_len = self.max_length(model, src_tokens)
        if output_lengths is not None and int(output_lengths.max()) > max_len:
            raise ValueError(f"output_lengths: {int(output_lengths.max())} tokens past the length limit {max_len}")
        if encoder_out is None:
            encoder_out = model.encoder(src_tokens, net_input.get("src_lengths"))
        incremental_state: Dict[str, Dict[str, Optional[torch.Tensor]]] = {}
        tokens = src_tokens.new_full((batch, max_len + 2), self.pad)
        tokens[:, 0] = self.eos
        active = torch.arange(batch, device=src_tokens.device)
        outputs: List[List[int]] = [[] for _ in range(batch)]
        direction = peak_sums = step_logits = None
        for step in range(max_len + 1):
            output, extra = model.decoder(tokens[active, : step + 1], encoder_out=encoder_out,
                                          incremental_state=incremental_state)  # fmt: skip
            extra = extra if isinstance(extra, dict) else {}
            if step == 0:
                direction = extra.get("direction")
            if attention_peaks and extra.get("attention") is not None:
                weights = extra["attention"][:, -1]  # (active, n + 2): this step's weights
                if peak_sums is None:
                    peak_sums = weights.new_zeros(batch)
                peak_sums[active] += weights.max(dim=-1).values  # max_i a_ti, summed over the steps
            if logits:
                if step_logits is None:
                    step_logits = output.new_zeros(batch, max_len + 1, output.size(-1))
                step_logits[active, step] = output[:, -1]
            lprobs = model.get_normalized_probs((output[:, -1:], None), log_probs=True)[:, -1]
            if step >= max_len:
                chosen = torch.full_like(active, self.eos)
            else:
                lprobs[:, self.pad] = float("-inf")
                if output_lengths is not None:  # told the length: no EOS before it
                    lprobs[:, self.eos].masked_fill_(output_lengths[active] > step, float("-inf"))
                chosen = lprobs.argmax(dim=-1)
            if output_lengths is not None:  # and EOS at it
                chosen = chosen.masked_fill(output_lengths[active] <= step, self.eos)
            tokens[active, step + 1] = chosen
            finished = chosen.eq(self.eos)
            for row in active[finished].tolist():
                outputs[row] = tokens[row, 1 : step + 2].tolist()
            if bool(finished.all()):
                break
            if bool(finished.any()):
                keep = (~finished).nonzero().squeeze(1)
                active = active[keep]
                model.decoder.reorder_incremental_state_scripting(incremental_state, keep)
                encoder_out = model.encoder.reorder_encoder_out(encoder_out, keep)
        peaks = None
        if peak_sums is not None:  # each example took one step per output token
            peaks = peak_sums / peak_sums.new_tensor([len(output) for output in outputs])
        if step_logits is not None:
            step_logits = step_logits[:, : step + 1]
        return GreedyOutput(outputs, direction, peaks, step_logits)


@dataclass
class GreedyOutput:
    """What :meth:`GreedyDecoder.decode` gives for a batch: ``hypotheses``, each example's
    output (EOS included); ``direction``, the direction gate g (B,) or None (no gate); and
    ``attention_peaks`` (B,), the mean over an example's output steps of max_i a_ti, the largest
    weight a step put on one source position, or None (not asked for, or a decoder that returns no
    weights).  Where an output equals its target, its steps were the teacher-forced steps on the
    target, so this is the target's peak too (to float rounding).  ``logits`` (B, steps, V), when
    asked for: the decoder's output at each of an example's steps, zeros after its last; where an
    output equals its target, these are the teacher-forced pass's logits on the target (to float
    rounding)."""

    hypotheses: List[List[int]]
    direction: Optional[torch.Tensor]
    attention_peaks: Optional[torch.Tensor]
    logits: Optional[torch.Tensor] = None


def wrong_rows(hypotheses, target: torch.Tensor, pad: int) -> torch.Tensor:
    """The rows of a batch whose output in ``hypotheses`` is not its target (a row of ``target``
    without its padding, EOS included), as indices on ``target``'s device."""
    targets = strip_pad_rows(target, pad)
    wrong = [row for row, (h, t) in enumerate(zip(hypotheses, targets)) if not is_exact_match(h, t)]
    return torch.tensor(wrong, dtype=torch.long, device=target.device)


def teacher_forced_rows(model, sample, encoder_out, rows: torch.Tensor):
    """The decoder's teacher-forced pass, (output, extra), over the examples ``rows`` of a batch
    whose encoder output ``encoder_out`` is at hand: the encoder does not run again."""
    net_input = sample["net_input"]
    return model.decoder(
        net_input["prev_output_tokens"].index_select(0, rows),
        encoder_out=model.encoder.reorder_encoder_out(encoder_out, rows),
        src_lengths=net_input["src_lengths"].index_select(0, rows),
    )


def greedy_hypotheses(generator, models, sample, encoder_out=None) -> List[List[int]]:
    """The best hypothesis of every example of a batch, in the batch's order (EOS included
    when the model emitted one; a hypothesis cut at the length limit ends with the EOS the
    generator forces, which makes it longer than any target it was allowed for).
    ``encoder_out``: the single model's encoder output for the batch, when the caller has it
    (the plugin's ``GreedyDecoder`` uses it; fairseq's generator computes its own)."""
    if isinstance(generator, GreedyDecoder):
        return generator.generate(models, sample, encoder_out=encoder_out)
    hypos = generator.generate(models, sample)
    return [h[0]["tokens"].tolist() for h in hypos]


@dataclass
class Tally:
    """Sums, so that counts from batches and workers add up exactly.

    Two kinds of wrong output are counted apart, because they tell a stopping failure from a
    reading failure: ``cut_short``, every token right but EOS too early (the output is a
    proper prefix of the target), and ``overran``, the whole target and then more tokens, or
    no EOS at all (the target is a prefix of the output)."""

    size: int = 0
    correct: int = 0
    edit_distance: int = 0
    cut_short: int = 0
    overran: int = 0
    # per-token accuracy (aligned_matches): the targets' positions (EOS excluded), how many of
    # them the outputs got right, and how many outputs put their EOS at the target's
    target_tokens: int = 0
    tokens_right: int = 0
    eos_right: int = 0

    def add(self, hypotheses, targets, eos: int):
        for hypothesis, target in zip(hypotheses, targets):
            self.size += 1
            matches, positions, eos_placed = aligned_matches(hypothesis, target, eos)
            self.target_tokens += positions
            self.tokens_right += matches
            self.eos_right += eos_placed
            if is_exact_match(hypothesis, target):
                self.correct += 1  # and edit distance 0
                continue
            output, wanted = without_eos(hypothesis, eos), without_eos(target, eos)
            self.edit_distance += levenshtein(output, wanted)
            if is_cut_short(hypothesis, target, eos):
                self.cut_short += 1
            elif gives_the_whole_target(hypothesis, target, eos):
                self.overran += 1

    @property
    def accuracy(self) -> float:
        return 100.0 * self.correct / self.size if self.size else 0.0

    @property
    def mean_edit_distance(self) -> float:
        return self.edit_distance / self.size if self.size else 0.0

    @property
    def per_token_accuracy(self) -> float:
        """Percentage of all the targets' positions (EOS excluded) the outputs got right."""
        return 100.0 * self.tokens_right / self.target_tokens if self.target_tokens else 0.0

    @property
    def per_token_accuracy_with_eos(self) -> float:
        """The same with each target's EOS position counted (Delétang et al.'s termination token)."""
        positions = self.target_tokens + self.size
        return 100.0 * (self.tokens_right + self.eos_right) / positions if positions else 0.0

    def as_dict(self) -> Dict[str, float]:
        return dict(
            asdict(self),
            accuracy=self.accuracy,
            mean_edit_distance=self.mean_edit_distance,
            per_token_accuracy=self.per_token_accuracy,
            per_token_accuracy_with_eos=self.per_token_accuracy_with_eos,
        )


def summed_ratio(meters, numerator: str, denominator: str, scale: float = 1.0) -> float:
    """scale * sum(numerator) / sum(denominator) over fairseq meters of summed counts,
    rounded to 3 decimals as fairseq logs; NaN before anything was counted."""
    total = meters[denominator].sum
    return round(scale * meters[numerator].sum / total, 3) if total > 0 else float("nan")
