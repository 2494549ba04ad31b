"""Speed and memory of every preset against fairseq's own ``lstm`` of the same size.

    python examples/benchmark.py [--updates 300] [--archs gru_content gru_onestep ...]

Training: each model trains for a fixed number of updates on the Copy train split
(batch 32, Adam) through ``fairseq-train`` in its own process, interleaved with runs of the
built-in ``lstm`` (bidirectional encoder 64, decoder 128, embeddings 64, shared output
embedding).  Words per second is the median of fairseq's own ``wps`` over the logged
intervals after the first; peak memory is the process's maximum resident set size.  Ratios
are against the lstm runs of this same invocation, so the machine's speed cancels out.

Decoding: greedy decoding of 32 random digit strings of length 15, 100 and 500, forced to
emit exactly that many tokens, timed per output token (time / (sentences x steps)).
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LSTM_ARGS = ("--arch lstm --encoder-bidirectional --encoder-embed-dim 64 --encoder-hidden-size 64 "
             "--encoder-layers 1 --decoder-embed-dim 64 --decoder-hidden-size 128 --decoder-layers 1 "
             "--decoder-out-embed-dim 64 --share-decoder-input-output-embed --dropout 0.5").split()


def all_presets():
    from fairseq_monoattn.models.presets import PRESETS
    return list(PRESETS)


def ensure_copy_data(root: Path) -> Path:
    data = root / "copy"
    if not (data / "manifest.json").exists():
        from preprocess.prepare import prepare
        prepare("copy", data, seed=1)
    return data / "bin"


def train_once(data_bin: Path, model_args, updates: int, interval: int):
    """Run fairseq-train in a child process; return (median wps, peak RSS in MiB)."""
    command = [sys.executable, "-m", "fairseq_cli.train", str(data_bin), "--user-dir", str(REPO / "fairseq_monoattn"),
               *model_args, "--optimizer", "adam", "--lr", "1e-3", "--clip-norm", "5", "--batch-size", "32",
               "--max-update", str(updates), "--disable-validation", "--no-save", "--no-progress-bar",
               "--log-format", "json", "--log-interval", str(interval), "--seed", "1",
               "--required-batch-size-multiple", "1"]
    with tempfile.TemporaryFile("w+") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        _, status, usage = os.wait4(child.pid, 0)
        log.seek(0)
        text = log.read()
    if status != 0:
        raise SystemExit(f"fairseq-train failed for {' '.join(model_args)}:\n{text[-3000:]}")
    wps = [float(json.loads(line[line.index("{"):])["wps"]) for line in text.splitlines()
           if "train_inner" in line and "{" in line]
    if len(wps) < 2:
        raise SystemExit(f"too few logged intervals ({len(wps)}); raise --updates")
    return statistics.median(wps[1:]), usage.ru_maxrss / 1024


def decode_speed(arch: str, lengths=(15, 100, 500), sentences=32, repeats=2):
    """Seconds per output token of greedy decoding, forced to exactly `length` steps."""
    import torch
    from fairseq.sequence_generator import SequenceGenerator
    sys.path.insert(0, str(REPO / "tests"))
    from model_helpers import batch, build, digit_dictionary, random_digits

    d = digit_dictionary()
    model = build(arch, d, seed=0)
    g = torch.Generator().manual_seed(0)
    result = {}
    with torch.no_grad():  # warm-up: the first decoding of a process pays one-time costs
        SequenceGenerator([model], d, beam_size=1, max_len_b=5).generate([model], batch(d, [["1", "2"]]))
    for length in lengths:
        sample = batch(d, random_digits(g, sentences, length, length))
        generator = SequenceGenerator([model], d, beam_size=1, max_len_a=0, max_len_b=length, min_len=length)
        best = float("inf")
        with torch.no_grad():
            for _ in range(repeats):
                start = time.perf_counter()
                generator.generate([model], sample)
                best = min(best, time.perf_counter() - start)
        result[length] = best / (sentences * (length + 1))
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", nargs="+", default=None, help="presets to measure (default: all)")
    parser.add_argument("--updates", type=int, default=300, help="training updates per run")
    parser.add_argument("--interval", type=int, default=50, help="fairseq log interval (updates)")
    parser.add_argument("--data", type=Path, default=REPO / "runs" / "benchmark", help="where Copy data is prepared")
    parser.add_argument("--skip-decoding", action="store_true")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--decode-sentences", type=int, default=32, help="sentences decoded together")
    args = parser.parse_args(argv)
    archs = args.archs or all_presets()
    lstm_runs, rows = [], []
    if not args.skip_training:
        data_bin = ensure_copy_data(args.data)
        print(f"training: {args.updates} updates, batch 32, Copy train split; torch threads: default", flush=True)
    for arch in ([] if args.skip_training else archs):
        lstm_runs.append(train_once(data_bin, LSTM_ARGS, args.updates, args.interval))
        wps, rss = train_once(data_bin, ["--arch", arch], args.updates, args.interval)
        reference = statistics.median(r[0] for r in lstm_runs)
        rows.append((arch, wps, rss))
        print(f"  {arch:<28} {wps:9.0f} wps ({wps / reference:4.2f}x lstm)  peak {rss:6.0f} MiB", flush=True)
    decoding = {}
    if not args.skip_decoding:
        for arch in archs:
            decoding[arch] = decode_speed(arch, sentences=args.decode_sentences)

    print()
    print(f"| model | words/s | vs lstm | peak MiB | decode ms/token @15 | @100 | @500 | @500 / @15 |"
          f"  (decoding {args.decode_sentences} sentences at a time)")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    lstm_wps = statistics.median(r[0] for r in lstm_runs) if lstm_runs else None
    if lstm_runs:
        print(f"| lstm (fairseq, {len(lstm_runs)} runs) | {lstm_wps:.0f} | 1.00 | {max(r[1] for r in lstm_runs):.0f} | | | | |")
    trained = {arch: (wps, rss) for arch, wps, rss in rows}
    for arch in archs:
        cells = ["", "", "", ""]
        if arch in decoding:
            per = decoding[arch]
            cells = [f"{per[15] * 1e3:.3f}", f"{per[100] * 1e3:.3f}", f"{per[500] * 1e3:.3f}", f"{per[500] / per[15]:.2f}"]
        wps, rss = trained.get(arch, (None, None))
        train_cells = [f"{wps:.0f}", f"{wps / lstm_wps:.2f}", f"{rss:.0f}"] if wps else ["", "", ""]
        print(f"| {arch} | " + " | ".join(train_cells + cells) + " |")


if __name__ == "__main__":
    main()
