"""Train and test the authors' release (Ray Chowdhury & Caragea, plain PyTorch, MIT) on this plugin's
data, one record per run.  From this repository's root:

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 taskset -c 1 .venv/bin/python examples/release_equivalence/run_release.py \\
        --release /path/to/MonotonicLocationAttention --python /path/to/release-venv/bin/python \\
        --task inv_recopy --model BiGRU_MonoAttn --seeds 0 1 2 --epochs 25 --data-seed 1 \\
        --work /tmp/release_work --results results/release

Steps (one function each):

1. ``prepare_plugin_data``: the task's splits for --data-seed, made by this plugin's own library
   (``fairseq_monoattn.data.prepare``), into WORK/data/TASK-seedK/ (kept and reused).
2. ``write_release_data``: the same examples in the release's processed-data format, in
   WORK/TASK-dataK/processed_data/DATASET/ (``train.jsonl``, ``dev_normal.jsonl``, ``test_KEY.jsonl``,
   ``metadata.pkl`` with the vocabulary), as the release's ``preprocess/process_*.py`` write them:
   ``<eos>`` ends every target, no source but DeDupe's has one.  Then the release's own loader
   reads them back and every example is checked against the plugin's raw lines (``check``).
3. ``run_release``: the release's ``train.py`` for run index N (``--initial_time N --times N+1``;
   the release seeds run N with adler32 of "DATASET_MODEL_seq2seq_N"), epochs set to --epochs, then
   its test mode (``--test True``) on the checkpoint with the best dev score.  The release runs in
   its own interpreter (--python: it needs ``jsonlines``, ``nltk``, ``tqdm``, ``numpy``, ``torch``)
   with WORK/TASK-dataK/ as its working directory, where it writes its logs and checkpoints.
4. ``write_record``: RESULTS/TASK/MODEL/seedN.json.  An existing record is never overwritten: that
   run is skipped.

With ``--initial-weights`` nothing is trained: for each run N the release's ``train.py`` runs until
it has built its model (its own seeding, data loading and model construction) and the model's
initial state dict is kept, converted onto the matching preset (``monoattn_lab.release``) and
written as a fairseq checkpoint, WORK/TASK-dataK/initial_weights/MODEL-runN.pt (never over an
existing file).  ``fairseq-train --finetune-from-model`` that file starts the plugin from the
weights the release's run N starts from (``--results`` is not needed then).

Nothing of the release is copied or edited: the epoch budget is set by wrapping the release's
``load_config`` in the process that runs it (``release_main`` below, the part of this script that
runs inside the release's interpreter).
"""

import argparse
import ast
import json
import os
import pickle
import subprocess
import sys
import time
import zlib
from pathlib import Path

# plugin task -> the release's dataset config (configs/<name>_configs.py; the names of its readme)
RELEASE_DATASET = {
    "copy": "copy",
    "reverse_copy": "rc",
    "lookup": "llt",
    "reverse_lookup": "rllt",
    "recopy": "fpc",
    "reverse_recopy": "rpc",
    "inv_recopy": "fgc",
    "inv_reverse_recopy": "rgc",
    "dedupe": "dedup",
    "posretrieve": "posretrieve",
}
# the release's preprocessing script of each dataset (its vocabulary's special tags are read off it)
RELEASE_SCRIPT = {
    "copy": "process_copy.py",
    "rc": "process_reverse_copy.py",
    "llt": "process_llt.py",
    "rllt": "process_reverse_llt.py",
    "fpc": "process_ReCopy.py",
    "rpc": "process_reverse_ReCopy.py",
    "fgc": "process_invReCopy.py",
    "rgc": "process_reverse_InvReCopy.py",
    "dedup": "process_dedupe.py",
    "posretrieve": "process_posretrieve.py",
}
LOOKUP_DATASETS = ("llt", "rllt")  # vocabulary from train counts (the others: digits, then special tags)
SOURCE_EOS = ("dedup",)  # process_dedupe.py keeps "<eos>" at the end of the source; no other task does
# the release's test keys for the Lookup files (test_iid = heldout_inputs, testN = longer_seen_{(N-5)/2})
LOOKUP_TEST_KEYS = {"test_iid": "normal", "test7": "long1", "test9": "long3", "test11": "long5"}
# The record names two presets per release model: the one computing the release's function
# (monoattn_lab.release.RELEASE_MODELS) and the one of the same name, which differs only for the
# release's Mix OneStep / MonoAttn / RMonoAttn configs (and PR forms): they never mix, so they
# compute the unmixed presets' function while their names are those of the mixing presets.
NAMED_LIKE = {
    "BiGRU_MixOneStep": "gru_mix_onestep",
    "BiGRU_MixOneStepPR": "gru_mix_onestep_pr",
    "BiGRU_MixMonoAttn": "gru_mix_monoattn",
    "BiGRU_MixMonoAttnPR": "gru_mix_monoattn_pr",
    "BiGRU_MixRMonoAttn": "gru_mix_rmonoattn",
    "BiGRU_MixRMonoAttnPR": "gru_mix_rmonoattn_pr",
}
DIGITS = [str(i) for i in range(10)]  # the digit scripts' `vocab`


