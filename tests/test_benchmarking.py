"""The speed benchmark's arithmetic, with scripted runs in place of fairseq-train."""

import os

import pytest
import torch

from fairseq_monoattn import fast_path
from fairseq_monoattn.modules import compiled
from monoattn_lab import benchmarking


def test_a_presets_ratios_are_medians_over_rounds_against_both_lstm_runs_of_each_round(monkeypatch, capsys):
    """Each round runs the stock lstm (translation task), the lstm in the plugin's task and the
    preset (in the plugin's task), reversing the order every other round.  The machine speeds up
    fourfold in the last round: the ratios to the stock lstm of each round stay 1.5, 1.4, 1.6
    (median 1.50), to the lstm in the plugin's task 1.36, 1.40, 1.60 (median 1.40), where the
    medians of the words/s would say 1.50 and 1.36."""
    scripted = iter(
        [
            (1000.0, 400.0),  # (words/s, peak MiB): round 1, stock lstm, plugin's lstm, preset
            (1100.0, 401.0),
            (1500.0, 410.0),
            (1400.0, 420.0),  # round 2, reversed: preset, plugin's lstm, stock lstm
            (1000.0, 403.0),
            (1000.0, 402.0),
            (4000.0, 399.0),  # round 3, the machine four times as fast
            (4000.0, 404.0),
            (6400.0, 415.0),
        ]
    )
    commands = []

    def train_once(data_bin, model_args, updates, interval, num_workers):
        assert num_workers == 0  # both models make their batches in the training process by default
        arch, task = (model_args[model_args.index(option) + 1] for option in ("--arch", "--task"))
        if task == "length_generalization":  # fairseq's batches, as in the translation task
            assert model_args[model_args.index("--train-batches") + 1] == "sorted"
        commands.append((arch, task))
        return next(scripted)

    monkeypatch.setattr(benchmarking, "train_once", train_once)
    monkeypatch.setattr(benchmarking, "ensure_copy_data", lambda root: root / "bin")
    benchmarking.main(["--arch", "gru_onestep", "--repeats", "3", "--skip-decoding"])
    stock, plugin = ("lstm", "translation"), ("lstm", "length_generalization")
    preset = ("gru_onestep", "length_generalization")
    assert commands == [stock, plugin, preset, preset, plugin, stock, stock, plugin, preset]
    table = capsys.readouterr().out.splitlines()
    assert "| lstm (stock fairseq, 3 runs) | 1000 | 1.00 | | | | 402 | | | | |" in table
    assert "| lstm (the plugin's task, 3 runs) | 1100 | | | 1.00 | | 404 | | | | |" in table
    assert "| gru_onestep | 1500 | 1.50 | 1.40-1.60 | 1.40 | 1.36-1.60 | 420 | | | | |" in table


def test_the_presets_take_turns_within_each_round(monkeypatch):
    """Two presets, two rounds: every preset runs once a round, each beside its own two lstm runs,
    so a slow spell of the machine lands on every preset's ratios alike."""
    commands = []

    def train_once(data_bin, model_args, updates, interval, num_workers):
        commands.append(model_args[model_args.index("--arch") + 1])
        return 1000.0, 400.0

    monkeypatch.setattr(benchmarking, "train_once", train_once)
    monkeypatch.setattr(benchmarking, "ensure_copy_data", lambda root: root / "bin")
    benchmarking.main(["--arch", "gru_onestep", "gru_monoattn", "--repeats", "2", "--skip-decoding"])
    assert commands == ["lstm", "lstm", "gru_onestep", "lstm", "lstm", "gru_monoattn"] + [
        "gru_onestep", "lstm", "lstm", "gru_monoattn", "lstm", "lstm"
    ]  # fmt: skip


def test_the_training_runs_make_their_batches_in_process_unless_told_otherwise(monkeypatch, tmp_path):
    """fairseq-train's --num-workers: 0 by default for both models (no data-loading process taking
    turns on a pinned core), fairseq's own 1 on request, for the preset and its reference alike."""
    arguments = benchmarking.train_arguments(tmp_path, ["--arch", "gru_onestep"], 300, 50, str(tmp_path))
    assert arguments[arguments.index("--num-workers") + 1] == "0"
    assert arguments.count("--num-workers") == 1
    arguments = benchmarking.train_arguments(tmp_path, ["--arch", "gru_onestep"], 300, 50, str(tmp_path), 1)
    assert arguments[arguments.index("--num-workers") + 1] == "1"
    seen = []
    monkeypatch.setattr(benchmarking, "train_once", lambda d, m, u, i, num_workers: seen.append(num_workers) or (1, 1))
    monkeypatch.setattr(benchmarking, "ensure_copy_data", lambda root: root / "bin")
    benchmarking.main(["--arch", "gru_onestep", "--repeats", "1", "--skip-decoding", "--num-workers", "1"])
    assert seen == [1, 1, 1]  # the preset and both lstm runs


