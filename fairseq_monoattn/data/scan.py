"""SCAN length split (Lake & Baroni, 2018): splits train, valid, test.

Two input layouts are accepted in the data folder:

* the machine-tasks TAB copy the paper's authors read (`<command> TAB <actions>`, fields
  stripped because test lines start with a space): files `tasks_train_length.txt`,
  `tasks_validation_length.txt`, `tasks_test_length.txt`, either in the folder itself or in
  its `machine-tasks/` subfolder.  Used whenever present: train 13,070 / valid 3,920 /
  test 3,920, exactly the authors' split.
* only the upstream files (`IN: <command> OUT: <actions>`) `tasks_train_length.txt` and
  `tasks_test_length.txt`: valid is then a seeded i.i.d. sample of 3,920 upstream train
  lines (kept in file order), train the remaining lines, test the upstream test file.

The shipped copy (`fairseq_monoattn/data/files/scan/`, BSD licence) holds both layouts.
"Length" is the number of command tokens.

The length cutoffs of Newman et al. (2020), tasks ``scan_cutoffN`` (the cutoffs are the
catalog's ``SCAN_CUTOFFS``), re-split all of SCAN (the upstream length split's train and test
files together): train on the commands of at most N actions, but for a seeded i.i.d. tenth of them
held out as valid, and test on the commands of more.  Their "length" is the number of actions.
"""

import random
import re
from dataclasses import replace
from pathlib import Path
from typing import List, Optional, Tuple

from ..catalog import SCAN_CUTOFF_VALID_SHARE, SCAN_CUTOFFS
from .common import DataError, Example, Splits

DEFAULT_DATA_DIR: Optional[Path] = Path(__file__).resolve().parent / "files" / "scan"

TRAIN_FILE = "tasks_train_length.txt"
VALID_FILE = "tasks_validation_length.txt"
TEST_FILE = "tasks_test_length.txt"
TAB_SUBFOLDER = "machine-tasks"
UPSTREAM_VALID_SIZE = 3_920

UPSTREAM_LINE = re.compile(r"^IN:\s(.*)\sOUT:\s(.*)$")

EXPECTED_FILES = (
    f"expected either the machine-tasks TAB files {TRAIN_FILE}, {VALID_FILE}, {TEST_FILE} "
    f"(in the folder or its {TAB_SUBFOLDER}/ subfolder) or the upstream SCAN length-split "
    f"files {TRAIN_FILE} and {TEST_FILE} ('IN: ... OUT: ...' lines)"
)


