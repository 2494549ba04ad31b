"""CFQ length split: the ``query_complexity_split`` of the CFQ 1.1 release.

Source = ``questionPatternModEntities``, target = ``sparqlPatternModEntities``, with the
customary preprocessing (that of the CFQ authors' ``preprocess.py``):

* question: every ASCII punctuation character becomes a token of its own
  (``M1 's`` -> ``M1 ' s``), whitespace collapsed;
* SPARQL: ``count(*)`` -> ``count ( * )``; in each whitespace-separated token a leading
  ``ns:`` is dropped and then a leading ``m.`` becomes ``m_`` (``ns:m.02zsn`` -> ``m_02zsn``);
  newlines become spaces, whitespace collapsed.

Splits: train = trainIdxs, valid = devIdxs, test = testIdxs, each in the order of its list.

The release's ``dataset.json`` is a JSON array of about 4 GB.  It is read as a stream, one
record at a time (also straight out of ``cfq1.1.tar.gz``, never extracted to disk), and only
the two converted strings of each needed record are kept.
"""

import codecs
import json
import string
import tarfile
import zlib
from pathlib import Path
from typing import IO, Callable, Dict, Iterator, List, Optional, Tuple

from .common import DataError, Example, Splits

RELEASE_NAME = "cfq1.1.tar.gz"
RELEASE_HINT = (
    f"the CFQ 1.1 release {RELEASE_NAME} (from the google-research `cfq` project, "
    "https://github.com/google-research/google-research/tree/master/cfq; "
    "download https://storage.cloud.google.com/cfq_dataset/cfq1.1.tar.gz)"
)
QUESTION_FIELD = "questionPatternModEntities"
QUERY_FIELD = "sparqlPatternModEntities"
SPLIT_KEYS = {"train": "trainIdxs", "valid": "devIdxs", "test": "testIdxs"}
# (dataset file, split file) inside the release or a folder, in order of preference
LAYOUTS = [
    ("cfq/dataset.json", "cfq/splits/query_complexity_split.json"),
    ("dataset.json", "splits/query_complexity_split.json"),
    ("dataset.json", "split.json"),  # the official 10-example sample
]
CHUNK_SIZE = 1 << 20  # bytes read at a time
MAX_RECORD_CHARS = 64 << 20  # a record longer than this is taken as malformed JSON

Pair = Tuple[str, str]  # (converted question, converted query)


# --- conversion ---------------------------------------------------------------------------


def preprocess_question(question: str) -> str:
    """Spaces around every ASCII punctuation character, whitespace collapsed."""
    spaced = "".join(f" {char} " if char in string.punctuation else char for char in question)
    return " ".join(spaced.split())


def preprocess_sparql(query: str) -> str:
    """count(*) split up, leading ns: dropped, leading m. -> m_, whitespace collapsed."""
    tokens = []
    for token in query.replace("count(*)", "count ( * )").split():
        if token.startswith("ns:"):
            token = token[len("ns:") :]
        if token.startswith("m."):
            token = "m_" + token[len("m.") :]
        tokens.append(token)
    return " ".join(tokens)


# --- streaming a JSON array -----------------------------------------------------------------


class _DuplicateField(Exception):
    pass


def _object_without_duplicates(pairs: List[Tuple[str, object]]) -> dict:
    """A JSON object; a repeated field we need is an error (json would keep the last one)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        names = [name for name, _ in pairs]
        for needed in (QUESTION_FIELD, QUERY_FIELD):
            if names.count(needed) > 1:
                raise _DuplicateField(needed)
    return obj


class _TextStream:
    """UTF-8 text read in chunks from a binary stream; `text[pos:]` is what is not yet used."""

    def __init__(self, stream: IO[bytes], chunk_size: int):
        self.stream, self.chunk_size = stream, chunk_size
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.text, self.pos, self.consumed, self.eof = "", 0, 0, False

    def offset(self, pos: Optional[int] = None) -> int:
        """Character offset in the whole file of a position in `text`."""
        return self.consumed + (self.pos if pos is None else pos)

    def read_more(self) -> bool:
        """Append one chunk (dropping the used text); False at end of file."""
        if self.eof:
            return False
        data = self.stream.read(self.chunk_size)
        self.eof = not data
        new_text = self.decoder.decode(data, final=self.eof)
        del data
        self.consumed += self.pos
        rest, self.text = self.text[self.pos :], ""
        self.text = rest + new_text
        self.pos = 0
        return not self.eof

    def next_char(self) -> str:
        """The next non-whitespace character (not consumed), '' at end of file."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.read_more():
                return ""