def test_repeats_below_one_are_refused():
    with pytest.raises(SystemExit, match="--repeats must be at least 1, not 0"):
        benchmarking.main(["--repeats", "0", "--skip-decoding", "--arch", "gru_onestep"])


def test_decoding_breakdown_times_the_attention_inside_the_decoder_steps():
    """decode_breakdown: the attention's share is measured inside the decoder's own steps (so it is
    never more than they take), for presets with and without content scores."""
    from monoattn_lab.benchmarking import decode_breakdown

    for arch in ("gru_content", "gru_onestep"):
        parts = decode_breakdown(arch, lengths=(3, 7), sentences=2, rounds=1)
        assert sorted(parts) == [3, 7]
        for part in parts.values():
            assert sorted(part) == ["attention", "generator", "model", "reads"]
            assert 0 < part["attention"] < part["model"] and part["reads"] > 0 and part["generator"] > 0
    assert benchmarking.streaming_rate(40, repeats=2) > 0


@pytest.mark.long(8)
def test_update_profile_counts_the_operator_calls_of_a_training_update():
    """The plugin's update makes matrix products among its operator calls, as fairseq's lstm does; a
    preset with more decoder work (MonoAttn's location focus) makes more calls than Content, and
    fewer operations in its products (no keys, no content query), which are fewer than the lstm's
    (three gates a step, not four)."""
    lstm = benchmarking.update_profile("lstm", updates=2, sentences=4)
    content = benchmarking.update_profile("gru_content", updates=2, sentences=4)
    monoattn = benchmarking.update_profile("gru_monoattn", updates=2, sentences=4)
    for row in (lstm, content, monoattn):
        assert row["ms"] > 0 and 0 < row["products"] < row["calls"]
    assert monoattn["calls"] > content["calls"]
    assert 0 < monoattn["gflops"] < content["gflops"] < lstm["gflops"]


def test_the_update_split_nests_the_model_in_the_trainer_in_the_loop_and_prints_the_bound(monkeypatch, capsys):
    """Scripted splits: the lstm's update 20 ms, the preset's 18 ms of which 12 in the model; with a
    free forward and backward the preset would be 20 / 6 = 3.33x the lstm, and 1.5x needs the model in
    20 / 1.5 - 6 = 7.33 ms."""
    splits = {"lstm": {"loop": 20.0, "trainer": 18.0, "model": 14.0}, "gru_onestep": {"loop": 18.0, "trainer": 16.0,
              "model": 12.0}}  # fmt: skip
    monkeypatch.setattr(benchmarking, "update_split", lambda data, args, updates, num_workers: splits[args[1]])
    benchmarking.print_update_split(["gru_onestep"], None, 300)
    table = capsys.readouterr().out.splitlines()
    assert "| lstm (fairseq) | 20.00 | 18.00 | 14.00 | 6.00 | | |" in table
    assert "| gru_onestep | 18.00 | 16.00 | 12.00 | 6.00 | 3.33 | 7.33 |" in table


@pytest.mark.long(6)
def test_fairseq_train_timed_in_process_gives_nested_times(tmp_path, monkeypatch):
    """A real fairseq-train of 12 updates: the model's forward and backward lie inside the trainer's
    step, which lies inside the training loop; the run leaves nothing where it was started (fairseq
    makes its save folder even with --no-save)."""
    from fairseq_cli_helpers import write_copy_dataset

    data = write_copy_dataset(tmp_path / "data", {"train": (96, 2, 5), "valid": (12, 3, 6)})
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    split = benchmarking.update_split(data / "bin", ["--arch", "gru_onestep"], updates=12)
    assert 0 < split["model"] < split["trainer"] < split["loop"]
    assert list((tmp_path / "cwd").iterdir()) == []


class ScriptedTraining:
    """fairseq-train's log as ``subprocess.Popen`` would stream it, without training."""

    def __init__(self, lines, returncode=0):
        self.lines, self.returncode = lines, returncode

    def __call__(self, command, **kwargs):
        self.stdout = iter(self.lines)
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def scripted_epochs(monkeypatch, tmp_path, lines, clock, returncode=0):
    (tmp_path / "copy-seed1").mkdir()
    (tmp_path / "copy-seed1" / "manifest.json").write_text("{}")  # the data counts as prepared
    monkeypatch.setattr(benchmarking.subprocess, "Popen", ScriptedTraining(lines, returncode))
    ticks = iter(clock)
    monkeypatch.setattr(benchmarking.time, "perf_counter", lambda: next(ticks))
    return benchmarking.epoch_seconds("copy", "gru_onestep", tmp_path, epochs=2)


