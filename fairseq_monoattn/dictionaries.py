"""Checkpoints carry the dictionaries they were trained with, and are refused on data whose
dictionaries differ: a model scored against the same symbols in another order (a separate
fairseq-preprocess run can produce one) would otherwise read every token as another and report a
wrong score without a word.

The ``length_generalization`` task stores both dictionaries' symbols in the checkpoint's task
state and compares them with its data's when a checkpoint is loaded (fairseq-generate,
fairseq-monoattn-score, resuming a training)."""

from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .errors import PluginError


class DictionaryMismatch(PluginError, ValueError):
    """The checkpoint's dictionary is not the data's; the message names the data's file and the
    first difference."""


def symbols(dictionary) -> List[str]:
    return list(dictionary.symbols)


def first_difference(trained: Sequence[str], data: Sequence[str]) -> str:
    for index, (a, b) in enumerate(zip(trained, data)):
        if a != b:
            return f"symbol {index} is {a!r} in the checkpoint and {b!r} in the data"
    longer = "the checkpoint" if len(trained) > len(data) else "the data"
    return f"{longer} has {abs(len(trained) - len(data))} more symbols ({len(trained)} against {len(data)})"


def check_dictionaries(
    trained: Dict[str, List[str]], current: Dict[str, List[str]], files: Dict[str, Optional[Path]]
) -> None:
    """Raise DictionaryMismatch unless every side's symbols (in order) are the same."""
    for side, wanted in trained.items():
        have = current.get(side)
        if have is None or list(have) == list(wanted):
            continue
        where = files.get(side) or f"the {side} dictionary"
        raise DictionaryMismatch(
            f"the checkpoint was trained with another {side} dictionary than {where}: "
            f"{first_difference(wanted, have)}; score it on the data it was trained on "
            f"(binarized with the same dict.*.txt)"
        )