def release_models() -> dict:
    """Release --model -> the plugin preset computing its function (imported here, in the plugin's
    interpreter only: the release's interpreter has no fairseq_monoattn)."""
    from monoattn_lab.release import RELEASE_MODELS

    return RELEASE_MODELS


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", required=True, type=Path, help="a checkout of the authors' release")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs the release")
    parser.add_argument("--task", required=True, choices=sorted(RELEASE_DATASET))
    parser.add_argument("--model", required=True, choices=sorted(release_models()), help="the release's --model")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="the release's run indices")
    parser.add_argument("--epochs", type=int, default=25, help="epoch budget (the release's configs say 100)")
    parser.add_argument("--data-seed", type=int, default=1, help="seed of the plugin's data")
    parser.add_argument("--work", required=True, type=Path, help="folder for data, logs and checkpoints")
    parser.add_argument("--results", type=Path, help="records go to RESULTS/TASK/MODEL/seedN.json")
    parser.add_argument(
        "--initial-weights",
        action="store_true",
        help="train nothing: write the initial weights of each run as a fairseq checkpoint",
    )
    args = parser.parse_args(argv)
    if args.results is None and not args.initial_weights:
        parser.error("--results is required (unless --initial-weights)")
    from monoattn_lab.release import check_release_checkout

    try:
        args.release = check_release_checkout(args.release)
    except ValueError as error:
        parser.error(str(error))
    return args


def prepare_plugin_data(task: str, data_seed: int, work: Path) -> dict:
    """The plugin's splits of `task` for `data_seed` (raw/<split>.src/.tgt); the manifest."""
    from fairseq_monoattn.data.prepare import prepare

    out = (work / "data" / f"{task}-seed{data_seed}").resolve()
    if (out / "manifest.json").exists():
        manifest = json.loads((out / "manifest.json").read_text())
        assert (manifest["task"], manifest["seed"]) == (task, data_seed), f"{out} holds other data"
    else:
        manifest = prepare(task, out, seed=data_seed, joined_dictionary=True)
    manifest["folder"] = str(out)
    return manifest


def read_raw(folder: Path, split: str):
    """[(source tokens, target tokens)] of one split of the plugin's raw text."""
    sources = (folder / "raw" / f"{split}.src").read_text(encoding="utf-8").splitlines()
    targets = (folder / "raw" / f"{split}.tgt").read_text(encoding="utf-8").splitlines()
    assert len(sources) == len(targets), split
    return [(s.split(), t.split()) for s, t in zip(sources, targets)]


def release_key(dataset: str, split: str):
    """(part, key) of a plugin split in the release's files: train, dev_normal, test_<key>."""
    if split in ("train", "valid"):
        return ("train", None) if split == "train" else ("dev", "normal")
    if dataset in LOOKUP_DATASETS:
        return "test", LOOKUP_TEST_KEYS[split]
    return "test", "IID" if split == "test_iid" else "long" + split[len("test") :]


