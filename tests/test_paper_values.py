"""The paper's numbers (fairseq_monoattn.catalog): spot checks re-read from the paper's
tables by hand, the plugin's names, and the helpers. Does not read the paper itself."""

import pytest

from fairseq_monoattn import catalog as paper
from fairseq_monoattn.catalog import ACCURACY, EDIT_DISTANCE, TABLES, paper_cell, paper_value, verdict

ARCHS = {
    "gru_content",
    "gru_relative",
    "gru_locattn",
    "gru_birelative",
    "gru_birope",
    "gru_onestep",
    "gru_monoattn",
    "gru_rmonoattn",
    "gru_mix_locattn",
    "gru_locattn_s",
    "gru_mix_locattn_s",
    "gru_mix_locattn_s_pr",
    "gru_mix_onestep",
    "gru_mix_onestep_pr",
    "gru_mix_monoattn",
    "gru_mix_monoattn_pr",
    "gru_mix_rmonoattn",
    "gru_mix_rmonoattn_pr",
    "gru_onestep_minus_step2",
    "gru_onestep_minus_step3",
    "gru_onestep_minus_sigmoid",
}
DIGITS = ("test15", "test30", "test100")
LOOKUP = ("test7", "test9", "test11")
IID = ("test_iid", "test15", "test30", "test100")
VALID_SPLITS = {
    "copy": DIGITS,
    "reverse_copy": DIGITS,
    "recopy": DIGITS,
    "reverse_recopy": DIGITS,
    "inv_recopy": DIGITS,
    "inv_reverse_recopy": DIGITS,
    "lookup": LOOKUP,
    "reverse_lookup": LOOKUP,
    "dedupe": IID,
    "posretrieve": IID,
    "scan": ("test",),
    "cfq": ("test",),
}

# (task, arch, splits, expected values at those splits), read again from the paper's tables.
ACCURACY_SPOT_CHECKS = [
    # table:diagnostics
    ("inv_recopy", "gru_monoattn", DIGITS, (100, 100, 98.8)),
    ("inv_reverse_recopy", "gru_monoattn", DIGITS, (100, 99.9, 98.3)),
    ("lookup", "gru_monoattn", LOOKUP, (100, 98, 29.9)),
    ("lookup", "gru_content", LOOKUP, (33.3, 0, 0)),
    ("inv_recopy", "gru_content", DIGITS, (0.05, 0, 0)),
    ("reverse_lookup", "gru_relative", LOOKUP, (78.2, 0.8, 0.4)),
    ("inv_recopy", "gru_locattn", DIGITS, (99.4, 58.8, 0)),
    ("inv_reverse_recopy", "gru_birelative", DIGITS, (71.3, 0, 0)),
    ("inv_recopy", "gru_onestep", DIGITS, (0.1, 0, 0)),
    # table:critical_ablation
    ("reverse_copy", "gru_onestep_minus_step2", DIGITS, (100, 98.6, 0)),
    ("lookup", "gru_onestep_minus_step2", LOOKUP, (99.2, 2.34, 0)),
    ("reverse_recopy", "gru_onestep_minus_step3", DIGITS, (100, 100, 99.9)),
    ("inv_reverse_recopy", "gru_onestep_minus_sigmoid", DIGITS, (22, 0, 0)),
    # table:diagnostics3 ("51." in the tex)
    ("dedupe", "gru_onestep", IID, (94.1, 51, 0, 0)),
    ("dedupe", "gru_monoattn", IID, (99.7, 98.3, 94.3, 75)),
    ("posretrieve", "gru_locattn", IID, (96.3, 0, 0, 0)),
    # table:diagnostics_appendix ("Mix Location S" = Mix LocAttn S)
    ("copy", "gru_birope", DIGITS, (100, 100, 0)),
    ("inv_recopy", "gru_mix_locattn_s", DIGITS, (98.9, 66.6, 0)),
    ("inv_reverse_recopy", "gru_mix_locattn_s_pr", DIGITS, (99.6, 98.1, 84.8)),
    ("copy", "gru_mix_monoattn", DIGITS, (99.95, 5, 0)),
    ("inv_reverse_recopy", "gru_mix_onestep", DIGITS, (5.45, 0, 0)),
    ("reverse_recopy", "gru_rmonoattn", DIGITS, (0, 0, 0)),
    ("recopy", "gru_mix_rmonoattn_pr", DIGITS, (100, 90.8, 51.2)),
    # table:scan ("62,14" in the tex) and table:scan_appendix
    ("cfq", "gru_content", ("test",), ((62.14, 0.88),)),
    ("scan", "gru_mix_onestep", ("test",), ((29.51, 9.46),)),
    ("scan", "gru_locattn", ("test",), ((24.56, 17.51),)),
    ("scan", "gru_mix_locattn_s_pr", ("test",), ((19.8, 3.26),)),
]

