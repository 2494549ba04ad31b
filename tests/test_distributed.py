"""fairseq's own distributed data-parallel training with the plugin: two CPU processes
(gloo over loopback), one per rank, as in the README's command line."""

import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fairseq_cli_helpers import USER_DIR, copy_examples

import fairseq_monoattn  # noqa: F401
from fairseq_monoattn.data.writer import write_dataset

WORKER = Path(__file__).with_name("distributed_worker.py")
VALID_SIZE = 13
TIMEOUT = 120  # seconds per rank; a normal run takes well under a minute


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rank_command(rank, port, data, save_dir, params):
    return [
        sys.executable,
        str(WORKER),
        str(params),
        str(data),
        "--user-dir",
        USER_DIR,
        "--distributed-world-size",
        "2",
        "--distributed-rank",
        str(rank),
        "--distributed-init-method",
        f"tcp://127.0.0.1:{port}",
        "--distributed-no-spawn",
        "--distributed-backend",
        "gloo",
        "--ddp-backend",
        "legacy_ddp",
        "--cpu",
        "--arch",
        "gru_onestep",
        "--task",
        "length_generalization",
        "--criterion",
        "seq_acc",
        "--eval-accuracy",
        "--best-checkpoint-metric",
        "accuracy",
        "--maximize-best-checkpoint-metric",
        "--optimizer",
        "adam",
        "--lr",
        "1e-3",
        "--clip-norm",
        "5",
        "--batch-size",
        "8",
        "--max-epoch",
        "2",
        "--seed",
        "1",
        "--num-workers",
        "0",
        "--save-dir",
        str(save_dir),
        "--no-epoch-checkpoints",
        "--log-format",
        "json",
        "--no-progress-bar",
    ]


def run_ranks(commands):
    """Both ranks at once; (returncode, stdout) per rank. Ranks still running at the
    time limit are killed, and the test fails."""
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONWARNINGS="ignore")
    processes = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for command in commands
    ]
    try:
        outputs = [process.communicate(timeout=TIMEOUT)[0] for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return [(process.returncode, output) for process, output in zip(processes, outputs)]


def json_stats(output, tag):
    """The end-of-epoch stats fairseq logs with --log-format json, e.g. tag "valid":
    JSON objects whose keys are "epoch" and "<tag>_..." (whatever the log line prefix)."""
    found = []
    for line in output.splitlines():
        if '{"epoch"' in line:
            stats = json.loads(line[line.index('{"epoch"') :])
            if all(key == "epoch" or key.startswith(f"{tag}_") for key in stats):
                found.append(stats)
    return found


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("distributed")
    rng = random.Random(0)
    write_dataset(
        {"train": copy_examples(rng, 48, 2, 5), "valid": copy_examples(rng, VALID_SIZE, 2, 6)},
        root / "copy",
        "copy",
        seed=0,
    )
    port = free_loopback_port()
    params = [root / f"rank{rank}.pt" for rank in range(2)]
    commands = [
        rank_command(rank, port, root / "copy" / "bin", root / "checkpoints", params[rank]) for rank in range(2)
    ]
    results = run_ranks(commands)
    for rank, (returncode, output) in enumerate(results):
        assert returncode == 0, f"rank {rank} failed:\n{output[-4000:]}"
    return root, params, [output for _, output in results]


def test_both_ranks_end_with_equal_parameters(two_rank_run):
    root, params, _ = two_rank_run
    rank0, rank1 = (torch.load(path, weights_only=True) for path in params)
    assert rank0.keys() == rank1.keys()
    assert all(torch.equal(rank0[name], rank1[name]) for name in rank0)
    saved = torch.load(root / "checkpoints" / "checkpoint_last.pt", weights_only=True)["model"]
    assert all(torch.equal(saved[name], rank0[name]) for name in rank0)  # only rank 0 saves


def test_logged_counts_sum_over_both_workers(two_rank_run):
    _, _, (output0, _) = two_rank_run
    valid = json_stats(output0, "valid")
    assert [epoch["valid_acc_total"] for epoch in valid] == [str(VALID_SIZE)] * 2  # not about half of it
    train = json_stats(output0, "train")
    # 48 examples, batches of 8, 2 workers: 6 batches = 3 updates of 16 examples per epoch
    assert [(epoch["train_num_updates"], epoch["train_bsz"]) for epoch in train] == [("3", "16"), ("6", "16")]