def test_an_epoch_runs_from_its_start_to_the_next_ones_validation_and_checkpoints_included(monkeypatch, tmp_path):
    """Epoch 1 from its "begin training epoch" (clock 10) to epoch 2's (13.5), past its validation
    (from 12.5) and summary; epoch 2 to "done training" (20), validating from 18: 3.5 and 6.5 seconds
    of which 1 and 2 validating, where fairseq's whole-second train_wall (updates only) says 3 and 5."""
    lines = [
        "fairseq_cli.train | loaded 3 examples\n",
        "fairseq.trainer | begin training epoch 1\n",
        'fairseq_cli.train | begin validation on "valid" subset\n',
        '{"epoch": 1, "train_wall": "3", "train_num_updates": "4"}\n',
        "fairseq.trainer | begin training epoch 2\n",
        'fairseq_cli.train | begin validation on "valid" subset\n',
        '{"epoch": 2, "train_wall": "8", "train_num_updates": "8"}\n',
        "fairseq_cli.train | done training in 9.9 seconds\n",
    ]
    assert scripted_epochs(monkeypatch, tmp_path, lines, [10.0, 12.5, 13.5, 18.0, 20.0]) == [
        {"epoch": 3.5, "validation": 1.0},
        {"epoch": 6.5, "validation": 2.0},
    ]


def test_a_training_that_fails_or_ends_early_is_an_error_with_its_log(monkeypatch, tmp_path):
    lines = ["fairseq.trainer | begin training epoch 1\n", "RuntimeError: out of memory\n"]
    with pytest.raises(SystemExit, match="out of memory"):
        scripted_epochs(monkeypatch, tmp_path, lines, [1.0], returncode=1)


def test_epochs_of_another_checkout_run_its_own_plugin_and_recipe(monkeypatch, tmp_path):
    """--epoch-against: the other checkout's run reads its plugin (--user-dir, PYTHONPATH, and the
    checkout as its working folder, which Python reads first) and its recipe, as its own
    recipe_options writes it; this installation's run does none of these."""
    checkout = tmp_path / "older"
    (checkout / "fairseq_monoattn").mkdir(parents=True)
    (checkout / "fairseq_monoattn" / "__init__.py").write_text("")
    (checkout / "fairseq_monoattn" / "recipes.py").write_text(
        "def recipe_options(name, max_epoch=None):\n    return ['--an-old-recipe', name, str(max_epoch)]\n"
    )
    lines = [
        "fairseq.trainer | begin training epoch 1\n",
        'fairseq_cli.train | begin validation on "valid" subset\n',
        "fairseq.trainer | begin training epoch 2\n",
        'fairseq_cli.train | begin validation on "valid" subset\n',
        "fairseq_cli.train | done training in 9.9 seconds\n",
    ]
    commands, real_popen = [], benchmarking.subprocess.Popen

    class Recorded(ScriptedTraining):
        def __call__(self, command, **kwargs):
            if "fairseq_cli.train" not in command:  # the checkout's recipe_options, run for real
                return real_popen(command, **kwargs)
            commands.append((command, kwargs["env"], kwargs["cwd"]))
            return super().__call__(command, **kwargs)

    (tmp_path / "copy-seed1").mkdir()
    (tmp_path / "copy-seed1" / "manifest.json").write_text("{}")
    monkeypatch.setattr(benchmarking.subprocess, "Popen", Recorded(lines))
    for checkout_or_none in (checkout, None):
        monkeypatch.setattr(benchmarking.time, "perf_counter", iter([1.0, 2.0, 4.0, 5.0, 8.0]).__next__)
        epochs = benchmarking.epoch_seconds("copy", "gru_onestep", tmp_path, 2, checkout_or_none)
        assert epochs == [{"epoch": 3.0, "validation": 2.0}, {"epoch": 4.0, "validation": 3.0}]
    (theirs, their_env, their_cwd), (ours, our_env, our_cwd) = commands
    assert theirs[theirs.index("--user-dir") + 1] == str(checkout / "fairseq_monoattn")
    assert their_env["PYTHONPATH"].split(os.pathsep)[0] == str(checkout)
    recipe = theirs.index("--an-old-recipe")
    assert theirs[recipe : recipe + 3] == ["--an-old-recipe", "paper", "2"]
    assert their_cwd == checkout and our_cwd is None
    assert ours[ours.index("--user-dir") + 1] == str(benchmarking.PLUGIN_DIR) and "--an-old-recipe" not in ours
    assert our_env.get("PYTHONPATH") == os.environ.get("PYTHONPATH")


