"""The one writer shared by every task: raw text, fairseq binaries and a manifest.

Layout of an output folder (source language `src`, target language `tgt`):

    raw/<split>.src, raw/<split>.tgt     one example a line, space-separated tokens, LF, UTF-8
    bin/dict.src.txt, bin/dict.tgt.txt   fairseq dictionaries
    bin/<split>.src-tgt.{src,tgt}.{bin,idx}   mmap-indexed token ids, EOS appended
    manifest.json                        task, seed, split statistics, sha256 of raw files

Dictionaries hold the train tokens (count descending, then token), followed by tokens that
occur only in other splits (same order, counted there), so no evaluation token is ever
<unk>; the latter are listed in the manifest.  With a joined dictionary (as
fairseq-preprocess --joined-dictionary) source and target share one dictionary built from
both sides, which a model sharing one embedding matrix across them needs.  Everything is written to a temporary
sibling folder that is renamed into place only when complete; an existing non-empty
output folder is replaced only with `force`, and only after the new data is complete.
"""

import hashlib
import json
import os
import re
import shutil
import uuid
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterable, List, Tuple

from .common import DataError, Example, Splits

DATA_FORMAT_VERSION = 2  # 2: joined dictionaries possible; digit tasks have test10/20/50/200
LANGUAGES = ("src", "tgt")
SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")


# --- checking what we were given --------------------------------------------------------


def tokens_line(text: str, split: str, index: int, side: str) -> str:
    """The example side as written: tokens joined by single spaces (never empty)."""
    tokens = text.split()
    if not tokens:
        raise DataError(f"split {split!r}, example {index + 1}: empty {side}")
    return " ".join(tokens)


def split_lines(splits: Splits) -> Dict[str, Dict[str, List[str]]]:
    """{split: {"src": lines, "tgt": lines}} after checking split names and examples."""
    if not splits.get("train"):
        raise DataError("a task must produce a non-empty 'train' split")
    lines: Dict[str, Dict[str, List[str]]] = {}
    for split, examples in splits.items():
        if not SPLIT_NAME.match(split):
            raise DataError(f"bad split name {split!r} (letters, digits and _ only)")
        if not examples:
            raise DataError(f"split {split!r} is empty")
        lines[split] = {
            "src": [tokens_line(ex.source, split, i, "source") for i, ex in enumerate(examples)],
            "tgt": [tokens_line(ex.target, split, i, "target") for i, ex in enumerate(examples)],
        }
    return lines


def check_out_folder(out: Path, force: bool) -> None:
    """Refuse a non-folder --out, and a non-empty one unless `force`."""
    if out.exists() and not out.is_dir():
        raise DataError("--out exists and is not a folder", out)
    if out.is_dir() and any(out.iterdir()) and not force:
        raise DataError("--out exists and is not empty; pass --force to replace it", out)
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise DataError(f"cannot write here: {parent} is not a folder", out)
    if not os.access(parent, os.W_OK):
        raise DataError(f"cannot write here: {parent} is not writable", out)


# --- dictionaries -----------------------------------------------------------------------


def by_count_then_token(counts: Counter) -> List[Tuple[str, int]]:
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def dictionary_entries(lines_by_split: Dict[str, List[str]]) -> Tuple[List[Tuple[str, int]], List[str]]:
    """(token, count) entries: train tokens first, then tokens seen only outside train."""
    train_counts = Counter(tok for line in lines_by_split["train"] for tok in line.split())
    other_counts = Counter(
        tok
        for split, lines in lines_by_split.items()
        if split != "train"
        for line in lines
        for tok in line.split()
        if tok not in train_counts
    )
    extra = by_count_then_token(other_counts)
    return by_count_then_token(train_counts) + extra, [tok for tok, _ in extra]


def make_dictionary(entries: List[Tuple[str, int]]):
    from fairseq.data import Dictionary

    dictionary = Dictionary()
    specials = set(dictionary.symbols)
    for token, count in entries:
        if token in specials:
            raise DataError(f"token {token!r} is one of fairseq's special symbols")
        dictionary.add_symbol(token, n=count)
    return dictionary


# --- writing ----------------------------------------------------------------------------


class WriteFailed(Exception):
    """An OSError (a full disk, a file size limit) while ``path`` was written."""

    def __init__(self, path: Path, error: OSError):
        super().__init__(str(error))
        self.path = Path(error.filename) if error.filename and Path(error.filename).parent == path.parent else path
        self.reason = error.strerror or str(error) or type(error).__name__


@contextmanager
def writing(path: Path):
    """Name ``path`` in an OSError raised while it is written (WriteFailed)."""
    try:
        yield path
    except OSError as error:
        raise WriteFailed(path, error) from error