EDIT_DISTANCE_SPOT_CHECKS = [  # table:diagnostics2
    ("recopy", "gru_content", DIGITS, (8, 53.4, 249.2)),
    ("reverse_recopy", "gru_relative", DIGITS, (17.9, 60.8, 250.7)),
    ("lookup", "gru_locattn", LOOKUP, (1.2, 3, 5.7)),
    ("lookup", "gru_monoattn", LOOKUP, (0, 0, 0.9)),
    ("inv_reverse_recopy", "gru_onestep", DIGITS, (3.1, 17.2, 85.7)),
]


@pytest.mark.parametrize("task, arch, splits, expected", ACCURACY_SPOT_CHECKS)
def test_accuracy_spot_checks(task, arch, splits, expected):
    assert tuple(paper_value(task, arch, split) for split in splits) == expected


@pytest.mark.parametrize("task, arch, splits, expected", EDIT_DISTANCE_SPOT_CHECKS)
def test_edit_distance_spot_checks(task, arch, splits, expected):
    assert tuple(paper_value(task, arch, split, "edit_distance") for split in splits) == expected


def test_names_and_splits_are_the_plugins():
    for metric in (ACCURACY, EDIT_DISTANCE):
        for task, by_arch in metric.items():
            assert task in VALID_SPLITS
            for arch, by_split in by_arch.items():
                assert arch in ARCHS
                assert set(by_split) <= set(VALID_SPLITS[task]), (task, arch)
    for pairs in TABLES.values():
        assert all(task in VALID_SPLITS and arch in ARCHS for task, arch in pairs)


def test_tables_cover_every_cell_and_every_row_is_complete():
    assert set(TABLES) == {"table2", "table3-scan", "table5", "table6", "appendix"}
    sizes = {name: len(pairs) for name, pairs in TABLES.items()}
    assert sizes == {"table2": 6 * 8, "table3-scan": 6 * 2 + 12, "table5": 4 * 8, "table6": 5 * 2, "appendix": 12 * 8}
    reported = {pair for pairs in TABLES.values() for pair in pairs}
    assert reported == {(task, arch) for task, by_arch in ACCURACY.items() for arch in by_arch}
    for task, arch in reported:
        assert set(ACCURACY[task][arch]) == set(VALID_SPLITS[task]), (task, arch)
    for task, by_arch in EDIT_DISTANCE.items():
        for arch, by_split in by_arch.items():
            assert set(by_split) == set(VALID_SPLITS[task]) and (task, arch) in TABLES["table2"]


def test_a_cell_in_two_tables_has_one_value():
    seen = {}
    for cells in paper._ACCURACY_SOURCES.values():
        for task, arch, split, value in cells:
            assert seen.setdefault((task, arch, split), value) == value, (task, arch, split)
    assert ("copy", "gru_onestep") in TABLES["table2"] and ("copy", "gru_onestep") in TABLES["table5"]


def test_values_are_floats_or_mean_std_pairs():
    for task, by_arch in ACCURACY.items():
        for by_split in by_arch.values():
            for value in by_split.values():
                if task in ("scan", "cfq"):
                    assert isinstance(value, tuple) and all(isinstance(v, float) for v in value)
                else:
                    assert isinstance(value, float) and 0 <= value <= 100


def test_unreported_cells_are_none():
    assert paper_value("dedupe", "gru_relative", "test15") is None
    assert paper_value("cfq", "gru_locattn", "test") is None
    assert paper_value("scan", "gru_onestep_minus_step2", "test") is None
    assert paper_value("copy", "gru_monoattn", "test_iid") is None
    assert paper_value("copy", "gru_birope", "test15", "edit_distance") is None
    assert paper_cell("copy", "gru_birope", "test15", "edit_distance") == ""
    with pytest.raises(ValueError):
        paper_value("copy", "gru_monoattn", "test15", metric="bleu")


def test_paper_cell_text():
    assert paper_cell("copy", "gru_monoattn", "test100") == "100"
    assert paper_cell("inv_recopy", "gru_monoattn", "test100") == "98.8"
    assert paper_cell("inv_recopy", "gru_content", "test15") == "0.05"
    assert paper_cell("scan", "gru_content", "test") == "17.61 ± 4.07"
    assert paper_cell("scan", "gru_mix_locattn_s_pr", "test") == "19.80 ± 3.26"
    assert paper_cell("recopy", "gru_content", "test100", "edit_distance") == "249.2"


def test_verdict_thresholds():
    assert verdict(100) == "solved" and verdict(95) == "solved"
    assert verdict(0) == "failed" and verdict(5) == "failed"
    assert verdict(50) == "partial" and verdict(94.9) == "partial" and verdict(5.1) == "partial"
