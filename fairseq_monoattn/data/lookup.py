"""Lookup and Reverse Lookup: compositions of bijective 3-bit lookup tables.

An input such as ``010 t1 t4 t3 .`` asks for t3(t4(t1(010))); the target is the input bits
followed by every intermediate result: ``010 110 000 000``.  Reverse Lookup mirrors the
input (``t3 t4 t1 010 .``, '.' stays last) and keeps the same target, so the table nearest
to the bits is applied first.

Data comes in the machine-tasks TSV format (one example a line: input TAB target
[TAB attention]; CRLF or LF line endings).  This module

* reads such a folder and makes the paper's splits (``build_lookup``,
  ``build_reverse_lookup``), and
* generates new, seeded data in the same format
  (``fairseq-monoattn-lookup-tables generate --out DIR``).
"""

import argparse
import itertools
import random
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .common import DataError, Example, Splits

SHIPPED_LOOKUP = Path(__file__).resolve().parent / "files" / "lookup"  # see its PROVENANCE.md
DEFAULT_DATA_DIRS: Dict[str, Path] = {
    "lookup": SHIPPED_LOOKUP / "LongLookupTables",
    "reverse_lookup": SHIPPED_LOOKUP / "LongLookupTablesReverse",
}

END_TOKEN = "."
TABLE_TOKEN = re.compile(r"^t\d+$")
VALID_ROWS_FROM_LONGER = 500  # rows of longer_seen_1 moved into valid (the paper's rule)

# split name -> file it comes from (valid and test7 are completed in paper_splits)
SPLIT_FILES = {
    "train": "train.tsv",
    "valid": "validation.tsv",
    "test_iid": "heldout_inputs.tsv",
    "test7": "longer_seen_1.tsv",
    "test9": "longer_seen_3.tsv",
    "test11": "longer_seen_5.tsv",
}

Row = Tuple[str, str]  # (input, target), tokens joined by single spaces
Composition = Tuple[str, ...]  # table names in the order they are applied
TableSet = Dict[str, Dict[str, str]]  # table name -> {bits: bits}


# --- the rule -----------------------------------------------------------------------------


def source_tokens(bits: str, composition: Sequence[str], reverse: bool) -> List[str]:
    """Forward: bits, tables in application order, '.'; reverse: the same mirrored, '.' last."""
    if reverse:
        return list(reversed(composition)) + [bits, END_TOKEN]
    return [bits] + list(composition) + [END_TOKEN]


def target_tokens(bits: str, composition: Sequence[str], tables: TableSet) -> List[str]:
    """The input bits followed by the result after each table, in application order."""
    results = [bits]
    for name in composition:
        results.append(tables[name][results[-1]])
    return results


def parse_source(source: str, reverse: bool) -> Tuple[str, Composition]:
    """(bits, tables in application order) of an input; ValueError if it has the wrong shape."""
    tokens = source.split()
    if len(tokens) < 2 or tokens[-1] != END_TOKEN:
        raise ValueError(f"input must end with {END_TOKEN!r}")
    body = tokens[:-1]
    bits, tables = (body[-1], body[:-1][::-1]) if reverse else (body[0], body[1:])
    if TABLE_TOKEN.match(bits) or not all(TABLE_TOKEN.match(name) for name in tables):
        order = "tables, then bits, then '.'" if reverse else "bits, then tables, then '.'"
        raise ValueError(f"expected {order}")
    return bits, tuple(tables)


# --- reading machine-tasks files ----------------------------------------------------------


def read_tsv(path: Path, reverse: bool) -> List[Row]:
    """Rows of a machine-tasks file: input TAB target [TAB attention]; CRLF or LF endings.

    Each input must have the task's shape and the target one token more than it has tables.
    """
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            return [parse_line(line, reverse, path, number) for number, line in enumerate(handle, start=1)]
    except UnicodeDecodeError as error:
        raise DataError(f"not UTF-8 text: {error}", path) from None


def parse_line(line: str, reverse: bool, path: Path, line_number: int) -> Row:
    """One checked (input, target) row."""
    fields = line.rstrip("\r\n").split("\t")
    if len(fields) not in (2, 3):
        raise DataError(f"expected 2 or 3 TAB-separated fields, found {len(fields)}", path, line_number)
    if any(not field.strip() for field in fields):
        raise DataError("empty field", path, line_number)
    source, target = (" ".join(field.split()) for field in fields[:2])
    try:
        _, composition = parse_source(source, reverse)
    except ValueError as error:
        raise DataError(
            f"not a {task_label(reverse)} input {source!r}: {error}" + other_orientation_hint(source, reverse),
            path,
            line_number,
        ) from None
    if len(target.split()) != len(composition) + 1:
        raise DataError(f"target {target!r} should have {len(composition) + 1} tokens", path, line_number)
    return source, target


