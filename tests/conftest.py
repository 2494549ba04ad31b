"""Shared test setup: one thread for every computation the tests start, each prepared data set
made once, the long tests started first."""

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

# Every training a test starts, in this process or as a command, runs on one thread: on a small
# machine shared with other work, two-thread runs spin against each other, and one thread is
# how the sweeps train too.
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"
torch.set_num_threads(1)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "long(seconds): a test that runs for many seconds (trainings through fairseq's commands); the suite "
        "starts these first, the longest first, so that the workers of pytest -n end together",
    )


def pytest_collection_modifyitems(config, items):
    """Long tests first, by their marked seconds (about what they take on one idle core), longest
    first; every other test keeps its place. With ``-n 2 --dist worksteal`` (make test) a worker
    that runs out of tests takes half of the other's queue from its end, so ending with the short
    tests leaves neither worker alone with a long one at the end."""

    def order(item):
        marker = item.get_closest_marker("long")
        return (0, -marker.args[0]) if marker else (1, 0)

    items.sort(key=order)  # stable


@dataclass
class Prepared:
    """An output folder written by fairseq_monoattn.data.prepare.prepare, and its manifest."""

    out: Path
    manifest: dict

    def lines(self, split: str, lang: str):
        return (self.out / "raw" / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()

    def pairs(self, split: str):
        """[(source tokens, target tokens)] of one split, read back from raw/."""
        return [(src.split(), tgt.split()) for src, tgt in zip(self.lines(split, "src"), self.lines(split, "tgt"))]


@pytest.fixture(scope="session")
def prepared(tmp_path_factory):
    """prepared(task, seed=1, data_dir=None) -> Prepared; each combination prepared once."""
    from fairseq_monoattn.data.prepare import prepare

    cache = {}

    def get(task: str, seed: int = 1, data_dir=None) -> Prepared:
        key = (task, seed, str(data_dir))
        if key not in cache:
            out = tmp_path_factory.mktemp(f"{task}-seed{seed}") / "data"
            cache[key] = Prepared(out, prepare(task, out, seed=seed, data_dir=data_dir))
        return cache[key]

    return get
