"""The plugin's commands, one thin module each over the library (installed as
``fairseq-monoattn-*``; the scripts under ``examples/`` and ``preprocess/`` call the same
``main`` functions).

================================  ==========================================================
command                           what it does
================================  ==========================================================
fairseq-monoattn-prepare          write a task's data (raw text, fairseq binaries, manifest)
fairseq-monoattn-lookup-tables    generate new lookup-table files (seeded)
fairseq-monoattn-score            greedy accuracy and edit distance of a checkpoint
fairseq-monoattn-plot-attention   draw a model's cross-attention for one input
fairseq-monoattn-user-dir         print the installed plugin's folder (for --user-dir)
================================  ==========================================================

The commands that run experiments (run, compare, sweep, aggregate, convert) are the lab's
(``monoattn_lab.cli``), which imports the plugin; the plugin never imports the lab.

Every command takes the same name for the same thing: ``--arch``, ``--task``, ``--seeds``,
``--variant``, ``--checkpoint``, ``--data``, ``--work``, ``--results``, ``--user-dir``; its
defaults are in ``--help``; a bad name or value is one line naming it, exit status 2, before
anything is created.
"""