def task_label(reverse: bool) -> str:
    return "Reverse Lookup" if reverse else "Lookup"


def other_orientation_hint(source: str, reverse: bool) -> str:
    """A hint when the input has the shape of the other task (a forward/reverse mix-up)."""
    try:
        parse_source(source, not reverse)
    except ValueError:
        return ""
    return (
        f" (this looks like {task_label(not reverse)} data; pass --data-dir with "
        f"{task_label(reverse)} files, or leave --data-dir out to read the shipped ones)"
    )


def find_data_folder(data_dir: Optional[Path], task: str) -> Path:
    """The folder holding the split files: data_dir/data/ or data_dir itself."""
    needed = sorted(set(SPLIT_FILES.values()))
    if data_dir is None:
        data_dir = DEFAULT_DATA_DIRS[task]
        if not data_dir.is_dir():
            raise DataError(
                f"no {task} data at the default place {data_dir}; pass --data-dir "
                "with a machine-tasks LongLookupTables folder (or its data/ folder), "
                "or make one with `fairseq-monoattn-lookup-tables generate --out DIR`"
            )
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError("--data-dir does not exist or is not a folder", data_dir)
    for folder in (data_dir / "data", data_dir):
        if all((folder / name).is_file() for name in needed):
            return folder
    raise DataError(
        f"missing {task} files: expected {', '.join(needed)} in this folder or in its data/ subfolder", data_dir
    )


def to_examples(rows: List[Row]) -> List[Example]:
    """Examples whose length is the number of input tokens ('.' included)."""
    return [Example(source, target, len(source.split())) for source, target in rows]


def paper_splits(files: Dict[str, List[Row]], seed: int) -> Splits:
    """valid = validation + 500 seeded rows of longer_seen_1; test7 = its other rows."""
    longer = files["test7"]
    chosen = set(random.Random(seed).sample(range(len(longer)), VALID_ROWS_FROM_LONGER))
    splits = {name: to_examples(rows) for name, rows in files.items()}
    splits["valid"] += to_examples([row for i, row in enumerate(longer) if i in chosen])
    splits["test7"] = to_examples([row for i, row in enumerate(longer) if i not in chosen])
    return splits


def build_splits(seed: int, data_dir: Optional[Path], task: str) -> Splits:
    folder = find_data_folder(data_dir, task)
    reverse = task == "reverse_lookup"
    files = {split: read_tsv(folder / name, reverse) for split, name in SPLIT_FILES.items()}
    if len(files["test7"]) <= VALID_ROWS_FROM_LONGER:
        raise DataError(
            f"has {len(files['test7'])} rows; the paper's splits need more than {VALID_ROWS_FROM_LONGER}",
            folder / SPLIT_FILES["test7"],
        )
    return paper_splits(files, seed)


def build_lookup(seed: int, data_dir: Optional[Path]) -> Splits:
    """Splits train, valid, test_iid, test7, test9, test11 of Lookup."""
    return build_splits(seed, data_dir, "lookup")


def build_reverse_lookup(seed: int, data_dir: Optional[Path]) -> Splits:
    """Splits train, valid, test_iid, test7, test9, test11 of Reverse Lookup."""
    return build_splits(seed, data_dir, "reverse_lookup")


# --- generating new data --------------------------------------------------------------------


@dataclass(frozen=True)
class GeneratorConfig:
    seed: int = 123
    reverse: bool = False
    tables: int = 8  # t1..tN
    heldout_tables: int = 2  # the last ones: seen in train only as single tables
    bits: int = 3
    max_train_composition: int = 4
    heldout_compositions: int = 50  # compositions of the longest train length kept out of train
    heldout_inputs: int = 2  # inputs per other composition of that length kept out of train
    validation_size: float = 0.05
    longer: int = 5  # longer_*_k has max_train_composition + k tables, k = 1..longer
    bound: int = 5000  # at most this many rows in each sampled file


ENUMERATE_LIMIT = 100_000  # below this many candidate rows, enumerate instead of sampling