def iter_json_array(
    stream: IO[bytes],
    path,
    chunk_size: Optional[int] = None,
) -> Iterator[Tuple[int, dict]]:
    """(index, object) for each element of a top-level JSON array, read chunk by chunk
    (CHUNK_SIZE bytes unless chunk_size is given)."""
    text = _TextStream(stream, chunk_size or CHUNK_SIZE)
    decoder = json.JSONDecoder(object_pairs_hook=_object_without_duplicates)

    def fail(message: str, index: int, pos: Optional[int] = None):
        where = f"record {index}, character offset {text.offset(pos)}"
        return DataError(f"malformed JSON at {where}: {message}", path)

    try:
        if text.next_char() != "[":
            raise fail("the file must be a JSON array of records", 0)
        text.pos += 1
        index = 0
        while True:
            char = text.next_char()
            if char == "]":
                break
            if index > 0:
                if char != ",":
                    raise fail("expected ',' or ']' between records", index)
                text.pos += 1
                text.next_char()
            while True:
                try:
                    record, end = decoder.raw_decode(text.text, text.pos)
                    break
                except json.JSONDecodeError as error:
                    too_long = len(text.text) - text.pos > MAX_RECORD_CHARS
                    if too_long or not text.read_more():
                        raise fail(error.msg, index, error.pos) from None
            if not isinstance(record, dict):
                raise DataError(f"record {index} is not a JSON object", path)
            text.pos = end
            yield index, record
            index += 1
        text.pos += 1
        if text.next_char():
            raise fail("unexpected data after the array", index)
    except _DuplicateField as error:
        raise DataError(f"record {index} has the field {error} more than once", path) from None
    except UnicodeDecodeError as error:
        raise DataError(f"not UTF-8 text: {error}", path) from None


def read_pairs(
    stream: IO[bytes], path, wanted: Optional[Callable[[int], bool]] = None, chunk_size: Optional[int] = None
) -> Tuple[Dict[int, Pair], int]:
    """({index: converted pair} for the wanted records (all if None), number of records)."""
    pairs: Dict[int, Pair] = {}
    count = 0
    for index, record in iter_json_array(stream, path, chunk_size):
        question, query = (record_field(record, name, index, path) for name in (QUESTION_FIELD, QUERY_FIELD))
        if wanted is None or wanted(index):
            pairs[index] = (preprocess_question(question), preprocess_sparql(query))
        count = index + 1
    return pairs, count


def record_field(record: dict, name: str, index: int, path) -> str:
    value = record.get(name)
    if not isinstance(value, str) or not value.strip():
        problem = "lacks the field" if value is None else "has a non-text or empty"
        raise DataError(f"record {index} {problem} {name}", path)
    return value


# --- the split file -------------------------------------------------------------------------


def parse_split(data: bytes, path) -> Dict[str, List[int]]:
    """{split name: record indices} from a CFQ split file."""
    try:
        obj = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataError(f"malformed JSON: {error}", path) from None
    if not isinstance(obj, dict) or any(key not in obj for key in SPLIT_KEYS.values()):
        raise DataError(f"a split file needs the lists {', '.join(SPLIT_KEYS.values())}", path)
    splits = {}
    for split, key in SPLIT_KEYS.items():
        indices = obj[key]
        if not isinstance(indices, list) or not all(type(i) is int and i >= 0 for i in indices):
            raise DataError(f"{key} must be a list of record indices (integers >= 0)", path)
        splits[split] = indices
    return splits


