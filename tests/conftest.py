"""Shared test setup: one thread for every computation the tests start, each prepared data set
made once, the long tests started first."""

import functools
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import forked_commands
import pytest
import torch

# Every training a test starts, in this process or as a command, runs on one thread: on a small
# machine shared with other work, two-thread runs spin against each other, and one thread is
# how the sweeps train too.
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"
torch.set_num_threads(1)


def pytest_configure(config):
    if hasattr(config, "workerinput"):  # a worker of pytest -n (make test)
        # Its own session: where Linux groups processes by session for the scheduler
        # (/proc/sys/kernel/sched_autogroup_enabled), the workers of one session share one
        # session's part of the machine, so beside a one-thread job started elsewhere the two
        # workers together got one core of two; a session each gets each a process's part.
        try:
            os.setsid()
        except OSError:  # already a session leader
            pass
    elif getattr(config.option, "numprocesses", None) and os.path.isdir("/proc"):
        # The workers no longer get the terminal's Ctrl-C with this process: pass it on, and a
        # SIGTERM too, to each worker's session (the worker and the commands its test started).
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, functools.partial(forward_to_workers, previous=signal.getsignal(signum)))
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):  # runs tests
        # before any test: the server's children run the commands tests start (forked_commands.py)
        forked_commands.start_server()
    config.addinivalue_line(
        "markers",
        "long(seconds): a test that runs for many seconds (trainings through fairseq's commands); the suite "
        "starts these first, the longest first, so that the workers of pytest -n end together",
    )


def worker_sessions():
    """The children of this process that lead their own session: the workers of pytest -n."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
            except OSError:  # gone meanwhile
                continue
            if int(fields[1]) == os.getpid() and int(fields[3]) == int(entry):
                found.append(int(entry))
    return found


def forward_to_workers(signum, frame, previous):
    for pid in worker_sessions():
        try:
            os.killpg(pid, signum)
        except ProcessLookupError:
            pass
    if callable(previous):  # SIGINT: Python's KeyboardInterrupt
        previous(signum, frame)
    else:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


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
def tiny_run(tmp_path_factory):
    """One finished tiny run (fairseq_cli_helpers.tiny_spec(): Copy, gru_onestep, seed 3, 2
    epochs), trained once for every test file that reads a finished run: (work, results, spec,
    record).  A test that changes one of its files puts it back (or works on a copy)."""
    from fairseq_cli_helpers import tiny_spec, with_tiny_data

    from monoattn_lab.runs import run

    root = tmp_path_factory.mktemp("tiny-run")
    work, results = root / "work", root / "results"
    (spec,) = with_tiny_data(work, tiny_spec())
    record = run(spec, work, results, forked=forked_commands.training_server())
    return work, results, spec, record


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
