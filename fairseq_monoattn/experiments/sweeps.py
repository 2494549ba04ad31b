"""The paper's experiments as named sweeps: tasks x architectures x seeds x budget.

    fairseq-monoattn-sweep run table2 --jobs 2              # this machine, 2 runs at once
    fairseq-monoattn-sweep run table2 --slurm --partition cpu   # a SLURM cluster (submitit)
    fairseq-monoattn-sweep status table2                    # done / left, without running

Every sweep writes its records into one results folder (``results/paper`` by default), keyed
by task / arch / variant / seed, so sweeps that share a cell (Table 6's DeDupe rows are also
Table 2 rows) share its runs.  The budget is the same for every paper sweep: at most
``MAX_EPOCH`` epochs, stopping early once greedy valid accuracy has been 100 for
``STOP_AFTER_PERFECT`` epochs (the paper: at most 100 epochs, early stop after 50 without
improvement; a CPU-sized budget, stated next to every table).
"""
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

from .runs import RunSpec

MAX_EPOCH = 25
STOP_AFTER_PERFECT = 3

DIGIT_TASKS = ("copy", "reverse_copy", "recopy", "reverse_recopy", "inv_recopy", "inv_reverse_recopy")
LOOKUP_TASKS = ("lookup", "reverse_lookup")
EXTRA_TASKS = ("dedupe", "posretrieve")  # the paper's appendix tasks (its Table 6)
PROBING_TASKS = DIGIT_TASKS[:2] + LOOKUP_TASKS + DIGIT_TASKS[2:] + EXTRA_TASKS

# the models of the paper's main tables, and the extra ones users ask for most
MAIN_MODELS = ("gru_content", "gru_relative", "gru_birelative", "gru_locattn", "gru_onestep", "gru_monoattn",
               "gru_rmonoattn", "gru_mix_onestep", "gru_mix_monoattn_pr")
ABLATIONS = ("gru_onestep_minus_step2", "gru_onestep_minus_step3", "gru_onestep_minus_sigmoid")
TABLE6_MODELS = ("gru_content", "gru_birelative", "gru_locattn", "gru_onestep", "gru_monoattn")
# SCAN's Table 3 rows: the main table's models (Mix LocAttn in place of LocAttn) and ours
SCAN_MODELS = ("gru_content", "gru_relative", "gru_mix_locattn", "gru_birelative", "gru_mix_onestep",
               "gru_mix_monoattn", "gru_locattn", "gru_onestep", "gru_monoattn", "gru_rmonoattn",
               "gru_mix_monoattn_pr")
# CFQ's column of the same table: the six main-table models, 3 seeds as the paper
CFQ_MODELS = SCAN_MODELS[:6]


@dataclass(frozen=True)
class Sweep:
    name: str
    description: str
    cells: Tuple[Tuple[str, str], ...]  # (task, arch)
    seeds: Tuple[int, ...] = (1, 2, 3)
    max_epoch: int = MAX_EPOCH
    stop_after_perfect: int = STOP_AFTER_PERFECT
    data_seed: int = 1
    recipe: str = "paper"
    extra_seeds: Dict[Tuple[str, str], Tuple[int, ...]] = field(default_factory=dict)

    def only(self, tasks: Optional[Sequence[str]] = None, archs: Optional[Sequence[str]] = None) -> "Sweep":
        """This sweep restricted to the cells of ``tasks`` and ``archs`` (None: all of them), in its
        own order; a name the sweep does not have is an error naming it and the ones it has."""
        for option, asked, known in (("--tasks", tasks, [t for t, _ in self.cells]),
                                     ("--archs", archs, [a for _, a in self.cells])):
            unknown = [name for name in asked or () if name not in known]
            if unknown:
                raise ValueError(f"{option}: {self.name} has no {', '.join(unknown)}; "
                                 f"it has {', '.join(dict.fromkeys(known))}")
        cells = tuple((task, arch) for task, arch in self.cells
                      if (not tasks or task in tasks) and (not archs or arch in archs))
        return replace(self, cells=cells)

    def specs(self) -> List[RunSpec]:
        """Seed-major order: every cell's first seed before any cell's second, so a sweep that
        stops early still covers every cell."""
        seeds = sorted(set(self.seeds).union(*self.extra_seeds.values()) if self.extra_seeds else self.seeds)
        return [RunSpec(task=task, arch=arch, seed=seed, data_seed=self.data_seed, max_epoch=self.max_epoch,
                        stop_after_perfect=self.stop_after_perfect, recipe=self.recipe)
                for seed in seeds for task, arch in self.cells
                if seed in self.seeds or seed in self.extra_seeds.get((task, arch), ())]


def grid(tasks: Sequence[str], archs: Sequence[str]) -> Tuple[Tuple[str, str], ...]:
    return tuple((task, arch) for task in tasks for arch in archs)


SWEEPS: Dict[str, Sweep] = {}


def register(sweep: Sweep) -> Sweep:
    SWEEPS[sweep.name] = sweep
    return sweep


register(Sweep("table2", "all 10 probing tasks x the main models (paper Tables 1-2 and the appendix)",
               grid(PROBING_TASKS, MAIN_MODELS)))
register(Sweep("table3-scan", "SCAN length split x the models of the paper's SCAN tables",
               grid(("scan",), SCAN_MODELS)))
register(Sweep("table3-cfq", "CFQ length split x the models of the paper's CFQ column (needs --data-dir: the "
                                 "CFQ 1.1 release)", grid(("cfq",), CFQ_MODELS), recipe="paper-cfq"))
register(Sweep("table5", "the OneStep ablations on the 8 probing tasks of the paper's ablation table",
               grid(PROBING_TASKS[:8], ("gru_onestep",) + ABLATIONS)))
register(Sweep("table6", "DeDupe and PosRetrieve (the paper's appendix table)", grid(EXTRA_TASKS, TABLE6_MODELS)))
register(Sweep("smoke", "two tiny runs to check an installation (minutes)",
               grid(("copy", "reverse_copy"), ("gru_onestep",)), seeds=(1,), max_epoch=1, stop_after_perfect=0))


def get_sweep(name: str) -> Sweep:
    if name not in SWEEPS:
        raise KeyError(f"unknown sweep {name!r}; known: {', '.join(SWEEPS)}")
    return SWEEPS[name]
