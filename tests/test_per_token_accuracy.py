"""Per-token accuracy as Delétang et al. (ICLR 2023) score: position i of the output against
position i of the target, on hand-made outputs; the Tally's sums; the mean over test lengths."""

import pytest

from fairseq_monoattn.metrics import Tally, aligned_matches, mean_per_token_accuracy, per_token_accuracy

EOS = 2
TARGET = [5, 6, 7, 8, EOS]  # four tokens and the EOS

# output: (matches, target positions, EOS at the target's EOS position, % without EOS, % with EOS)
CASES = [
    ([5, 6, 7, 8, EOS], (4, 4, True), 100.0, 100.0),  # exact
    ([5, 9, 7, 8, EOS], (3, 4, True), 75.0, 80.0),  # one token wrong
    ([5, 6, EOS], (2, 4, False), 50.0, 40.0),  # cut short: the missing positions are wrong
    ([6, 7, 8, EOS], (0, 4, False), 0.0, 0.0),  # shifted by one: no alignment, every position wrong
    ([5, 6, 7, 8, 8, 8, EOS], (4, 4, False), 100.0, 80.0),  # overran: extra tokens not counted, EOS late
    ([1, 1, 1, 1, EOS], (0, 4, True), 0.0, 20.0),  # every token wrong, but the EOS in place
    ([EOS], (0, 4, False), 0.0, 0.0),  # stopped at once
    ([5, 6, 7, 8, 9, 9, 9, 9], (4, 4, False), 100.0, 80.0),  # never stopped (no EOS at all)
]


@pytest.mark.parametrize("output, aligned, without_eos, with_eos", CASES)
def test_per_token_accuracy_on_hand_made_outputs(output, aligned, without_eos, with_eos):
    assert aligned_matches(output, TARGET, EOS) == aligned
    assert per_token_accuracy(output, TARGET, EOS) == pytest.approx(without_eos)
    assert per_token_accuracy(output, TARGET, EOS, with_eos=True) == pytest.approx(with_eos)


def test_binary_addition_example_of_the_original():
    """4 + 22 = 26: target 0 1 0 1 1 and the termination token (here EOS); an output that gets the
    bits right but stops one bit early scores 4 of 6 positions with the termination counted."""
    zero, one = 4, 5
    target = [zero, one, zero, one, one, EOS]
    output = [zero, one, zero, one, EOS]
    assert per_token_accuracy(output, target, EOS) == pytest.approx(80.0)
    assert per_token_accuracy(output, target, EOS, with_eos=True) == pytest.approx(100 * 4 / 6)


def test_empty_target_without_eos_has_nothing_to_score():
    assert per_token_accuracy([EOS], [EOS], EOS, with_eos=True) == 100.0
    with pytest.raises(ValueError, match="no positions"):
        per_token_accuracy([EOS], [EOS], EOS)


def test_tally_pools_the_positions_of_a_split():
    """The split's value is its right positions over all its positions (a long target weighs
    more), and batches add up to the same sums as one batch."""
    outputs = [case[0] for case in CASES]
    whole = Tally()
    whole.add(outputs, [TARGET] * len(outputs), EOS)
    assert (whole.target_tokens, whole.tokens_right, whole.eos_right) == (32, 17, 3)
    assert whole.per_token_accuracy == pytest.approx(100 * 17 / 32)
    assert whole.per_token_accuracy_with_eos == pytest.approx(100 * 20 / 40)
    halves = Tally()
    halves.add(outputs[:3], [TARGET] * 3, EOS)
    halves.add(outputs[3:], [TARGET] * 5, EOS)
    assert halves == whole
    short_target = [5, EOS]
    mixed = Tally()
    mixed.add([[5, EOS], [6, 7, 8, EOS]], [short_target, TARGET], EOS)
    assert mixed.per_token_accuracy == pytest.approx(100 * 1 / 5)  # pooled: 1 of 5 positions, not (100 + 0) / 2
    written = whole.as_dict()
    assert written["per_token_accuracy"] == whole.per_token_accuracy
    assert written["per_token_accuracy_with_eos"] == whole.per_token_accuracy_with_eos
    assert (written["size"], written["correct"]) == (8, 1)  # the other counts are unchanged


def test_empty_tally_scores_zero():
    assert Tally().per_token_accuracy == 0.0 and Tally().per_token_accuracy_with_eos == 0.0


def test_mean_over_test_lengths_weighs_each_length_equally():
    scores = {
        "test50": {"per_token_accuracy": 90.0, "per_token_accuracy_with_eos": 91.0, "size": 100},
        "test100": {"per_token_accuracy": 60.0, "per_token_accuracy_with_eos": 64.0, "size": 10},
        "valid": {"per_token_accuracy": 100.0, "per_token_accuracy_with_eos": 100.0},
    }
    assert mean_per_token_accuracy(scores, ["test50", "test100"]) == pytest.approx(75.0)
    assert mean_per_token_accuracy(scores, ["test50", "test100"], with_eos=True) == pytest.approx(77.5)
    with pytest.raises(ValueError, match="split.s. test500"):
        mean_per_token_accuracy(scores, ["test50", "test500"])
    with pytest.raises(ValueError, match="no splits"):
        mean_per_token_accuracy(scores, [])
    # told each target's length: the scorer's length_oracle_ scores; a record without them is no number
    with pytest.raises(ValueError, match="no length_oracle_per_token_accuracy for split.s. test50, test100"):
        mean_per_token_accuracy(scores, ["test50", "test100"], told=True)
    scores["test50"].update(length_oracle_per_token_accuracy=98.0, length_oracle_per_token_accuracy_with_eos=99.0)
    scores["test100"].update(length_oracle_per_token_accuracy=70.0, length_oracle_per_token_accuracy_with_eos=72.0)
    assert mean_per_token_accuracy(scores, ["test50", "test100"], told=True) == pytest.approx(84.0)
    assert mean_per_token_accuracy(scores, ["test50", "test100"], with_eos=True, told=True) == pytest.approx(85.5)