def make_tables(rng: random.Random, count: int, bits: int) -> TableSet:
    """count tables t1..tN, each a random permutation of all bit strings."""
    inputs = all_inputs(bits)
    tables = {}
    for number in range(1, count + 1):
        outputs = inputs[:]
        rng.shuffle(outputs)
        tables[f"t{number}"] = dict(zip(inputs, outputs))
    return tables


def all_inputs(bits: int) -> List[str]:
    return ["".join(digits) for digits in itertools.product("01", repeat=bits)]


def sample_rows(
    rng: random.Random,
    names: List[str],
    length: int,
    inputs: List[str],
    bound: int,
    accept: Callable[[Composition], bool],
) -> List[Tuple[str, Composition]]:
    """Up to `bound` distinct (bits, composition) rows, compositions of `length` tables from
    `names` that satisfy `accept`: all of them if there are few enough, else a uniform sample."""
    if len(names) ** length * len(inputs) <= ENUMERATE_LIMIT:
        rows = [(bits, comp) for comp in itertools.product(names, repeat=length) if accept(comp) for bits in inputs]
        return rows if len(rows) <= bound else rng.sample(rows, bound)
    chosen: Dict[Tuple[str, Composition], None] = {}  # insertion-ordered set
    for _ in range(100 * bound):  # rejection sampling in a space far larger than bound
        comp = tuple(rng.choice(names) for _ in range(length))
        if accept(comp):
            chosen.setdefault((rng.choice(inputs), comp))
            if len(chosen) == bound:
                return list(chosen)
    raise DataError(f"could not sample {bound} rows of {length} tables; lower --bound")


def generate_rows(
    config: GeneratorConfig,
    rng: random.Random,
) -> Dict[str, List[Tuple[str, Composition]]]:
    """File stem -> rows, following the machine-tasks layout."""
    names = [f"t{number}" for number in range(1, config.tables + 1)]
    seen = names[: config.tables - config.heldout_tables]
    new = names[len(seen) :]
    inputs = all_inputs(config.bits)
    longest = config.max_train_composition
    files: Dict[str, List[Tuple[str, Composition]]] = {}

    # Compositions of the longest train length: some kept out whole, others lose some inputs.
    compositions = list(itertools.product(seen, repeat=longest))
    kept_out = set(rng.sample(compositions, min(config.heldout_compositions, len(compositions))))
    files["heldout_compositions"] = [(b, c) for c in compositions if c in kept_out for b in inputs]
    files["heldout_inputs"], pool_longest = [], []
    for comp in compositions:
        if comp not in kept_out:
            held = set(rng.sample(inputs, min(config.heldout_inputs, len(inputs))))
            files["heldout_inputs"] += [(b, comp) for b in inputs if b in held]
            pool_longest += [(b, comp) for b in inputs if b not in held]

    # Single tables all go to train; validation takes a share of each longer length.
    train = [(b, (name,)) for name in seen for b in inputs]
    validation = []
    for length in range(2, longest + 1):
        pool = (
            pool_longest
            if length == longest
            else [(b, c) for c in itertools.product(seen, repeat=length) for b in inputs]
        )
        picked = set(rng.sample(range(len(pool)), round(config.validation_size * len(pool))))
        validation += [row for i, row in enumerate(pool) if i in picked]
        train += [row for i, row in enumerate(pool) if i not in picked]
    files["train_before_new_tables"] = train
    files["train"] = train + [(b, (name,)) for name in new for b in inputs]
    files["validation"] = validation

    def has_new(comp: Composition) -> bool:
        return any(name in new for name in comp)

    def has_seen(comp: Composition) -> bool:
        return any(name in seen for name in comp)

    def anything(comp: Composition) -> bool:
        return True

    if new:
        files["heldout_tables"] = sample_rows(
            rng, names, longest, inputs, config.bound, lambda c: has_new(c) and has_seen(c)
        )
        files["new_compositions"] = sample_rows(rng, new, longest, inputs, config.bound, anything)
    for k in range(1, config.longer + 1):
        length = longest + k
        files[f"longer_seen_{k}"] = sample_rows(rng, seen, length, inputs, config.bound, anything)
        if new:
            files[f"longer_incremental_{k}"] = sample_rows(rng, names, length, inputs, config.bound, has_new)
            files[f"longer_new_{k}"] = sample_rows(rng, new, length, inputs, config.bound, anything)
    for rows in files.values():
        rng.shuffle(rows)
    return files