def release_examples(dataset: str, pairs):
    """The examples as the release writes them: `<eos>` ends the target (and DeDupe's source)."""
    eos = ["<eos>"] if dataset in SOURCE_EOS else []
    return [(src + eos, trg + ["<eos>"]) for src, trg in pairs]


def release_vocabulary(release: Path, dataset: str, train) -> dict:
    """vocab2idx as the release's preprocessing builds it: the digits (Lookup: the train tokens,
    sources then targets, by descending count as its process_llt.py sorts them), then the special
    tags its script lists."""
    import numpy as np

    tree = ast.parse((release / "preprocess" / RELEASE_SCRIPT[dataset]).read_text())
    special = [
        ast.literal_eval(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "special_tags" for t in node.targets)
    ]
    assert len(special) == 1, f"no single special_tags in {RELEASE_SCRIPT[dataset]}"
    if dataset in LOOKUP_DATASETS:
        counts = {}
        for src, trg in train:
            for token in src + trg:
                counts[token] = counts.get(token, 0) + 1
        tokens = list(counts)
        vocab = [tokens[i] for i in np.flip(np.argsort(list(counts.values())), axis=0)]
    else:
        vocab = list(DIGITS)
    vocab2idx = {token: i for i, token in enumerate(vocab)}
    for token in special[0]:
        vocab2idx.setdefault(token, len(vocab2idx))
    return vocab2idx


def write_release_data(release: Path, dataset: str, manifest: dict, folder: Path) -> dict:
    """Every split of the manifest in the release's processed format, under folder/processed_data/;
    returns {plugin split: [part, key]} (also written to folder/splits.json for the check)."""
    out = folder / "processed_data" / dataset
    out.mkdir(parents=True, exist_ok=True)
    plugin = Path(manifest["folder"])
    splits = {split: read_raw(plugin, split) for split in manifest["splits"]}
    examples = {split: release_examples(dataset, pairs) for split, pairs in splits.items()}
    vocab2idx = release_vocabulary(release, dataset, examples["train"])
    keys = {split: release_key(dataset, split) for split in splits}
    for split, pairs in examples.items():
        part, key = keys[split]
        name = "train.jsonl" if part == "train" else f"{part}_{key}.jsonl"
        with open(out / name, "w", encoding="utf-8") as handle:
            for src, trg in pairs:
                unknown = [t for t in src + trg if t not in vocab2idx]
                assert not unknown, f"{split}: tokens {unknown} are not in the release's vocabulary"
                src_vec, trg_vec = [vocab2idx[t] for t in src], [vocab2idx[t] for t in trg]
                # the fields of the release's vectorize_data; no token is out of vocabulary, so the
                # pointer ids equal the ids and there are no OOVs
                obj = dict(src=src, trg=trg, src_vec=src_vec, ptr_src_vec=src_vec, oov_num=0, trg_vec=trg_vec)
                handle.write(json.dumps(dict(obj, label=trg_vec)) + "\n")
    metadata = {
        "dev_keys": [key for part, key in keys.values() if part == "dev"],
        "test_keys": [key for part, key in keys.values() if part == "test"],
        "vocab2idx": vocab2idx,
    }
    with open(out / "metadata.pkl", "wb") as handle:
        pickle.dump(metadata, handle)
    (folder / "splits.json").write_text(json.dumps({"plugin_data": str(plugin), "splits": keys}, indent=1))
    return keys


def release_command(args, action: str, run=None, out=None):
    """This script's release-side entry point (release_main) for one action, run by --python."""
    command = [args.python, str(Path(__file__).resolve()), "release", action, str(args.release.resolve())]
    command += [RELEASE_DATASET[args.task]]
    if run is not None:
        command += [args.model, str(run), str(args.epochs), str(out)]
    return command


