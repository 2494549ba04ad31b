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
"""

import random
import re
from pathlib import Path
from typing import List, Optional, Tuple

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
