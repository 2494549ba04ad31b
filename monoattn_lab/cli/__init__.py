"""The lab's commands, one thin module each over the lab (installed as ``fairseq-monoattn-*``
beside the plugin's own commands, which ``fairseq_monoattn.cli`` lists).

================================  ==========================================================
command                           what it does
================================  ==========================================================
fairseq-monoattn-run              train presets on a task, score every test split, record
fairseq-monoattn-compare          one preset under two or more variants, side by side
fairseq-monoattn-sweep            run, resume or inspect a named sweep of the paper's tables
fairseq-monoattn-aggregate        the paper's tables from records (and RESULTS.md, plots)
fairseq-monoattn-convert          the authors' released checkpoints as fairseq checkpoints
================================  ==========================================================
"""
