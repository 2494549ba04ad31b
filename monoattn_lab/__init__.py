"""The experiment lab beside the plugin: runs with small committed records, launchers, sweeps,
option-set comparisons, tables and pictures, the release converter, benchmarks and the encoder
settling study.  The lab imports the plugin (``fairseq_monoattn``); the plugin never imports the
lab (tests/test_plugin_import.py checks both ways it could)."""
