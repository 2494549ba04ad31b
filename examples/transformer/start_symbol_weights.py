"""How much each decoder self-attention head of a Transformer checkpoint rests on the start
symbol, step by step, teacher-forced on one example of a prepared split:

    python examples/transformer/start_symbol_weights.py --checkpoint CK.pt --data DATA \\
        --split test100 --example 2 --steps 5 10 20 30 60

DATA is a folder made by fairseq-monoattn-prepare (raw/ and bin/).  Prints, per layer and head,
the weight the step puts on step 0 (the start symbol) at each of --steps."""

import argparse
from pathlib import Path

import torch

from fairseq_monoattn.attention_maps import decoder_self_attention, encode, load_checkpoint


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, type=Path)
    parser.add_argument("--data", required=True, type=Path, help="a prepared task folder (raw/ and bin/)")
    parser.add_argument("--split", default="test100")
    parser.add_argument("--example", type=int, default=0, help="line number in the split, from 0")
    parser.add_argument("--steps", type=int, nargs="+", default=[5, 10, 20, 30, 60])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    loaded = load_checkpoint(args.checkpoint, args.data / "bin")
    lines = {side: (args.data / "raw" / f"{args.split}.{side}").read_text().splitlines() for side in ("src", "tgt")}
    if not 0 <= args.example < len(lines["src"]):
        parser.error(f"--example {args.example}: {args.split} has {len(lines['src'])} examples")
    source = encode(loaded.task.source_dictionary, lines["src"][args.example], "source")
    target = encode(loaded.task.target_dictionary, lines["tgt"][args.example], "target")
    weights = decoder_self_attention(loaded.model, source, target)  # (layers, heads, T, T)
    steps = [t for t in args.steps if t < weights.shape[2]]
    print(f"weight on the start symbol at steps {steps} (target of {target.numel()} tokens)")
    for layer in range(weights.shape[0]):
        for head in range(weights.shape[1]):
            row = " ".join(f"{weights[layer, head, t, 0]:.3f}" for t in steps)
            print(f"layer {layer} head {head}: {row}")


if __name__ == "__main__":
    main()