def needed_by(indices: Dict[str, List[int]]) -> Callable[[int], bool]:
    """Whether a record index is in any split."""
    return {index for values in indices.values() for index in values}.__contains__


def select(pairs: Dict[int, Pair], count: int, indices: Dict[str, List[int]], dataset_path, split_path) -> Splits:
    """Examples of each split in index-list order; length = number of source tokens."""
    splits: Splits = {}
    for split, wanted in indices.items():
        examples = []
        for index in wanted:
            if index not in pairs:
                raise DataError(
                    f"{SPLIT_KEYS[split]} has index {index}, but {dataset_path} has {count} records (0..{count - 1})",
                    split_path,
                )
            source, target = pairs[index]
            examples.append(Example(source, target, len(source.split())))
        splits[split] = examples
    return splits


# --- where the data is ----------------------------------------------------------------------


def missing_data_error(where=None) -> DataError:
    expected = " or ".join(f"{dataset} + {split}" for dataset, split in LAYOUTS)
    return DataError(f"cfq needs --data-dir: {RELEASE_HINT}, or a folder holding {expected}", where)


def build_cfq(seed: int, data_dir: Optional[Path]) -> Splits:
    """Splits train, valid, test of the CFQ length split (the seed is not used)."""
    if data_dir is None:
        raise missing_data_error()
    data_dir = Path(data_dir)
    if data_dir.is_dir() and (data_dir / RELEASE_NAME).is_file():
        data_dir = data_dir / RELEASE_NAME
    if data_dir.is_file():
        return build_from_tar(data_dir)
    if data_dir.is_dir():
        for dataset_name, split_name in LAYOUTS:
            dataset, split = data_dir / dataset_name, data_dir / split_name
            if dataset.is_file() and split.is_file():
                return build_from_folder(dataset, split)
    raise missing_data_error(data_dir)


def build_from_folder(dataset: Path, split: Path) -> Splits:
    indices = parse_split(split.read_bytes(), split)
    with open(dataset, "rb") as stream:
        pairs, count = read_pairs(stream, dataset, needed_by(indices))
    return select(pairs, count, indices, dataset, split)


def build_from_tar(archive: Path) -> Splits:
    """One pass over the (possibly gzipped) tar.  If the split file comes after dataset.json,
    every record's converted pair is kept until the split is known (a few hundred MB)."""
    members: Dict[str, str] = {}  # dataset/split -> member name actually used
    indices = None
    pairs: Dict[int, Pair] = {}
    count = 0
    try:
        with tarfile.open(archive, "r|*") as tar:
            for member in tar:
                name = member.name[2:] if member.name.startswith("./") else member.name
                role = tar_role(name, members)
                if role is None or not member.isfile():
                    continue
                members[role] = name
                stream = tar.extractfile(member)
                where = f"{archive}:{name}"
                if role == "split":
                    indices = parse_split(stream.read(), where)
                else:
                    wanted = None if indices is None else needed_by(indices)
                    pairs, count = read_pairs(stream, where, wanted)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as error:
        raise DataError(f"cannot read the archive: {error}", archive) from None
    if set(members) != {"dataset", "split"}:
        raise missing_data_error(archive)
    return select(pairs, count, indices, f"{archive}:{members['dataset']}", f"{archive}:{members['split']}")


def tar_role(name: str, found: Dict[str, str]) -> Optional[str]:
    """'dataset' or 'split' if the member is one of a known layout's files, else None."""
    for dataset_name, split_name in LAYOUTS:
        if name == dataset_name and "dataset" not in found:
            return "dataset"
        if name == split_name and "split" not in found:
            return "split"
    return None
