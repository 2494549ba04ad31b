"""Scoring, the experiment runner and the aggregated tables."""
import json
import sys

import pytest

from fairseq_cli_helpers import REPO, write_copy_dataset
from fairseq_monoattn.evaluation import Tally, edit_distance, is_exact_match

sys.path.insert(0, str(REPO / "examples"))
import aggregate  # noqa: E402
import run_experiment  # noqa: E402

EOS = 2


def test_tally_on_hand_made_hypotheses():
    target = [5, 6, 7, EOS]
    cases = [
        ([5, 6, 7, EOS], True, 0),      # exact
        ([5, 6, EOS], False, 1),        # one token short
        ([5, 6, 7, 7, EOS], False, 1),  # one too many: EOS must come at the right place
        ([5, 9, 7, EOS], False, 1),     # one substitution
        ([5, 6, 7, 7, 7, 7], False, 3),  # never ended (no EOS), cut by the length limit
        ([8, EOS], False, 3),
    ]
    tally = Tally()
    for hypothesis, exact, distance in cases:
        assert is_exact_match(hypothesis, target) is exact
        assert edit_distance(hypothesis, target, EOS) == distance
    tally.add([c[0] for c in cases], [target] * len(cases), EOS)
    assert (tally.size, tally.correct, tally.edit_distance) == (6, 1, 9)
    assert tally.accuracy == pytest.approx(100 / 6) and tally.mean_edit_distance == 1.5


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A runs folder whose copy data is a tiny prepared set (13 test examples: not a multiple of 8)."""
    root = tmp_path_factory.mktemp("runs")
    sizes = {"train": (96, 3, 5), "valid": (13, 5, 6), "test9": (13, 9, 9), "test_iid": (5, 3, 5)}
    write_copy_dataset(root / "copy" / "data", sizes, seed=1)
    return root


def runner_args(runs, *extra):
    return ["copy", "--arch", "gru_onestep", "--seeds", "3", "--runs", str(runs), "--max-epoch", "2", *extra]


def test_runner_trains_scores_resumes_and_never_overwrites(runs, capsys):
    run_experiment.main(runner_args(runs))
    run_dir = runs / "copy" / "gru_onestep" / "seed3"
    scores = json.loads((run_dir / "scores.json").read_text())
    assert {s: v["size"] for s, v in scores["splits"].items()} == {"test9": 13, "test_iid": 5}
    assert (run_dir / "checkpoints" / "checkpoint_best.pt").is_file()
    assert "end of epoch 2" in (run_dir / "train.log").read_text()
    before = (run_dir / "scores.json").stat().st_mtime_ns
    run_experiment.main(runner_args(runs))  # finished: skipped, untouched
    assert "done already" in capsys.readouterr().out
    assert (run_dir / "scores.json").stat().st_mtime_ns == before
    # a run folder started with other options is refused, nothing changes
    (run_dir / "scores.json").rename(run_dir / "scores.moved")
    with pytest.raises(SystemExit, match="other options"):
        run_experiment.main(runner_args(runs, "--", "--lr", "5e-4"))
    assert not (run_dir / "scores.json").exists()
    (run_dir / "scores.moved").rename(run_dir / "scores.json")


def test_score_counts_every_example_and_matches_generated_text(runs, tmp_path):
    sys.path.insert(0, str(REPO / "examples"))
    import score

    checkpoint = runs / "copy" / "gru_onestep" / "seed3" / "checkpoints" / "checkpoint_best.pt"
    if not checkpoint.exists():
        run_experiment.main(runner_args(runs))
    out = tmp_path / "s.json"
    results = score.score(checkpoint, runs / "copy" / "data" / "bin", ["test9"], out, batch_size=8, predictions=True)
    hypotheses = (tmp_path / "s.test9.txt").read_text().splitlines()
    targets = (runs / "copy" / "data" / "raw" / "test9.tgt").read_text().splitlines()
    assert len(hypotheses) == 13
    correct = sum(h == t for h, t in zip(hypotheses, targets))
    assert results["test9"]["correct"] == correct and results["test9"]["size"] == 13
    with pytest.raises(SystemExit, match="exists"):
        score.score(checkpoint, runs / "copy" / "data" / "bin", ["test9"], out)


def write_scores(root, task, arch, seed, splits):
    folder = root / task / arch / f"seed{seed}"
    folder.mkdir(parents=True)
    (folder / "scores.json").write_text(json.dumps({"splits": {
        s: {"accuracy": a, "mean_edit_distance": e} for s, (a, e) in splits.items()}}))


def test_aggregate_medians_and_mean_std(tmp_path):
    for seed, (a15, a100) in zip([1, 2, 3], [(100, 90), (50, 0), (99, 98)]):
        write_scores(tmp_path, "recopy", "gru_onestep", seed, {"test100": (a100, 1.0), "test15": (a15, 0.0)})
    for seed, acc in zip([1, 2], [10.0, 20.0]):
        write_scores(tmp_path, "scan", "gru_content", seed, {"test": (acc, 2.0)})
    text = aggregate.render(tmp_path)
    assert "| gru_onestep | 1,2,3 | 99.0 | 90.0 |" in text  # medians; test15 before test100
    assert "| gru_content | 1,2 | 15.00 ± 7.07 |" in text  # mean ± sample std
    assert "### recopy: mean edit distance (median over seeds)" in text
    with_paper = aggregate.render(tmp_path, paper=True)
    assert "| gru_onestep | 1,2,3 | 99.0 (100) | 90.0 (100) |" in with_paper  # Table 1 of the paper
    assert "| gru_content | 1,2 | 15.00 ± 7.07 (17.61 ± 4.07) |" in with_paper  # Table 2
