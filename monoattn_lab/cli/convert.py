"""fairseq-monoattn-convert: turn a model of the authors' release (a state dict its train.py
saved) into a fairseq checkpoint of the matching preset, on your data's dictionaries, so that
fairseq-generate and fairseq-monoattn-score run it.  The converted model computes the release's
function (the release's conventions are set as options: decoder start <s>, no query bias, two
value matrices, its per-column sum).  An existing --out is never replaced.

    fairseq-monoattn-convert --release-checkpoint inference_weights/fgc_BiGRU_MonoAttn_seq2seq/0.pt \\
        --release-model BiGRU_MonoAttn --vocab processed_data/fgc/metadata.pkl --data data/inv_recopy/bin \\
        --out checkpoints/release-monoattn.pt
"""

import json
import pickle
import sys
from pathlib import Path
from typing import List, Optional

from .common import Parser


class _PlainUnpickler(pickle.Unpickler):
    """Reads dicts, lists, strings and numbers only: a pickle that names any class is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing {module}.{name}: the vocabulary file should hold plain values")


def read_vocab(path: Path) -> List[str]:
    """The release's tokens by index: its metadata.pkl ("vocab2idx"), a JSON object token -> index,
    or a text file with one token a line."""
    if path.suffix == ".pkl":
        with open(path, "rb") as handle:
            mapping = _PlainUnpickler(handle).load().get("vocab2idx")
    elif path.suffix == ".json":
        mapping = json.loads(path.read_text())
    else:
        return path.read_text().split()
    if not isinstance(mapping, dict):
        raise ValueError("no token -> index mapping (vocab2idx) in it")
    tokens = sorted(mapping, key=mapping.get)
    if [mapping[t] for t in tokens] != list(range(len(tokens))):
        raise ValueError("its indices are not 0 .. n-1")
    return tokens


def build_parser() -> Parser:
    from ..release import RELEASE_MODELS

    parser = Parser(prog="fairseq-monoattn-convert", description=__doc__)
    parser.add_argument("--release-checkpoint", type=Path, required=True, metavar="FILE",
                        help="a state dict saved by the release (its inference_weights/*.pt)")  # fmt: skip
    parser.add_argument("--release-model", required=True, metavar="NAME",
                        help="the release's --model: " + ", ".join(RELEASE_MODELS))  # fmt: skip
    parser.add_argument("--vocab", type=Path, required=True, metavar="FILE",
                        help="the release's vocabulary: its processed_data/DATASET/metadata.pkl, a JSON token -> "
                             "index, or one token a line")  # fmt: skip
    parser.add_argument("--data", type=Path, required=True, metavar="DIR",
                        help="the fairseq-binarized data the checkpoint is for (its dict.*.txt)")  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, metavar="FILE", help="the fairseq checkpoint to write")
    parser.add_argument("--value-path", choices=("two", "folded"), default="two",
                        help="W_v and W_o as two layers (trains as the release) or multiplied out")  # fmt: skip
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from ..release import RELEASE_MODELS

    if args.release_model not in RELEASE_MODELS:
        parser.error(f"--release-model: unknown {args.release_model!r}; known: {', '.join(RELEASE_MODELS)}")
    for option, path in (("--release-checkpoint", args.release_checkpoint), ("--vocab", args.vocab)):
        if not path.is_file():
            parser.error(f"{option} {path}: no such file")
    dictionaries = [args.data / f"dict.{side}.txt" for side in ("src", "tgt")]
    missing = [str(path) for path in dictionaries if not path.is_file()]
    if missing:
        parser.error(f"--data {args.data}: no {', '.join(missing)}")
    if args.out.exists():
        parser.error(f"--out {args.out} exists; nothing was written")
    try:
        vocab = read_vocab(args.vocab)
    except (ValueError, OSError, pickle.UnpicklingError, json.JSONDecodeError) as error:
        parser.error(f"--vocab {args.vocab}: {error}")
    import torch
    from fairseq.data import Dictionary

    from ..release import ReleaseConversionError, convert, write_fairseq_checkpoint

    try:
        saved = torch.load(args.release_checkpoint, map_location="cpu", weights_only=True)
    except Exception as error:  # torch's unpickler raises many kinds for a damaged file
        parser.error(f"--release-checkpoint {args.release_checkpoint}: cannot read it ({type(error).__name__})")
    state = saved.get("model_state_dict", saved) if isinstance(saved, dict) else None
    if not isinstance(state, dict):
        parser.error(f"--release-checkpoint {args.release_checkpoint}: no state dict in it")
    source, target = (list(Dictionary.load(str(path)).symbols) for path in dictionaries)
    try:
        converted = convert(state, args.release_model, vocab, source, target, value_path=args.value_path)
        model_cfg = write_fairseq_checkpoint(converted, args.data, args.out,
                                             source={"checkpoint": str(args.release_checkpoint),
                                                     "release_model": args.release_model})  # fmt: skip
    except ReleaseConversionError as error:
        print(f"fairseq-monoattn-convert: error: {args.release_checkpoint}: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: --arch {model_cfg['_name']} " + " ".join(converted.command_line()[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
