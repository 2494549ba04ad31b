"""Experiments over the plugin: runs with small committed records, launchers, sweeps,
option-set comparisons, tables and pictures."""
