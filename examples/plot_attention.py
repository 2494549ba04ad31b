"""Render a trained model's cross-attention for one input as a PNG heat map.

    python examples/plot_attention.py --checkpoint CK.pt --data DIR/bin --source "4 7 9 8" \
        [--target "4 7 9 8"] --out attention.png [--title ...] [--force]

    # one panel per checkpoint, same input, shared colour scale
    python examples/plot_attention.py --checkpoint A.pt B.pt C.pt --labels OneStep Mono Content \
        --data DIR/bin --source "4 7 9 8" --out grid.png

Installed as ``fairseq-monoattn-plot-attention``; the code is ``fairseq_monoattn.attention_plots``
(drawing) and ``fairseq_monoattn.attention_maps`` (the matrix and its labels).
"""
from fairseq_monoattn.attention_plots import main

if __name__ == "__main__":
    main()
