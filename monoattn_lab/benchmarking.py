"""Speed and memory of every preset against fairseq's own ``lstm`` of the same size.

    python examples/benchmark.py [--updates 300] [--repeats 3] [--arch gru_content gru_onestep ...]
        [--epoch inv_recopy gru_monoattn [--epoch-against OTHER_CHECKOUT]]

Training: each model trains for a fixed number of updates on the Copy train split
(batch 32, Adam) through ``fairseq-train`` in its own process, beside two runs of the
built-in ``lstm`` (bidirectional encoder 64, decoder 128, embeddings 64, shared output
embedding): one as stock fairseq runs it (``--task translation``, the plugin loaded beside it,
which registers its components and changes nothing else), one in the plugin's task, which
applies the plugin's fixes to fairseq and its Adam step (``--task length_generalization
--train-batches sorted``: fairseq's batches, as the translation task makes them).  The preset
trains in the plugin's task too.  The three runs are repeated ``--repeats`` times, the presets
taking turns, the order of the three reversed every other round.  Words per second of a run is
the median of fairseq's own ``wps`` over the logged intervals after the first; peak memory is
the process's maximum resident set size.  A preset's two ratios are the medians over its
repeats of its run's words per second / each lstm run of its round, so the machine's speed, and
its drift during the invocation, cancel out; the spread of those ratios is printed beside them.

Decoding: greedy decoding of 32 random digit strings of length 15, 100 and 500, forced to
emit exactly that many tokens, timed per output token (time / (sentences x steps)), the least
time over three interleaved rounds of the lengths (``least_times``).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from fairseq.data import Dictionary, data_utils
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
from fairseq.sequence_generator import SequenceGenerator

from fairseq_monoattn import fast_path
from fairseq_monoattn.data.digits import RULES
from fairseq_monoattn.data.prepare import prepare
from fairseq_monoattn.models.presets import PRESETS  # importing this package registered the architectures
from fairseq_monoattn.modules import compiled
from fairseq_monoattn.modules.step_linear import read_rows, score_rows

from .spec import PLUGIN_DIR  # the plugin's package, for --user-dir

LSTM_ARGS = (
    "--arch lstm --encoder-bidirectional --encoder-embed-dim 64 --encoder-hidden-size 64 "
    "--encoder-layers 1 --decoder-embed-dim 64 --decoder-hidden-size 128 --decoder-layers 1 "
    "--decoder-out-embed-dim 64 --share-decoder-input-output-embed --dropout 0.5"
).split()


# the Transformer presets' reference: fairseq's plain transformer of transformer_small's size
TRANSFORMER_ARGS = (
    "--arch transformer --encoder-embed-dim 64 --encoder-ffn-embed-dim 256 --encoder-layers 3 "
    "--encoder-attention-heads 4 --decoder-embed-dim 64 --decoder-ffn-embed-dim 256 --decoder-layers 3 "
    "--decoder-attention-heads 4 --dropout 0.1 --share-decoder-input-output-embed"
).split()


# the task a reference run trains in: stock fairseq's, or the plugin's (its fixes applied), with
# the same batches; the presets train in the plugin's
STOCK_TASK = ["--task", "translation"]
PLUGIN_TASK = ["--task", "length_generalization", "--train-batches", "sorted"]
TASKS = {"stock": STOCK_TASK, "plugin": PLUGIN_TASK}


def reference_args(arch: str):
    """The fairseq model a preset is measured against: its plain transformer for the Transformer
    presets, its lstm for the GRU ones."""
    return TRANSFORMER_ARGS if arch.startswith("transformer_") else LSTM_ARGS


def all_presets():
    """The names of every preset, in their registry order (the GRU presets, then the Transformer's)."""
    from fairseq_monoattn.models.transformer_monoattn import TRANSFORMER_PRESETS

    return list(PRESETS) + list(TRANSFORMER_PRESETS)


def prepared_once(task: str, folder: Path, **options) -> Path:
    """``task``'s data (seed 1) in ``folder``, prepared on first use (``options`` go to prepare)."""
    if not (folder / "manifest.json").exists():
        prepare(task, folder, seed=1, **options)
    return folder


def ensure_copy_data(root: Path) -> Path:
    """The binarized Copy data (seed 1) under ``root``, prepared on first use."""
    return prepared_once("copy", root / "copy") / "bin"


# -- training ----------------------------------------------------------------------------


def train_arguments(
    data_bin: Path, model_args, updates: int, interval: int, save_dir: str, num_workers: int = 0
) -> list:
    """fairseq-train's arguments for a benchmark run: Adam, batches of 32, no validation or saving
    (fairseq still makes its --save-dir, so the runs give it a temporary folder), the batches made
    in the training process (``num_workers`` 0, as the recipe trains; fairseq's default of 1 starts
    a data-loading process, which on a run pinned to one core takes its turns on that core)."""
    return [
        str(data_bin),
        "--user-dir",
        str(PLUGIN_DIR),
        *model_args,
        "--optimizer",
        "adam",
        "--lr",
        "1e-3",
        "--clip-norm",
        "5",
        "--batch-size",
        "32",
        "--max-update",
        str(updates),
        "--disable-validation",
        "--no-save",
        "--save-dir",
        save_dir,
        "--no-progress-bar",
        "--log-format",
        "json",
        "--log-interval",
        str(interval),
        "--seed",
        "1",
        "--required-batch-size-multiple",
        "1",
        "--num-workers",
        str(num_workers),
    ]


def train_once(data_bin: Path, model_args, updates: int, interval: int, num_workers: int = 0):
    """Run fairseq-train in a child process; return (median wps, peak RSS in MiB)."""
    with tempfile.TemporaryFile("w+") as log, tempfile.TemporaryDirectory() as save_dir:
        arguments = train_arguments(data_bin, model_args, updates, interval, save_dir, num_workers)
        child = subprocess.Popen([sys.executable, "-m", "fairseq_cli.train", *arguments], stdout=log,
                                 stderr=subprocess.STDOUT)  # fmt: skip
        _, status, usage = os.wait4(child.pid, 0)
        log.seek(0)
        text = log.read()
    if status != 0:
        raise SystemExit(f"fairseq-train failed for {' '.join(model_args)}:\n{text[-3000:]}")
    wps = [
        float(json.loads(line[line.index("{") :])["wps"])
        for line in text.splitlines()
        if "train_inner" in line and "{" in line
    ]
    if len(wps) < 2:
        raise SystemExit(f"too few logged intervals ({len(wps)}); raise --updates")
    return statistics.median(wps[1:]), usage.ru_maxrss / 1024


def timed_fairseq_train(argv) -> None:
    """Run fairseq-train with ``argv`` in this process, timing where an update's time goes; print one
    JSON line: milliseconds an update in fairseq's training loop (``loop``: data, logging and the
    trainer), in ``Trainer.train_step`` (``trainer``: the update, gradient clipping, Adam, statistics)
    and in the task's ``train_step`` (``model``: the model's forward and backward with the loss)."""
    import fairseq.tasks.fairseq_task as fairseq_task
    import fairseq.trainer as fairseq_trainer
    import fairseq_cli.train as fairseq_train

    spent = {"loop": 0.0, "trainer": 0.0, "model": 0.0, "updates": 0}

    def timed(function, key, count=False):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            result = function(*args, **kwargs)
            spent[key] += time.perf_counter() - start
            spent["updates"] += count
            return result

        return wrapper

    fairseq_train.train = timed(fairseq_train.train, "loop")
    fairseq_trainer.Trainer.train_step = timed(fairseq_trainer.Trainer.train_step, "trainer", count=True)
    fairseq_task.FairseqTask.train_step = timed(fairseq_task.FairseqTask.train_step, "model")
    sys.argv = ["fairseq-train", *argv]
    fairseq_train.cli_main()
    updates = spent.pop("updates")
    print("UPDATE-SPLIT " + json.dumps({key: 1e3 * value / updates for key, value in spent.items()}), flush=True)


def update_split(data_bin: Path, model_args, updates: int, num_workers: int = 0) -> dict:
    """``timed_fairseq_train`` of ``model_args`` in a child process, with the training options of
    ``train_once``: {"loop", "trainer", "model"} in milliseconds an update."""
    code = "import sys; from monoattn_lab import benchmarking; benchmarking.timed_fairseq_train(sys.argv[1:])"
    with tempfile.TemporaryDirectory() as save_dir:
        arguments = train_arguments(data_bin, model_args, updates, updates, save_dir, num_workers)
        done = subprocess.run([sys.executable, "-c", code, *arguments], capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("UPDATE-SPLIT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"fairseq-train failed for {' '.join(model_args)}:\n{(done.stdout + done.stderr)[-3000:]}")
    return json.loads(lines[-1][len("UPDATE-SPLIT ") :])


def print_update_split(archs, data_bin: Path, updates: int, num_workers: int = 0) -> None:
    """Where an update's time goes inside fairseq-train, for the reference model and each preset, and
    what that leaves for speed-ups of the model: the ratio to the reference if the model's forward
    and backward took no time at all, and the forward and backward a preset needs for 1.5x."""
    print(f"\nwhere an update's time goes in fairseq-train ({updates} updates, milliseconds an update)")
    print("| model | whole update (training loop) | in Trainer.train_step | of which forward and backward | the rest "
          "| vs the reference with a free forward and backward | forward and backward for 1.5x |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    references = {}
    for arch in archs:
        kind = reference_args(arch)[1]
        if kind not in references:
            references[kind] = update_split(data_bin, reference_args(arch), updates, num_workers)
            ref = references[kind]
            print(table_row([f"{kind} (fairseq)", f"{ref['loop']:.2f}", f"{ref['trainer']:.2f}", f"{ref['model']:.2f}",
                             f"{ref['loop'] - ref['model']:.2f}", "", ""]))  # fmt: skip
        ref, part = references[kind], update_split(data_bin, ["--arch", arch], updates, num_workers)
        rest = part["loop"] - part["model"]
        print(table_row([arch, f"{part['loop']:.2f}", f"{part['trainer']:.2f}", f"{part['model']:.2f}", f"{rest:.2f}",
                         f"{ref['loop'] / rest:.2f}", f"{ref['loop'] / 1.5 - rest:.2f}"]))  # fmt: skip


def epoch_seconds(task: str, arch: str, root: Path, epochs: int = 2, checkout: Optional[Path] = None) -> list:
    """Per epoch of the first ``epochs`` of ``arch`` on ``task`` (data seed 1) with the paper's
    recipe, {"epoch": seconds, "validation": seconds}: an epoch runs from fairseq's "begin training
    epoch N" to the next one (to "done training" for the last), so it holds its updates, the greedy
    decoding of the valid split and the checkpoints it saves; "validation" is the part from "begin
    validation" on (decoding and saving).  The process's start and the data's loading are outside.
    fairseq's own clocks count whole seconds (and ``train_wall`` only the updates), so the log's
    lines are timed as they arrive.

    ``checkout``: another checkout of this repository (an older commit, say) trains instead of
    this installation, with its own plugin and its own recipe, on the same data: its process runs
    in the checkout (the folder Python reads first) with the checkout first on ``PYTHONPATH``."""
    data = prepared_once(task, root / f"{task}-seed1", joined_dictionary=True).resolve()
    env, cwd = dict(os.environ, PYTHONUNBUFFERED="1"), None
    if checkout is None:
        from fairseq_monoattn.recipes import recipe_options

        plugin, recipe = PLUGIN_DIR, recipe_options("paper", max_epoch=epochs)
    else:
        env["PYTHONPATH"] = os.pathsep.join([str(checkout), *filter(None, [os.environ.get("PYTHONPATH")])])
        plugin, recipe, cwd = checkout / "fairseq_monoattn", checkout_recipe(checkout, epochs, env), checkout
    starts, validations, done, lines = [], [], [], []
    with tempfile.TemporaryDirectory() as save:
        command = [sys.executable, "-m", "fairseq_cli.train", str(data / "bin"), "--user-dir", str(plugin),
                   "--arch", arch, *recipe, "--seed", "1", "--save-dir", save,
                   "--no-epoch-checkpoints", "--log-format", "json", "--no-progress-bar"]  # fmt: skip
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd
        ) as run:
            for line in run.stdout:
                for marker, times in (("begin training epoch", starts), ("begin validation", validations),
                                      ("done training in", done)):  # fmt: skip
                    if marker in line:
                        times.append(time.perf_counter())
                lines.append(line)
    if run.returncode != 0 or not len(starts) == len(validations) == epochs or len(done) != 1:
        raise SystemExit(f"fairseq-train failed for {arch} on {task}:\n{''.join(lines[-60:])}")
    ends = starts[1:] + done
    return [{"epoch": end - start, "validation": end - valid} for start, valid, end in zip(starts, validations, ends)]


def check_plugin_checkout(path: Path, option: str = "--epoch-against") -> Path:
    """``path`` as a checkout of this repository (its ``fairseq_monoattn/recipes.py`` there), else
    a SystemExit naming ``option`` and what is missing."""
    path = Path(path).resolve()
    if not (path / "fairseq_monoattn" / "recipes.py").is_file():
        raise SystemExit(
            f"{option} {path}: not a checkout of fairseq-monoattn (no fairseq_monoattn/recipes.py there); "
            "give the folder that holds setup.py, e.g. one made by `git worktree add`"
        )
    return path


def checkout_recipe(checkout: Path, epochs: int, env) -> list:
    """The paper's recipe as ``checkout``'s own code writes it (options change between commits)."""
    code = (
        "import json; from fairseq_monoattn.recipes import recipe_options; "
        f"print(json.dumps(recipe_options('paper', max_epoch={epochs})))"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=checkout, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-10:])
        raise SystemExit(f"--epoch-against {checkout}: its recipe_options('paper') failed:\n{tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def later_epochs(epochs: list) -> dict:
    """The mean of every epoch after the first (which also warms up allocators and caches)."""
    later = epochs[1:]
    return {key: statistics.mean(e[key] for e in later) for key in ("epoch", "validation")}


def print_epochs_against(task: str, arch: str, root: Path, checkout: Path, repeats: int, epochs: int) -> None:
    """``repeats`` pairs of runs, this installation's and ``checkout``'s, the order alternating
    from pair to pair; each run's epoch is the mean of its epochs after the first, and the ratio
    this / checkout is taken within each pair (median and range printed)."""
    print(f"\n{arch} on {task}, the paper's recipe, one thread: {repeats} pairs of {epochs}-epoch runs, "
          f"this installation against {checkout} (epochs after the first; ratio within each pair)")  # fmt: skip
    pairs = []
    for repeat in range(repeats):
        order = (None, checkout) if repeat % 2 == 0 else (checkout, None)
        runs = {side: later_epochs(epoch_seconds(task, arch, root, epochs, side)) for side in order}
        pairs.append((runs[None], runs[checkout], runs[None]["epoch"] / runs[checkout]["epoch"]))
        print(f"  pair {repeat + 1}: this {pairs[-1][0]['epoch']:.2f} s, the checkout {pairs[-1][1]['epoch']:.2f} s, "
              f"{pairs[-1][2]:.3f}", flush=True)  # fmt: skip
    ratios = [pair[2] for pair in pairs]
    print(table_row(["code", "epoch, s (each pair)", "of which validating", "this / checkout (median)", "(range)"]))
    print(table_row(["---", "---:", "---:", "---:", "---:"]))
    for side, name in ((0, "this installation"), (1, str(checkout))):
        times = ", ".join(f"{pair[side]['epoch']:.2f}" for pair in pairs)
        validating = [pair[side]["validation"] for pair in pairs]
        ratio = f"{statistics.median(ratios):.3f}" if side == 0 else ""
        spread = f"{min(ratios):.3f}-{max(ratios):.3f}" if side == 0 else ""
        print(table_row([name, times, f"{min(validating):.2f}-{max(validating):.2f}", ratio, spread]))


# -- decoding ----------------------------------------------------------------------------


def digit_dictionary():
    """A fairseq Dictionary of the ten digits (after the special symbols)."""
    dictionary = Dictionary()
    for digit in "0123456789":
        dictionary.add_symbol(digit)
    return dictionary


def build_preset(arch: str, dictionary, seed: int = 0):
    """Model ``arch`` with its default options over ``dictionary`` (source and target), in eval mode."""
    args = argparse.Namespace(arch=arch)
    ARCH_CONFIG_REGISTRY[arch](args)
    task = argparse.Namespace(source_dictionary=dictionary, target_dictionary=dictionary)
    torch.manual_seed(seed)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, task).eval()


def random_digits(generator, count: int, low: int, high: int):
    """``count`` lists of ``low``..``high`` random digits (as strings), drawn from ``generator``."""
    lengths = torch.randint(low, high + 1, (count,), generator=generator).tolist()
    return [[str(d) for d in torch.randint(0, 10, (n,), generator=generator).tolist()] for n in lengths]


def source_batch(dictionary, sources):
    """A fairseq sample of token lists, each ending in </s>, left-padded as fairseq's translation task pads."""
    src = [torch.tensor([dictionary.index(t) for t in tokens] + [dictionary.eos()]) for tokens in sources]
    return {
        "id": torch.arange(len(src)),
        "net_input": {
            "src_tokens": data_utils.collate_tokens(src, dictionary.pad(), left_pad=True),
            "src_lengths": torch.tensor([len(s) for s in src]),
        },
        "nsentences": len(src),
    }


def least_times(runs, rounds: int = 3, min_seconds: float = 0.3) -> dict:
    """The least time of each of ``runs`` ({key: function returning a tuple of seconds}), taken
    entry by entry.  Every round runs each of them in turn, again and again until it has taken
    ``min_seconds`` (at least once): short runs are timed many times, and a slow spell of the
    machine falls on every run alike instead of on one length.  Interference only ever adds time,
    so the least is the measure."""
    best = {}
    for _ in range(rounds):
        for key, run in runs.items():
            spent = 0.0
            while True:
                seconds = run()
                best[key] = tuple(map(min, zip(best.get(key, seconds), seconds)))
                spent += seconds[0]
                if spent >= min_seconds:
                    break
    return best


def decode_speed(arch: str, lengths=(15, 100, 500), sentences=32, rounds=3):
    """Seconds per output token of greedy decoding, forced to exactly `length` steps."""
    d = digit_dictionary()
    model = build_preset(arch, d, seed=0)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # warm-up: the first decoding of a process pays one-time costs
        SequenceGenerator([model], d, beam_size=1, max_len_b=5).generate([model], source_batch(d, [["1", "2"]]))

    def run(sample, generator):
        with torch.no_grad():
            start = time.perf_counter()
            generator.generate([model], sample)
            return (time.perf_counter() - start,)

    runs = {}
    for length in lengths:
        sample = source_batch(d, random_digits(g, sentences, length, length))
        generator = SequenceGenerator([model], d, beam_size=1, max_len_a=0, max_len_b=length, min_len=length)
        runs[length] = lambda sample=sample, generator=generator: run(sample, generator)
    return {length: seconds / (sentences * (length + 1)) for length, (seconds,) in least_times(runs, rounds).items()}


def decode_breakdown(arch: str, lengths=(15, 100, 500), sentences=32, rounds=3):
    """Where a greedy step's time goes, per output token at each length (seconds): ``generator``,
    fairseq's SequenceGenerator as ``decode_speed`` times it; ``model``, the decoder's own
    incremental steps driven directly (no search bookkeeping); ``attention``, the part of
    ``model`` spent in the cross-attention's step; ``reads``, the two batched products an attention
    step cannot avoid on that memory (a score per source position from the keys, when the preset
    has content scores, and the weighted sum of the values), timed alone on the decoder's cached
    memory, as its steps compute them.  ``model - attention`` is the recurrence and the output
    layer, which do not depend on the source length."""
    d = digit_dictionary()
    model = build_preset(arch, d, seed=0)
    attention = model.decoder.attention
    spent = [0.0]
    attend = attention.attend_parts  # what the decoder's step calls (``attend`` calls it too)

    def timed_attend(*args, **kwargs):
        start = time.perf_counter()
        result = attend(*args, **kwargs)
        spent[0] += time.perf_counter() - start
        return result

    attention.attend_parts = timed_attend
    g = torch.Generator().manual_seed(0)
    generator_seconds = decode_speed(arch, lengths, sentences, rounds)

    def run(length, sample, targets):
        with torch.no_grad():
            encoder_out = model.encoder(**sample["net_input"])
            state, spent[0] = {}, 0.0
            start = time.perf_counter()
            for step in range(length + 1):
                model.decoder(targets[:, : step + 1], encoder_out=encoder_out, incremental_state=state)
            model_seconds = time.perf_counter() - start
            memory = state_memory(model, state)
            keys = memory.get("keys") if attention.scorer is not None else None
            weights = torch.rand(memory["values"].shape[:2], generator=g)
            query = torch.rand(weights.size(0), keys.size(-1), generator=g) if keys is not None else None
            start = time.perf_counter()
            for _ in range(length + 1):  # the products as the decoder's steps compute them
                if keys is not None:
                    score_rows(memory, "keys", query)
                read_rows(memory, "values", weights)
            return model_seconds, spent[0], time.perf_counter() - start

    runs = {}
    for length in lengths:
        sample = source_batch(d, random_digits(g, sentences, length, length))
        targets = torch.randint(d.nspecial, len(d), (sentences, length + 1), generator=g)
        runs[length] = lambda length=length, sample=sample, targets=targets: run(length, sample, targets)
    result = {}
    for length, (model_seconds, attention_seconds, reads) in least_times(runs, rounds).items():
        tokens = sentences * (length + 1)
        result[length] = {
            "generator": generator_seconds[length],
            "model": model_seconds / tokens,
            "attention": attention_seconds / tokens,
            "reads": reads / tokens,
        }
    return result


def state_memory(model, incremental_state):
    """The cross-attention's memory (keys, values, positions) the decoder cached in its state."""
    return model.decoder.get_incremental_state(incremental_state, "memory")


def streaming_rate(elements: int, repeats: int = 20) -> float:
    """Bytes a second at which this machine reads a float32 tensor of ``elements`` by summing it,
    again and again: the rate of its caches while the tensor fits them, of its main memory once it
    does not."""
    tensor = torch.randn(elements)
    for _ in range(3):
        tensor.sum()
    start = time.perf_counter()
    for _ in range(repeats):
        tensor.sum()
    return repeats * tensor.numel() * tensor.element_size() / (time.perf_counter() - start)


def reference_model(kind: str, dictionary):
    """fairseq's own ``kind`` ("lstm" or "transformer") of the presets' size (``LSTM_ARGS``,
    ``TRANSFORMER_ARGS``), built in this process over ``dictionary`` as fairseq-train would build it."""
    from fairseq import options

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, ["unused-data"] + (TRANSFORMER_ARGS if kind == "transformer" else LSTM_ARGS)
    )
    task = argparse.Namespace(source_dictionary=dictionary, target_dictionary=dictionary)
    return ARCH_MODEL_REGISTRY[args.arch].build_model(args, task)


def training_batch(dictionary, generator, sentences: int = 32, low: int = 5, high: int = 10):
    """A teacher-forced Copy batch as fairseq's translation task makes it: sources sorted by length,
    left-padded, each ending in </s>; targets the sources, </s> moved to the front as the decoder input."""
    sources = random_digits(generator, sentences, low, high)
    return teacher_forced_batch(dictionary, [(source, source) for source in sources])


def teacher_forced_batch(dictionary, pairs):
    """A fairseq sample of (source, target) token lists, sorted by source length (longest first)."""
    pairs = sorted(pairs, key=lambda pair: len(pair[0]), reverse=True)
    sample = source_batch(dictionary, [source for source, _ in pairs])
    targets = [torch.tensor([dictionary.index(t) for t in target] + [dictionary.eos()]) for _, target in pairs]
    pad, eos = dictionary.pad(), dictionary.eos()
    sample["net_input"]["prev_output_tokens"] = data_utils.collate_tokens(targets, pad, eos, move_eos_to_beginning=True)
    sample["target"] = data_utils.collate_tokens(targets, pad)
    return sample


def inv_recopy_batch(dictionary, generator, sentences: int = 32):
    """A teacher-forced Inv ReCopy batch: targets of 5-10 digits, sources their ReCopy (each digit
    written 1, 3 or 5 times by its value; 5-50 digits), otherwise as ``training_batch``."""
    targets = random_digits(generator, sentences, 5, 10)
    return teacher_forced_batch(dictionary, [RULES["inv_recopy"](target) for target in targets])


def training_update(model, dictionary, optimizer):
    """A function making one training update (forward, loss, backward, Adam) of ``model`` on a sample."""

    def update(sample):
        logits = model(**sample["net_input"])
        log_probs = model.get_normalized_probs(logits, log_probs=True)
        loss = F.nll_loss(log_probs.flatten(0, 1), sample["target"].flatten(), ignore_index=dictionary.pad(),
                          reduction="sum")  # fmt: skip
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return update


def compiled_ratio(arch: str, task: str, rounds: int = 10, updates: int = 10) -> dict:
    """Training updates of ``arch`` with the C++ kernels (the encoder's GRU loop, the decoder's
    training loop or its step nodes) against the Python code, in one process: ``rounds`` rounds of
    ``updates`` updates with each, alternating which goes first, on the same batches ("copy": 5-10
    digits; "inv_recopy": sources of 5-50 digits).  Returns each one's median milliseconds an
    update and the median of the rounds' ratios."""
    if compiled.kernels is None:
        raise SystemExit("--compiled: the C++ kernels are not built (see the README's installation)")
    dictionary = digit_dictionary()
    model = build_preset(arch, dictionary)
    if model.fast_path is None:
        raise SystemExit(f"--compiled: {fast_path.describe(None)}")
    model.train()
    update = training_update(model, dictionary, torch.optim.Adam(model.parameters(), lr=1e-3))
    generator = torch.Generator().manual_seed(0)
    make = inv_recopy_batch if task == "inv_recopy" else training_batch
    batches = [make(dictionary, generator) for _ in range(updates)]
    for sample in batches[:3]:  # warm-up
        update(sample)
    times, ratios, chosen = {True: [], False: []}, [], model.fast_path
    try:
        for round_ in range(rounds):
            for enabled in (True, False) if round_ % 2 else (False, True):
                fast_path.install(model, chosen if enabled else None)
                start = time.perf_counter()
                for sample in batches:
                    update(sample)
                times[enabled].append(1e3 * (time.perf_counter() - start) / updates)
            ratios.append(times[True][-1] / times[False][-1])
    finally:
        fast_path.install(model, chosen)
    return {"compiled": statistics.median(times[True]), "python": statistics.median(times[False]),
            "ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios)}  # fmt: skip


def print_compiled(archs) -> None:
    """The Markdown table of ``compiled_ratio`` for ``archs`` on Copy and Inv ReCopy batches."""
    print("\ntraining updates with the C++ kernels against the Python code (batch 32, one process, alternating)")
    print("| model | batches | Python, ms an update | C++, ms an update | C++ / Python (median) | (range) |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for arch in archs:
        for task in ("copy", "inv_recopy"):
            row = compiled_ratio(arch, task)
            print(table_row([arch, task, f"{row['python']:.2f}", f"{row['compiled']:.2f}", f"{row['ratio']:.3f}",
                             f"{row['low']:.3f}-{row['high']:.3f}"]))  # fmt: skip


def update_profile(arch: str, updates: int = 10, sentences: int = 32) -> dict:
    """One process's cost of a training update (forward, backward, Adam) of ``arch`` (or, with
    ``arch`` = "lstm" or "transformer", fairseq's reference model) on Copy batches of 5-10 digits:
    milliseconds an update, ATen operator calls an update, how many of them are matrix products and
    the products' floating-point operations (GFLOP an update, torch.profiler's count of ``mm``,
    ``addmm`` and ``bmm``, those the C++ kernels call included)."""
    from torch.profiler import ProfilerActivity, profile

    dictionary = digit_dictionary()
    if arch in ("lstm", "transformer"):
        model = reference_model(arch, dictionary)
    else:
        model = build_preset(arch, dictionary)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    batches = [training_batch(dictionary, generator, sentences) for _ in range(updates)]
    update = training_update(model, dictionary, optimizer)
    for sample in batches[:3]:  # warm-up
        update(sample)
    start = time.perf_counter()
    for sample in batches:
        update(sample)
    seconds = time.perf_counter() - start
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as profiler:
        for sample in batches:
            update(sample)
    events = [event for event in profiler.key_averages() if event.key.startswith("aten::")]
    products = [event for event in events if event.key in ("aten::mm", "aten::addmm", "aten::bmm")]
    return {
        "ms": 1e3 * seconds / updates,
        "calls": sum(event.count for event in events) / updates,
        "products": sum(event.count for event in products) / updates,
        "gflops": sum(event.flops for event in products) / updates / 1e9,
    }


def print_update_profile(archs) -> None:
    """The Markdown table of ``update_profile`` for the reference models and ``archs``."""
    references = ["transformer"] if all(a.startswith("transformer_") for a in archs) else ["lstm"]
    print("\none training update in this process (batch 32, Copy of 5-10 digits; forward, backward, Adam)")
    print("| model | ms an update | ATen calls an update | of which matrix products | their GFLOP |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for arch in references + list(archs):
        row = update_profile(arch)
        name = f"{arch} (fairseq)" if arch in references else arch
        print(table_row([name, f"{row['ms']:.1f}", f"{row['calls']:.0f}", f"{row['products']:.0f}",
                         f"{row['gflops']:.3f}"]))  # fmt: skip


# -- command line ------------------------------------------------------------------------


def parse_args(argv=None):
    """The benchmark's options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", nargs="+", default=None, help="presets to measure (default: all)")
    parser.add_argument("--updates", type=int, default=300, help="training updates per run")
    parser.add_argument("--interval", type=int, default=50, help="fairseq log interval (updates)")
    parser.add_argument(
        "--num-workers",
        type=int,
        default=0,
        help="fairseq-train's --num-workers for the training runs of both models (default 0: the batches are "
        "made in the training process, as the recipe trains; fairseq's own default is 1)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="rounds of training runs: each preset once, each beside a run of the lstm as stock fairseq trains it "
        "and one in the plugin's task (median ratios)",
    )
    parser.add_argument("--data", type=Path, default=Path("runs") / "benchmark", help="where Copy data is prepared")
    parser.add_argument("--skip-decoding", action="store_true")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--decode-sentences", type=int, default=32, help="sentences decoded together")
    parser.add_argument(
        "--decode-breakdown",
        action="store_true",
        help="also split each preset's per-token decoding time at 15, 100 and 500 into the search, the "
        "attention, the products on the keys and values, and the rest of the step",
    )
    parser.add_argument(
        "--update-profile",
        action="store_true",
        help="also count, in this process, the milliseconds and ATen operator calls of a training update of each "
        "preset and of fairseq's reference model",
    )
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="also time, in this process, training updates of each preset with the C++ kernels against the "
        "Python code, on Copy and Inv ReCopy batches",
    )
    parser.add_argument(
        "--update-split",
        action="store_true",
        help="also time, inside fairseq-train, the whole update, the trainer's step and the model's forward and "
        "backward, for each preset and its reference",
    )
    parser.add_argument(
        "--epoch",
        nargs=2,
        default=None,
        metavar=("TASK", "ARCH"),
        help="also time whole epochs (training and greedy validation) of ARCH on TASK with the paper's recipe",
    )
    parser.add_argument("--epochs", type=int, default=2, help="epochs of the --epoch run (the first is reported too)")
    parser.add_argument(
        "--epoch-against",
        type=Path,
        default=None,
        metavar="CHECKOUT",
        help="with --epoch: time the epochs of this installation against another checkout of this repository (an "
        "older commit, e.g. from `git worktree add`), in --epoch-repeats pairs of runs, alternating; the checkout "
        "trains with its own plugin and recipe, and its C++ kernels only if they are built in it",
    )
    parser.add_argument("--epoch-repeats", type=int, default=3, help="pairs of runs with --epoch-against")
    return parser.parse_args(argv)


def print_table(archs, reference_runs, rows, decoding, decode_sentences: int):
    """The Markdown table of the README: training against the reference runs (fairseq's lstm for
    the GRU presets, its transformer for the Transformer presets, as stock fairseq runs them and in
    the plugin's task), then decoding."""
    print()
    print(
        f"| model | words/s | vs stock fairseq | (range) | vs fairseq in the plugin's task | (range) | peak MiB "
        f"| decode ms/token @15 | @100 | @500 | @500 / @15 |  (decoding {decode_sentences} sentences at a time)"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    names = {"stock": "stock fairseq", "plugin": "the plugin's task"}
    for kind in ("lstm", "transformer"):
        for task in TASKS:
            runs = [r for r in reference_runs if r[2] == kind and r[3] == task]
            if runs:
                wps, rss = statistics.median(r[0] for r in runs), max(r[1] for r in runs)
                ratios = ["1.00", "", "", ""] if task == "stock" else ["", "", "1.00", ""]
                name = f"{kind} ({names[task]}, {len(runs)} runs)"
                print(table_row([name, f"{wps:.0f}", *ratios, f"{rss:.0f}"] + [""] * 4))
    for arch in archs:
        cells = ["", "", "", ""]
        if arch in decoding:
            per = decoding[arch]
            cells = [
                f"{per[15] * 1e3:.3f}",
                f"{per[100] * 1e3:.3f}",
                f"{per[500] * 1e3:.3f}",
                f"{per[500] / per[15]:.2f}",
            ]
        train_cells = [""] * 6
        if arch in rows:
            wps, ratios, rss = summarize(rows[arch])
            train_cells = [f"{wps:.0f}"]
            for task in TASKS:
                ratio, low, high = ratios[task]
                train_cells += [f"{ratio:.2f}", f"{low:.2f}-{high:.2f}"]
            train_cells.append(f"{rss:.0f}")
        print(table_row([arch] + train_cells + cells))


def print_breakdown(archs, sentences: int):
    """The Markdown table of ``decode_breakdown``: microseconds per output token."""
    print(f"\nper-token greedy decoding, {sentences} sentences at a time (microseconds a token)")
    print("| model | length | fairseq's search | decoder steps | of which attention | of which key and value products "
          "| decoder steps without attention |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for arch in archs:
        for length, part in decode_breakdown(arch, sentences=sentences).items():
            cells = [
                part["generator"],
                part["model"],
                part["attention"],
                part["reads"],
                part["model"] - part["attention"],
            ]
            print(table_row([arch, str(length)] + [f"{1e6 * c:.2f}" for c in cells]))
    # a step at length 500 reads the values (32 x 502 x 128 float32, 8.2 MB), and the keys too with
    # content scores: the least time that takes is their bytes over the rate the machine reads them at
    step_elements = sentences * 502 * 128
    for name, elements in [("cache", 2 * step_elements), ("main memory", 16 * step_elements)]:
        rate = streaming_rate(elements)
        print(
            f"\nreading {4 * elements / 1e6:.0f} MB again and again ({name}): {rate / 1e9:.1f} GB/s; at that rate "
            f"a step at length 500 reads the values in {1e6 * 4 * step_elements / rate / sentences:.1f} "
            f"microseconds a token, the keys and values in {1e6 * 8 * step_elements / rate / sentences:.1f}"
        )


def table_row(cells):
    """A Markdown table row; an empty cell is a single space."""
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def summarize(runs):
    """(median words/s, {"stock"/"plugin": (median ratio, lowest, highest)}, peak MiB) of a preset's
    runs, each given as (its words/s, its peak MiB, {"stock"/"plugin": the words/s of that
    reference run of its round})."""
    ratios = {task: [wps / references[task] for wps, _, references in runs] for task in TASKS}
    return (
        statistics.median(wps for wps, _, _ in runs),
        {task: (statistics.median(r), min(r), max(r)) for task, r in ratios.items()},
        max(rss for _, rss, _ in runs),
    )


def main(argv=None):
    """Train and decode each preset as the module docstring says, printing a Markdown table."""
    args = parse_args(argv)
    archs = args.arch or all_presets()
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be at least 1, not {args.repeats}")
    if args.epoch_against is not None:  # before minutes of other measurements
        if not args.epoch:
            raise SystemExit("--epoch-against needs --epoch TASK ARCH")
        if args.epoch_repeats < 1 or args.epochs < 2:
            raise SystemExit("--epoch-against needs --epoch-repeats of at least 1 and --epochs of at least 2")
        args.epoch_against = check_plugin_checkout(args.epoch_against)
    reference_runs, rows = [], {}
    if not args.skip_training:
        data_bin = ensure_copy_data(args.data)
        print(
            f"training: {args.updates} updates, batch 32, Copy train split, --num-workers {args.num_workers}, "
            f"{args.repeats} rounds, each a run of every preset in the plugin's task beside two of fairseq's own "
            f"model of that size (lstm or transformer): stock fairseq's ({' '.join(STOCK_TASK)}) and in the "
            f"plugin's task ({' '.join(PLUGIN_TASK)}), the order reversed every other round; "
            f"torch threads: {torch.get_num_threads()}; {compiled.describe()}",
            flush=True,
        )
    for repeat in range(0 if args.skip_training else args.repeats):
        for arch in archs:
            reference = reference_args(arch)
            order = ["stock", "plugin", arch] if repeat % 2 == 0 else [arch, "plugin", "stock"]
            references = {}
            for run in order:
                if run in TASKS:
                    reference_wps, reference_rss = train_once(
                        data_bin, [*reference, *TASKS[run]], args.updates, args.interval, args.num_workers
                    )
                    references[run] = reference_wps
                    reference_runs.append((reference_wps, reference_rss, reference[1], run))
                else:
                    model = ["--arch", arch, *PLUGIN_TASK]
                    wps, rss = train_once(data_bin, model, args.updates, args.interval, args.num_workers)
            rows.setdefault(arch, []).append((wps, rss, references))
            print(
                f"  {arch:<28} {wps:9.0f} wps ({wps / references['stock']:4.2f}x the stock {reference[1]}, "
                f"{wps / references['plugin']:4.2f}x the {reference[1]} in the plugin's task)  peak {rss:6.0f} MiB",
                flush=True,
            )
    decoding = {}
    if not args.skip_decoding:
        for arch in archs:
            decoding[arch] = decode_speed(arch, sentences=args.decode_sentences)
    if rows or decoding:
        print_table(archs, reference_runs, rows, decoding, args.decode_sentences)
    if args.decode_breakdown:
        print_breakdown(archs, args.decode_sentences)
    if args.update_profile:
        print_update_profile(archs)
    if args.compiled:
        print_compiled(archs)
    if args.update_split:
        print_update_split(archs, ensure_copy_data(args.data), args.updates, args.num_workers)
    if args.epoch and args.epoch_against is not None:
        print_epochs_against(*args.epoch, args.data, args.epoch_against, args.epoch_repeats, args.epochs)
    elif args.epoch:
        task, arch = args.epoch
        epochs = epoch_seconds(task, arch, args.data, args.epochs)
        timed = [f"epoch {i + 1} {e['epoch']:.1f} s ({e['validation']:.1f} s validating)" for i, e in enumerate(epochs)]
        print(f"\n{arch} on {task}, the paper's recipe, one thread: " + ", ".join(timed))