def call(command, cwd: Path, log: Path):
    """Run a command in cwd, its output to log; stop on failure."""
    # the release's resume checkpoints hold numpy random states: torch >= 2.6 needs this to load them
    env = dict(os.environ, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    with open(log, "w") as handle:
        done = subprocess.run(command, cwd=cwd, env=env, stdout=handle, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}), see {log}: {' '.join(command)}")


def run_release(args, folder: Path, run: int) -> dict:
    """Train run `run` with the epoch budget, then test its best checkpoint; what the release returned."""
    logs = folder / "runs"
    logs.mkdir(exist_ok=True)
    outcome = {"commands": [], "wall_seconds": {}}
    for action in ("train", "test"):
        out = logs / f"{args.model}-run{run}.{action}.json"
        command = release_command(args, action, run, out)
        start = time.time()
        call(command, folder, logs / f"{args.model}-run{run}.{action}.log")
        outcome["wall_seconds"][action] = round(time.time() - start, 1)
        outcome["commands"].append({"cwd": str(folder), "argv": command})
        outcome[action] = json.loads(out.read_text())
    return outcome


def write_record(args, path: Path, run: int, keys: dict, manifest: dict, outcome: dict, folder: Path) -> dict:
    train, test = outcome["train"], outcome["test"]
    dataset = RELEASE_DATASET[args.task]
    by_key = {key: split for split, (part, key) in keys.items() if part == "test"}
    best = train["best_epoch"]
    record = {
        "task": args.task,
        "release_dataset": dataset,
        "release_model": args.model,
        "plugin_preset": NAMED_LIKE.get(args.model, release_models()[args.model]),
        "release_computes": release_models()[args.model],
        "run": run,
        "release_seed": release_seed(args, run),
        "data_seed": args.data_seed,
        "data_sha256": manifest["raw_sha256"],
        "epochs_budget": args.epochs,
        "epochs_run": len(train["dev_scores"]),
        "best_dev_epoch": best,
        "dev_metric": "teacher-forced exact match on valid (%), the release's checkpoint selector",
        "best_dev": train["dev_scores"][best - 1] if best else None,
        "dev_per_epoch": [round(s, 2) for s in train["dev_scores"]],
        "test_metric": "greedy exact match (%), the release's test mode",
        "test_accuracy": {by_key[key]: round(m["accuracy"], 4) for key, m in test["metrics"].items()},
        "test_examples": {by_key[key]: manifest["splits"][by_key[key]]["size"] for key in test["metrics"]},
        "test_checkpoint_epoch": test["epochs_taken"],
        "checkpoint": str(folder / test["checkpoint"]),
        "wall_seconds": outcome["wall_seconds"],
        "epoch_seconds": train.get("epoch_seconds"),
        "validation_seconds": train.get("validation_seconds"),
        "command": [sys.executable, *sys.argv],
        "commands": outcome["commands"],
        "env": dict(
            {name: os.environ.get(name) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
            TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1",
        ),
        "release_commit": release_commit(args.release),
        "torch_version": train["torch_version"],
        "threads": train["threads"],
        "cpus": train["cpus"],
    }
    assert test["epochs_taken"] == best, "the tested checkpoint is not the best dev epoch's"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return record


def write_initial_weights(args, folder: Path, manifest: dict, run: int):
    """The release's run `run` initial weights, converted, as folder/initial_weights/MODEL-runN.pt."""
    import torch
    from fairseq.data import Dictionary

    from monoattn_lab.release import convert, write_fairseq_checkpoint

    out = folder / "initial_weights" / f"{args.model}-run{run}.pt"
    if out.exists():
        print(f"{out} exists: run {run} skipped")
        return
    out.parent.mkdir(exist_ok=True)
    drawn = out.with_suffix(".release.pt")
    call(release_command(args, "init", run, drawn), folder, out.with_suffix(".log"))
    state = torch.load(drawn, weights_only=True)
    vocab = pickle.loads((folder / "processed_data" / RELEASE_DATASET[args.task] / "metadata.pkl").read_bytes())
    vocab = [token for token, _ in sorted(vocab["vocab2idx"].items(), key=lambda item: item[1])]
    data_bin = Path(manifest["folder"]) / "bin"
    dictionary = Dictionary.load(str(data_bin / "dict.src.txt"))  # joined: the target's is the same
    converted = convert(state, args.model, vocab, dictionary.symbols, dictionary.symbols)
    source = {"release_model": args.model, "run": run, "release_seed": release_seed(args, run),
              "release_commit": release_commit(args.release), "what": "initial weights"}  # fmt: skip
    write_fairseq_checkpoint(converted, data_bin, out, source=source)
    drawn.unlink()
    print(f"{out}: the release's run {run} initial weights (seed {source['release_seed']})")


def release_seed(args, run: int) -> int:
    """The seed the release's train.py gives run `run` (adler32 of DATASET_MODEL_seq2seq_RUN)."""
    return zlib.adler32(f"{RELEASE_DATASET[args.task]}_{args.model}_seq2seq_{run}".encode())


def release_commit(release: Path) -> str:
    done = subprocess.run(["git", "-C", str(release), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main(argv):
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    dataset = RELEASE_DATASET[args.task]
    manifest = prepare_plugin_data(args.task, args.data_seed, args.work)
    folder = (args.work / f"{args.task}-data{args.data_seed}").resolve()
    keys = write_release_data(args.release, dataset, manifest, folder)
    call(release_command(args, "check"), folder, folder / "check.log")
    print((folder / "check.log").read_text().strip())
    if args.initial_weights:
        for run in args.seeds:
            write_initial_weights(args, folder, manifest, run)
        return
    for run in args.seeds:
        path = args.results / args.task / args.model / f"seed{run}.json"
        if path.exists():
            print(f"{path} exists: run {run} skipped")
            continue
        outcome = run_release(args, folder, run)
        record = write_record(args, path, run, keys, manifest, outcome, folder)
        print(f"{path}: best dev epoch {record['best_dev_epoch']}, test {record['test_accuracy']}")


# --- inside the release's interpreter -----------------------------------------------------------


def release_main(action: str, release: str, dataset: str, *rest):
    """`check`: load the written data with the release's own loader and compare every example with
    the plugin's raw lines.  `train` / `test` MODEL RUN EPOCHS OUT: the release's train.py for one run
    (its run_and_collect_results), epochs set to EPOCHS; what it returns is written to OUT.  `init`
    MODEL RUN EPOCHS OUT: the same train.py run stopped as soon as its model is built; the model's
    initial state dict is saved to OUT."""
    # The release is no package: its modules import each other as top-level names (configs, models,
    # utils, ...), so its checkout has to be on sys.path.  Only that path is added, only here.
    sys.path.insert(0, release)
    if action == "check":
        return release_check(dataset)
    import torch
    import train as release_train

    model, run, epochs, out = rest
    dev_scores, result, epoch_starts, validation_starts = [], {}, [], []
    load_config, compose_dev_metric, run_once, display = (
        release_train.load_config,
        release_train.compose_dev_metric,
        release_train.run,
        release_train.display,
    )
    clock = time.perf_counter

    def budgeted_config(args):
        config = load_config(args)
        config["epochs"] = int(epochs)
        return config

    def recorded_dev_metric(metrics, config):
        dev_scores.append(compose_dev_metric(metrics, config))
        return dev_scores[-1]

    def recorded_run(args, config, time=0):
        result["returned"] = run_once(args, config, time)
        result["ended"] = clock()
        return result["returned"]

    def timed_display(text, *args, **kwargs):
        # an epoch: from the release's "Training Epoch # N" to the next (its updates, its validation,
        # its checkpoints), the last one to the end of its run; its validation from "Validating Epoch"
        if "Training Epoch #" in text:
            epoch_starts.append(clock())
        elif "Validating Epoch #" in text:
            validation_starts.append(clock())
        return display(text, *args, **kwargs)

    if action == "init":
        # train.py builds the model as seq2seq_framework(data=..., config=...) right after seeding
        # and loading the data; keep what it built and stop there (before it writes its logs)
        build = release_train.seq2seq_framework

        class Built(Exception):
            pass

        def built_model(*args, **kwargs):
            model = build(*args, **kwargs)
            torch.save(model.state_dict(), out)
            raise Built

        release_train.seq2seq_framework = built_model
    release_train.load_config = budgeted_config
    release_train.compose_dev_metric = recorded_dev_metric
    release_train.run = recorded_run
    release_train.display = timed_display
    argv = ["--model", model, "--dataset", dataset, "--initial_time", run, "--times", str(int(run) + 1)]
    argv += ["--device", "cpu", "--no_display", "True", "--display_params", "False"]
    argv += ["--test", str(action == "test")]
    if action == "init":
        try:
            release_train.run_and_collect_results(release_train.get_args().parse_args(argv))
        except Built:
            return
        raise SystemExit("the release's train.py ended without building its model")
    release_train.run_and_collect_results(release_train.get_args().parse_args(argv))
    _, metrics, epochs_taken = result["returned"]
    summary = {
        "argv": argv,
        "epochs_taken": epochs_taken,
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": sorted(os.sched_getaffinity(0)),
        "checkpoint": f"inference_weights/{dataset}_{model}_seq2seq/{run}.pt",
    }
    if action == "train":
        ends = epoch_starts[1:] + [result["ended"]]
        summary.update(dev_scores=dev_scores, best_epoch=epochs_taken, best_dev_metric=metrics)
        summary["epoch_seconds"] = [round(b - a, 2) for a, b in zip(epoch_starts, ends)]
        summary["validation_seconds"] = [round(b - a, 2) for a, b in zip(validation_starts, ends)]
    else:
        summary.update(metrics=metrics)
    Path(out).write_text(json.dumps(summary, indent=1))


def release_check(dataset: str):
    """Every example the release loads equals the plugin's raw line (plus the release's `<eos>`)."""
    from utils.data_utils import load_data
    from utils.path_utils import load_paths

    # load_checkpoint=True: load_paths then leaves existing logs alone
    args = argparse.Namespace(dataset=dataset, model="check", model_type="seq2seq", test=False)
    args.load_checkpoint, args.limit = True, -1
    paths, _, metadata = load_paths(args)
    data, config = load_data(paths, metadata, args, {})
    for made in (f"experiments/logs/{dataset}_check_seq2seq", f"inference_weights/{dataset}_check_seq2seq"):
        Path(made).rmdir()  # made empty by load_paths
    vocab2idx = config["vocab2idx"]
    plan = json.loads(Path("splits.json").read_text())
    for split, (part, key) in plan["splits"].items():
        loaded = data["train"] if part == "train" else data[part][key]
        expected = release_examples(dataset, read_raw(Path(plan["plugin_data"]), split))
        assert len(loaded) == len(expected), f"{split}: {len(loaded)} loaded, {len(expected)} expected"
        for i, (src, trg) in enumerate(expected):
            obj = loaded[i]
            assert (obj["src"], obj["trg"]) == (src, trg), f"{split} example {i + 1} differs"
            assert obj["src_vec"] == [vocab2idx[t] for t in src] and obj["trg_vec"] == [vocab2idx[t] for t in trg]
            assert config["UNK_id"] not in obj["src_vec"] + obj["trg_vec"], f"{split} example {i + 1}: <unk>"
        print(f"{split} -> {part} {key or ''}: {len(loaded)} examples as the plugin's raw lines")
    print("vocabulary:", " ".join(t for t, _ in sorted(vocab2idx.items(), key=lambda kv: kv[1])))


if __name__ == "__main__":
    if sys.argv[1:2] == ["release"]:
        release_main(*sys.argv[2:])
    else:
        main(sys.argv[1:])