def check_config(config: GeneratorConfig) -> None:
    if config.tables < 1 or not 0 <= config.heldout_tables < config.tables:
        raise DataError("need --tables >= 1 and 0 <= --heldout-tables < --tables")
    if config.bits < 1 or config.max_train_composition < 2 or config.longer < 0:
        raise DataError("need --bits >= 1, --max-train-composition >= 2 and --longer >= 0")
    if config.bound < 1 or not 0 <= config.validation_size < 1:
        raise DataError("need --bound >= 1 and 0 <= --validation-size < 1")


def generate(out: Path, config: GeneratorConfig, force: bool = False) -> TableSet:
    """Write OUT/data/*.tsv, OUT/tables.txt and OUT/generation_arguments.txt; return the tables.

    Same config, same bytes.  A non-empty OUT is refused unless force, which first removes
    the old OUT/data/*.tsv.
    """
    check_config(config)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not force:
            raise DataError("exists and is not an empty folder; pass --force to overwrite", out)
        for old in (out / "data").glob("*.tsv"):
            old.unlink()
    (out / "data").mkdir(parents=True, exist_ok=True)
    rng = random.Random(config.seed)
    tables = make_tables(rng, config.tables, config.bits)
    for stem, rows in generate_rows(config, rng).items():
        lines = [
            " ".join(source_tokens(bits, comp, config.reverse))
            + "\t"
            + " ".join(target_tokens(bits, comp, tables))
            + "\n"
            for bits, comp in rows
        ]
        write_text(out / "data" / f"{stem}.tsv", "".join(lines))
    write_text(
        out / "tables.txt",
        "".join(
            name + "\t" + " ".join(f"{key}>{value}" for key, value in mapping.items()) + "\n"
            for name, mapping in tables.items()
        ),
    )
    write_text(out / "generation_arguments.txt", "".join(f"{key}={value}\n" for key, value in asdict(config).items()))
    return tables


def write_text(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.write(text)


def parse_arguments(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="fairseq-monoattn-lookup-tables", description="Lookup-table data in the machine-tasks format."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="write a new seeded LongLookupTables folder")
    defaults = GeneratorConfig()
    gen.add_argument("--out", type=Path, required=True, help="folder to create")
    gen.add_argument("--force", action="store_true", help="overwrite a non-empty --out")
    gen.add_argument("--seed", type=int, default=defaults.seed, help="random seed (default %(default)s)")
    gen.add_argument("--reverse", action="store_true", help="Reverse Lookup inputs (tables first, then bits, then '.')")
    gen.add_argument(
        "--tables", type=int, default=defaults.tables, help="number of tables t1..tN (default %(default)s)"
    )
    gen.add_argument(
        "--heldout-tables",
        type=int,
        default=defaults.heldout_tables,
        help="the last N tables appear in train only alone (default %(default)s)",
    )
    gen.add_argument("--bits", type=int, default=defaults.bits, help="bits per input (default %(default)s)")
    gen.add_argument(
        "--max-train-composition",
        type=int,
        default=defaults.max_train_composition,
        help="most tables in a train input (default %(default)s)",
    )
    gen.add_argument(
        "--heldout-compositions",
        type=int,
        default=defaults.heldout_compositions,
        help="compositions of that length kept out of train (default %(default)s)",
    )
    gen.add_argument(
        "--heldout-inputs",
        type=int,
        default=defaults.heldout_inputs,
        help="inputs kept out per other such composition (default %(default)s)",
    )
    gen.add_argument(
        "--validation-size",
        type=float,
        default=defaults.validation_size,
        help="share of multi-table train rows moved to validation (default %(default)s)",
    )
    gen.add_argument(
        "--longer",
        type=int,
        default=defaults.longer,
        help="write longer_*_1..N with 1..N more tables (default %(default)s)",
    )
    gen.add_argument(
        "--bound",
        type=int,
        default=defaults.bound,
        help="at most this many rows in each sampled file (default %(default)s)",
    )
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_arguments(argv)
    config = GeneratorConfig(
        **{key: value for key, value in vars(args).items() if key not in ("command", "out", "force")}
    )
    try:
        generate(args.out, config, force=args.force)
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    count = len(list((args.out / "data").glob("*.tsv")))
    print(f"wrote {count} files to {args.out / 'data'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
