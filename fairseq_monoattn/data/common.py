"""Shared vocabulary of the data-preparation package.

A *task definition* is a function ``build(seed, data_dir) -> dict[str, list[Example]]``
mapping split names (in the order they should be written) to examples.  The writer in
``writer.py`` turns that into ``raw/``, ``bin/`` and ``manifest.json``; task modules never
write files themselves.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional


@dataclass(frozen=True)
class Example:
    source: str  # space-separated tokens, no EOS
    target: str  # space-separated tokens, no EOS
    length: int  # the task's notion of "length" (e.g. number of original digits)


Splits = Dict[str, List[Example]]
TaskBuilder = Callable[[int, Optional[Path]], Splits]


class DataError(Exception):
    """Bad input data or options; the message names the file and line (or option)."""

    def __init__(self, message: str, path=None, line: Optional[int] = None):
        where = ""
        if path is not None:
            where = str(path) + (f":{line}" if line is not None else "") + ": "
        super().__init__(where + message)
        self.path = path
        self.line = line