def test_epoch_pairs_alternate_their_order_and_take_the_ratio_within_each_pair(monkeypatch, tmp_path, capsys):
    runs = []
    seconds = {None: iter([5.0, 6.0, 4.0]), "old": iter([10.0, 10.0, 12.0])}

    def timed(task, arch, root, epochs, checkout=None):
        runs.append(checkout)
        first = {"epoch": 99.0, "validation": 9.0}  # the first epoch is left out
        return [first, {"epoch": next(seconds[checkout]), "validation": 1.0}]

    monkeypatch.setattr(benchmarking, "epoch_seconds", timed)
    benchmarking.print_epochs_against("inv_recopy", "gru_monoattn", tmp_path, "old", repeats=3, epochs=2)
    assert runs == [None, "old", "old", None, None, "old"]
    out = capsys.readouterr().out
    # 5 / 10, 6 / 10, 4 / 12: median 0.5, range 0.333-0.6
    assert "| this installation | 5.00, 6.00, 4.00 | 1.00-1.00 | 0.500 | 0.333-0.600 |" in out
    assert "| old | 10.00, 10.00, 12.00 | 1.00-1.00 | | |" in out


def test_epochs_against_a_folder_that_is_not_a_checkout_are_refused_naming_the_option(tmp_path):
    with pytest.raises(SystemExit, match=r"--epoch-against .*not a checkout of fairseq-monoattn"):
        benchmarking.main(["--skip-training", "--skip-decoding", "--epoch", "copy", "gru_onestep",
                           "--epoch-against", str(tmp_path)])  # fmt: skip
    with pytest.raises(SystemExit, match="--epoch-against needs --epoch"):
        benchmarking.main(["--skip-training", "--skip-decoding", "--epoch-against", str(tmp_path)])


def test_least_times_interleaves_the_runs_and_keeps_each_entrys_least():
    """Each round visits every run in turn, repeating it until it has taken min_seconds (by its
    first entry); the result is the least of each entry over all its runs."""
    calls = []
    times = {
        "short": iter([(0.1, 5.0), (0.05, 7.0), (0.2, 1.0), (0.3, 9.0)] * 3),
        "long": iter([(1.0, 2.0), (0.9, 3.0)]),
    }

    def run(key):
        calls.append(key)
        return next(times[key])

    best = benchmarking.least_times({k: lambda k=k: run(k) for k in times}, rounds=2, min_seconds=0.3)
    # round 1: short 0.1 + 0.05 + 0.2 >= 0.3 (three runs), long once; round 2: short 0.3 at once, long once
    assert calls == ["short"] * 3 + ["long"] + ["short"] + ["long"]
    assert best == {"short": (0.05, 1.0), "long": (0.9, 2.0)}


@pytest.mark.skipif(compiled.kernels is None, reason="the C++ kernels are not built")
def test_the_kernel_timing_alternates_cpp_and_python_on_the_same_batches(monkeypatch):
    calls = []
    real = fast_path._PackedGRULoop.apply
    monkeypatch.setattr(fast_path._PackedGRULoop, "apply", lambda *args: calls.append(1) or real(*args))
    row = benchmarking.compiled_ratio("gru_onestep", "inv_recopy", rounds=3, updates=2)
    assert len(calls) == 2 + 3 * 2  # the warm-up (on the fast path as built), then 3 rounds of 2 updates in C++
    assert row["low"] <= row["ratio"] <= row["high"] and row["python"] > 0 and row["compiled"] > 0


def test_an_inv_recopy_batch_has_the_recopy_of_each_target_as_its_source():
    from fairseq_monoattn.data.digits import recopy

    dictionary = benchmarking.digit_dictionary()
    sample = benchmarking.inv_recopy_batch(dictionary, torch.Generator().manual_seed(0), sentences=16)
    pad, eos = dictionary.pad(), dictionary.eos()
    lengths = []
    for source, target in zip(sample["net_input"]["src_tokens"], sample["target"]):
        source, target = source[source.ne(pad)].tolist(), target[target.ne(pad)].tolist()
        assert source[-1] == eos and target[-1] == eos and 5 <= len(target) - 1 <= 10
        digits = [dictionary[i] for i in target[:-1]]
        assert [dictionary[i] for i in source[:-1]] == recopy(digits)  # d <= 3 once, 4-6 three times, 7-9 five
        lengths.append(len(source))
    assert lengths == sorted(lengths, reverse=True) and lengths[0] > 11  # some digit written more than once
