"""Score a trained checkpoint on test splits: greedy sequence accuracy and mean edit distance.

    python examples/score.py CHECKPOINT --data DIR/bin --splits test15 test30 test100 --out scores.json

Accuracy: the whole output, EOS included, equals the target.  Edit distance: NLTK's, on the
tokens (EOS excluded).  Every example counts: the denominator is the split's full size.
Writes JSON (never over an existing file unless --force) and prints a table.
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--data", type=Path, required=True, help="the fairseq-binarized data folder (DIR/bin)")
    parser.add_argument("--splits", nargs="+", required=True, help="splits to score, e.g. test15 test30 test100")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-output-len", type=int, default=None,
                        help="output length limit (default: 2 x the split's longest target + 10)")
    parser.add_argument("--predictions", action="store_true", help="also write OUT's stem + .<split>.txt hypotheses")
    parser.add_argument("--force", action="store_true", help="replace an existing --out")
    return parser.parse_args(argv)


def table(scores) -> str:
    rows = ["| split | size | accuracy % | mean edit distance |", "| --- | ---: | ---: | ---: |"]
    for split, s in scores.items():
        rows.append(f"| {split} | {s['size']} | {s['accuracy']:.2f} | {s['mean_edit_distance']:.2f} |")
    return "\n".join(rows)


def write_json_atomic(path: Path, value) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=2) + "\n")
    os.replace(tmp, path)


def score(checkpoint, data, splits, out, batch_size=64, max_output_len=None, predictions=False, force=False):
    import logging

    from tqdm import tqdm

    from fairseq_monoattn.evaluation import CheckpointError, load_checkpoint, score_split

    logging.getLogger("fairseq").setLevel(logging.WARNING)  # data-loading chatter per split

    checkpoint, data, out = Path(checkpoint), Path(data), Path(out)
    if out.exists() and not force:
        raise SystemExit(f"error: {out} exists; pass --force to replace it")
    try:
        models, task, _cfg = load_checkpoint(checkpoint, data)
    except CheckpointError as error:
        raise SystemExit(f"error: {error}") from None
    results = {}
    for split in splits:
        start = time.time()
        bar = lambda batches: tqdm(batches, desc=f"decoding {split}", leave=False, file=sys.stderr,  # noqa: E731
                                   disable=not sys.stderr.isatty())
        tally, hypotheses, limit = score_split(models, task, split, batch_size, max_output_len, progress=bar)
        results[split] = dict(tally.as_dict(), max_output_len=limit, seconds=round(time.time() - start, 1))
        if predictions:
            lines = [task.target_dictionary.string(hypotheses[i]) for i in range(len(hypotheses))]
            (out.parent / f"{out.stem}.{split}.txt").write_text("".join(line + "\n" for line in lines))
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out, {"checkpoint": str(checkpoint), "data": str(data), "decoding": "greedy",
                            "splits": results})
    return results


def main(argv=None):
    args = parse_args(argv)
    results = score(args.checkpoint, args.data, args.splits, args.out, args.batch_size, args.max_output_len,
                    args.predictions, args.force)
    print(table(results))


if __name__ == "__main__":
    main()
