"""One check for every option that takes one of a few named values."""

from typing import Iterable


def check_choice(option: str, value, choices: Iterable[str]) -> None:
    """Raise a ValueError naming the command-line option ``--option`` unless ``value`` is one of
    ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"--{option} must be one of {', '.join(choices)}, got {value!r}")
