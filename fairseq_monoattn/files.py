"""Files written whole or not at all: the content goes to a temporary sibling (same folder, so
the rename is atomic) that replaces the target only once it is complete; a reader never sees half
a file, and a write that fails or is killed leaves the old file as it was."""

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Union


@contextmanager
def atomic_output(path: Union[str, Path], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write to; on leaving the block without an
    error it replaces ``path``, otherwise it is removed.  ``suffix`` ends the temporary name
    for writers that choose the format by extension (e.g. ``.png``).  The name holds the process
    id, so two processes writing the same file never write into each other's temporary file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.tmp{os.getpid()}{suffix}")
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()


def write_json_atomic(path: Union[str, Path], value) -> None:
    """``value`` as indented JSON, written whole or not at all."""
    with atomic_output(path) as temporary:
        temporary.write_text(json.dumps(value, indent=2) + "\n")
