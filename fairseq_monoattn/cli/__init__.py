"""The plugin's commands, one thin module each over the library (installed as
``fairseq-monoattn-*``; the scripts under ``examples/`` and ``preprocess/`` call the same
``main`` functions).

================================  ==========================================================
command                           what it does
================================  ==========================================================
fairseq-monoattn-prepare          write a task's data (raw text, fairseq binaries, manifest)
fairseq-monoattn-lookup-tables    generate new lookup-table files (seeded)
fairseq-monoattn-run              train presets on a task, score every test split, record
fairseq-monoattn-compare          one preset under two or more variants, side by side
fairseq-monoattn-sweep            run, resume or inspect a named sweep of the paper's tables
fairseq-monoattn-aggregate        the paper's tables from records (and RESULTS.md, plots)
fairseq-monoattn-score            greedy accuracy and edit distance of a checkpoint
fairseq-monoattn-plot-attention   draw a model's cross-attention for one input
fairseq-monoattn-user-dir         print the installed plugin's folder (for --user-dir)
================================  ==========================================================

Every command takes the same name for the same thing: ``--arch``, ``--task``, ``--seeds``,
``--variant``, ``--checkpoint``, ``--data``, ``--work``, ``--results``, ``--user-dir``; its
defaults are in ``--help``; a bad name or value is one line naming it, exit status 2, before
anything is created.
"""