def numbered_lines(path: Path) -> List[Tuple[int, str]]:
    """(1-based line number, line) pairs; a final newline does not make an empty line."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"not UTF-8 text ({error.reason})", path) from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if not lines:
        raise DataError("file holds no examples", path)
    return [(number, line.rstrip("\r")) for number, line in enumerate(lines, start=1)]


def make_example(command: str, actions: str, path: Path, number: int) -> Example:
    source, target = command.split(), actions.split()
    if not source or not target:
        raise DataError("empty command or action sequence", path, number)
    return Example(" ".join(source), " ".join(target), len(source))


def read_tab_file(path: Path) -> List[Example]:
    """machine-tasks format: `<command> TAB <actions>` (fields stripped)."""
    examples = []
    for number, line in numbered_lines(path):
        fields = line.split("\t")
        if len(fields) != 2:
            raise DataError("expected '<command> TAB <actions>'", path, number)
        examples.append(make_example(fields[0], fields[1], path, number))
    return examples


def read_upstream_file(path: Path) -> List[Example]:
    """Upstream SCAN format: `IN: <command> OUT: <actions>`."""
    examples = []
    for number, line in numbered_lines(path):
        match = UPSTREAM_LINE.match(line.strip())
        if match is None:
            raise DataError("expected 'IN: <command> OUT: <actions>'", path, number)
        examples.append(make_example(match.group(1), match.group(2), path, number))
    return examples


def find_tab_folder(folder: Path) -> Optional[Path]:
    """The folder holding the machine-tasks copy (marked by its validation file), if any."""
    for candidate in (folder / TAB_SUBFOLDER, folder):
        if (candidate / VALID_FILE).is_file():
            missing = [name for name in (TRAIN_FILE, TEST_FILE) if not (candidate / name).is_file()]
            if missing:
                raise DataError(
                    f"machine-tasks copy incomplete, missing {', '.join(missing)}; " + EXPECTED_FILES, candidate
                )
            return candidate
    return None


def tab_splits(folder: Path) -> Splits:
    return {
        "train": read_tab_file(folder / TRAIN_FILE),
        "valid": read_tab_file(folder / VALID_FILE),
        "test": read_tab_file(folder / TEST_FILE),
    }


def upstream_splits(folder: Path, seed: int) -> Splits:
    """Valid = a seeded i.i.d. sample of upstream train (file order kept), train = the rest."""
    upstream_train = read_upstream_file(folder / TRAIN_FILE)
    test = read_upstream_file(folder / TEST_FILE)
    if len(upstream_train) <= UPSTREAM_VALID_SIZE:
        raise DataError(f"needs more than {UPSTREAM_VALID_SIZE} lines to carve out valid", folder / TRAIN_FILE)
    rng = random.Random(f"{seed}/scan/valid")
    chosen = set(rng.sample(range(len(upstream_train)), UPSTREAM_VALID_SIZE))
    return {
        "train": [ex for i, ex in enumerate(upstream_train) if i not in chosen],
        "valid": [ex for i, ex in enumerate(upstream_train) if i in chosen],
        "test": test,
    }


def build_scan(seed: int, data_dir: Optional[Path] = None) -> Splits:
    folder = Path(data_dir) if data_dir is not None else DEFAULT_DATA_DIR
    if not folder.is_dir():
        raise DataError("no such folder; " + EXPECTED_FILES, folder)
    tab_folder = find_tab_folder(folder)
    if tab_folder is not None:
        return tab_splits(tab_folder)
    if (folder / TRAIN_FILE).is_file() and (folder / TEST_FILE).is_file():
        return upstream_splits(folder, seed)
    raise DataError("no SCAN files found; " + EXPECTED_FILES, folder)


# --- length cutoffs (Newman et al., 2020) -------------------------------------------------


def all_commands(folder: Path) -> List[Example]:
    """Every SCAN command once: the upstream length split's train and test files together (they
    partition SCAN's 20,910 commands), in file order; a command found twice is refused."""
    missing = [name for name in (TRAIN_FILE, TEST_FILE) if not (folder / name).is_file()]
    if missing:
        raise DataError(
            f"a length cutoff reads the upstream SCAN files {TRAIN_FILE} and {TEST_FILE} "
            f"('IN: ... OUT: ...' lines); missing {', '.join(missing)}",
            folder,
        )
    seen = {}
    commands = []
    for name in (TRAIN_FILE, TEST_FILE):
        path = folder / name
        for (number, _), example in zip(numbered_lines(path), read_upstream_file(path)):
            if example.source in seen:
                raise DataError(f"command {example.source!r} is also at {seen[example.source]}", path, number)
            seen[example.source] = f"{path}:{number}"
            commands.append(example)
    return commands


def cutoff_splits(cutoff: int, seed: int, data_dir: Optional[Path] = None) -> Splits:
    """Train: the commands of at most ``cutoff`` actions but a seeded i.i.d. tenth of them, which
    is ``valid``; test: every command of more actions.  All three keep the file order; an
    example's length is its number of actions."""
    folder = Path(data_dir) if data_dir is not None else DEFAULT_DATA_DIR
    if not folder.is_dir():
        raise DataError("no such folder", folder)
    commands = [replace(ex, length=len(ex.target.split())) for ex in all_commands(folder)]
    within = [ex for ex in commands if ex.length <= cutoff]
    beyond = [ex for ex in commands if ex.length > cutoff]
    if not within or not beyond:
        raise DataError(f"cutoff {cutoff} leaves no command on one side (action lengths {min_max(commands)})", folder)
    rng = random.Random(f"{seed}/scan_cutoff{cutoff}/valid")
    held_out = set(rng.sample(range(len(within)), round(SCAN_CUTOFF_VALID_SHARE * len(within))))
    return {
        "train": [ex for i, ex in enumerate(within) if i not in held_out],
        "valid": [ex for i, ex in enumerate(within) if i in held_out],
        "test": beyond,
    }


def min_max(examples: List[Example]) -> str:
    lengths = [ex.length for ex in examples]
    return f"{min(lengths)}-{max(lengths)}"


def cutoff_builder(cutoff: int):
    def build(seed: int, data_dir: Optional[Path] = None) -> Splits:
        return cutoff_splits(cutoff, seed, data_dir)

    build.__name__ = f"build_scan_cutoff{cutoff}"
    return build


# build_scan_cutoff22, build_scan_cutoff24, ...: the builders the catalog names, one per cutoff
for _cutoff in SCAN_CUTOFFS:
    globals()[f"build_scan_cutoff{_cutoff}"] = cutoff_builder(_cutoff)
del _cutoff
