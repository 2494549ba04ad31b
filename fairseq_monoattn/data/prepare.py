"""Prepare one task's data: raw text, fairseq binaries and a manifest (the command is
``fairseq-monoattn-prepare``, ``cli/prepare.py``).

The default seed is 1 for every task.  Same task, seed and input data -> byte-identical
files.  An existing non-empty output folder is left alone unless ``force``.
"""

from pathlib import Path
from typing import Optional, Sequence

from ..catalog import DEFAULT_DATA_SEED as DEFAULT_SEED
from ..catalog import TASKS
from .common import DataError
from .writer import check_out_folder, write_dataset


def prepare(
    task: str,
    out,
    seed: Optional[int] = None,
    data_dir=None,
    force: bool = False,
    joined_dictionary: bool = False,
    test_lengths: Sequence[int] = (),
    test_size: int = 500,
) -> dict:
    """Build ``task`` and write it to ``out``; return the manifest.  ``test_lengths``: extra test
    splits ``testN`` of ``test_size`` examples of exactly N (the generated tasks only).  Raises
    DataError."""
    if task not in TASKS:
        raise DataError(f"unknown task {task!r}; valid tasks: {', '.join(TASKS)}")
    facts = TASKS[task]
    if test_lengths and not facts.any_test_length:
        raise DataError(
            f"--test-lengths: {task} reads its test splits from files; only the generated tasks "
            f"({', '.join(name for name, t in TASKS.items() if t.any_test_length)}) take it"
        )
    bad = [n for n in test_lengths if n < 1]
    if bad or test_size < 1:
        raise DataError(f"--test-lengths and --test-size must be positive, got {bad or test_size}")
    seed = DEFAULT_SEED if seed is None else int(seed)
    out = Path(out)
    check_out_folder(out, force)  # fail before any (possibly long) work
    builder = facts.load_builder()
    data = Path(data_dir) if data_dir is not None else None
    splits = (
        builder(seed, data, test_lengths=tuple(test_lengths), test_size=test_size)
        if test_lengths
        else builder(seed, data)
    )
    return write_dataset(splits, out, task, seed, force=force, joined_dictionary=joined_dictionary)


def summary(manifest: dict, out) -> str:
    """A short table: split, size, length range, longest source / target in tokens."""
    rows = [
        f"{manifest['task']} (seed {manifest['seed']}) -> {out}",
        f"{'split':<10} {'size':>7} {'lengths':>9} {'max src':>8} {'max tgt':>8}",
    ]
    for split, stats in manifest["splits"].items():
        lengths = f"{stats['min_length']}-{stats['max_length']}"
        rows.append(
            f"{split:<10} {stats['size']:>7} {lengths:>9} "
            f"{stats['max_source_tokens']:>8} {stats['max_target_tokens']:>8}"
        )
    return "\n".join(rows)
