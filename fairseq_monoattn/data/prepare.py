"""Prepare one task's data: raw text, fairseq binaries and a manifest.

    python preprocess/prepare.py TASK --out DIR [--seed N] [--data-dir PATH] [--force]
    fairseq-monoattn-prepare TASK --out DIR ...

The default seed is 1 for every task.  Same task, seed and input data -> byte-identical
files.  An existing non-empty DIR is left alone unless --force is given.
Exit codes: 0 success, 2 bad input or options (message on stderr).
"""
import argparse
import logging
import sys
from pathlib import Path

from .common import DataError
from .tasks import DEFAULT_SEED, TASKS
from .writer import check_out_folder, write_dataset


def prepare(task: str, out, seed=None, data_dir=None, force: bool = False, joined_dictionary: bool = False) -> dict:
    """Build `task` and write it to `out`; return the manifest.  Raises DataError."""
    if task not in TASKS:
        raise DataError(f"unknown task {task!r}; valid tasks: {', '.join(TASKS)}")
    seed = DEFAULT_SEED if seed is None else int(seed)
    out = Path(out)
    check_out_folder(out, force)  # fail before any (possibly long) work
    builder = TASKS[task].load()
    splits = builder(seed, Path(data_dir) if data_dir is not None else None)
    return write_dataset(splits, out, task, seed, force=force, joined_dictionary=joined_dictionary)


def summary(manifest: dict, out) -> str:
    """A short table: split, size, length range, longest source / target in tokens."""
    rows = [f"{manifest['task']} (seed {manifest['seed']}) -> {out}",
            f"{'split':<10} {'size':>7} {'lengths':>9} {'max src':>8} {'max tgt':>8}"]
    for split, stats in manifest["splits"].items():
        lengths = f"{stats['min_length']}-{stats['max_length']}"
        rows.append(f"{split:<10} {stats['size']:>7} {lengths:>9} "
                    f"{stats['max_source_tokens']:>8} {stats['max_target_tokens']:>8}")
    return "\n".join(rows)


def parse_args(argv):
    task_lines = "\n".join(f"  {name:<19} {task.description}" for name, task in TASKS.items())
    parser = argparse.ArgumentParser(
        description="Write DIR/raw/, the fairseq-binarized DIR/bin/ and DIR/manifest.json "
                    "for one task.",
        epilog="tasks:\n" + task_lines,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", metavar="TASK", help="one of the tasks listed below")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder")
    parser.add_argument("--seed", type=int, default=None,
                        help=f"random seed (default {DEFAULT_SEED} for every task)")
    parser.add_argument("--data-dir", default=None, metavar="PATH",
                        help="input data for file-based tasks (default: the task's own)")
    parser.add_argument("--joined-dictionary", action="store_true",
                        help="one dictionary for source and target (for --share-all-embeddings)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing non-empty DIR (after the new data is written)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    # fairseq configures INFO logging on import (and says tensorboardX is missing): keep quiet
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    try:
        manifest = prepare(args.task, args.out, args.seed, args.data_dir, args.force, args.joined_dictionary)
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(summary(manifest, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