def write_lines(path: Path, lines: Iterable[str]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for line in lines:
            handle.write(line + "\n")


def binarize(lines: List[str], dictionary, prefix: Path) -> None:
    """`prefix`.bin / `prefix`.idx in fairseq's mmap format, EOS appended to every line."""
    import torch
    from fairseq.data import indexed_dataset

    builder = indexed_dataset.make_builder(str(prefix) + ".bin", impl="mmap", vocab_size=len(dictionary))
    # the ids of fairseq's Dictionary.encode_line(line, add_if_not_exist=False), looked up in
    # Python lists: encode_line stores them one by one into a tensor, most of the time of
    # preparing a task
    index, eos, unk = dictionary.indices, dictionary.eos(), dictionary.unk()
    for line in lines:
        ids = [index.get(token, unk) for token in line.split()]
        if unk in ids:  # cannot happen: every token is in the dictionary
            raise AssertionError(f"unknown token in {prefix}: {line}")
        ids.append(eos)
        builder.add_item(torch.tensor(ids, dtype=torch.int32))
    builder.finalize(str(prefix) + ".idx")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def split_statistics(examples: List[Example], sides: Dict[str, List[str]]) -> dict:
    lengths = [ex.length for ex in examples]
    return {
        "size": len(examples),
        "min_length": min(lengths),
        "max_length": max(lengths),
        "max_source_tokens": max(len(line.split()) for line in sides["src"]),
        "max_target_tokens": max(len(line.split()) for line in sides["tgt"]),
    }


def write_contents(splits: Splits, folder: Path, task: str, seed: int, joined_dictionary: bool = False) -> dict:
    """Write raw/, bin/ and manifest.json into `folder`; return the manifest."""
    lines = split_lines(splits)
    (folder / "raw").mkdir()
    (folder / "bin").mkdir()
    manifest: dict = {
        "task": task,
        "seed": seed,
        "data_format_version": DATA_FORMAT_VERSION,
        "joined_dictionary": joined_dictionary,
        "splits": {},
        "raw_sha256": {},
        "dictionaries": {},
    }
    if joined_dictionary:
        both_sides = {split: sides["src"] + sides["tgt"] for split, sides in lines.items()}
        joined = dictionary_entries(both_sides)
    for lang in LANGUAGES:
        by_split = {split: sides[lang] for split, sides in lines.items()}
        entries, not_in_train = joined if joined_dictionary else dictionary_entries(by_split)
        dictionary = make_dictionary(entries)
        with writing(folder / "bin" / f"dict.{lang}.txt") as path:
            dictionary.save(str(path))
        manifest["dictionaries"][lang] = {"size": len(dictionary), "not_in_train": not_in_train}
        for split, split_text in by_split.items():
            prefix = folder / "bin" / f"{split}.src-tgt.{lang}"
            with writing(prefix.with_name(prefix.name + ".bin")):  # then its .idx, named where it fails
                binarize(split_text, dictionary, prefix)
    for split, sides in lines.items():
        manifest["splits"][split] = split_statistics(splits[split], sides)
        for lang in LANGUAGES:
            raw_path = folder / "raw" / f"{split}.{lang}"
            with writing(raw_path):
                write_lines(raw_path, sides[lang])
            manifest["raw_sha256"][f"raw/{split}.{lang}"] = sha256(raw_path)
    with writing(folder / "manifest.json") as path:
        path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def sibling(out: Path, purpose: str) -> Path:
    return out.parent / f".{out.name}.{purpose}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def move_into_place(staging: Path, out: Path, force: bool) -> None:
    """Rename `staging` to `out`; an old non-empty `out` goes away only with `force`."""
    check_out_folder(out, force)  # again: something may have appeared meanwhile
    if not out.exists():
        staging.rename(out)
        return
    if not any(out.iterdir()):
        out.rmdir()
        staging.rename(out)
        return
    old = sibling(out, "old")
    out.rename(old)
    try:
        staging.rename(out)
    except BaseException:
        old.rename(out)
        raise
    shutil.rmtree(old)


def write_dataset(
    splits: Splits, out: Path, task: str, seed: int, force: bool = False, joined_dictionary: bool = False
) -> dict:
    """Write one task's splits to `out` atomically; return the manifest.  A write that fails (a
    full disk) is a DataError naming the file and the cause; `out` is then left as it was."""
    out = Path(out).absolute()
    check_out_folder(out, force)
    staging = sibling(out, "new")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
        manifest = write_contents(splits, staging, task, seed, joined_dictionary)
        move_into_place(staging, out, force)
    except WriteFailed as failure:  # the file as it would have been named in --out
        shown = out / failure.path.relative_to(staging)
        raise DataError(f"cannot write it: {failure.reason}; --out was left as it was", shown) from None
    except OSError as error:  # making the folders, moving the new one into place
        reason = error.strerror or str(error)
        raise DataError(f"cannot write it: {reason} ({error.filename}); --out was left as it was", out) from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return manifest
