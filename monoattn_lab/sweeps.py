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
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from fairseq_monoattn.catalog import PROBING_TASKS, TABLE2_TASKS, TABLE6_TASKS, TASKS

from .records import RECORDED_SCORES, read_records, run_seconds
from .spec import RunError, RunSpec
from .workbench import workbench_sweeps

MAX_EPOCH = 25
STOP_AFTER_PERFECT = 3

# the models of the paper's main tables, and the extra ones users ask for most
MAIN_MODELS = (
    "gru_content",
    "gru_relative",
    "gru_birelative",
    "gru_locattn",
    "gru_onestep",
    "gru_monoattn",
    "gru_rmonoattn",
    "gru_mix_onestep",
    "gru_mix_monoattn_pr",
)
ABLATIONS = ("gru_onestep_minus_step2", "gru_onestep_minus_step3", "gru_onestep_minus_sigmoid")
TABLE6_MODELS = ("gru_content", "gru_birelative", "gru_locattn", "gru_onestep", "gru_monoattn")
# SCAN's Table 3 rows: the main table's models (Mix LocAttn in place of LocAttn) and ours
SCAN_MODELS = (
    "gru_content",
    "gru_relative",
    "gru_mix_locattn",
    "gru_birelative",
    "gru_mix_onestep",
    "gru_mix_monoattn",
    "gru_locattn",
    "gru_onestep",
    "gru_monoattn",
    "gru_rmonoattn",
    "gru_mix_monoattn_pr",
)
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
    user_dir: Optional[str] = None
    variant: str = "default"  # a name for ``options`` (the records' folder)
    options: Tuple[str, ...] = ()  # extra fairseq-train options of every run
    # or several option sets, each (variant, options), every cell run under each of them in turn
    variants: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()
    # where its records go unless --results says otherwise; None: WORK/NAME-results, beside the work
    # folder's checkpoints, apart from every committed results folder (the smoke sweep's budget is not
    # the paper sweeps', and its cells are theirs)
    results: Optional[str] = "results/paper"

    def results_folder(self, work: Path) -> Path:
        return Path(self.results) if self.results is not None else Path(work) / f"{self.name}-results"

    def only(self, tasks: Optional[Sequence[str]] = None, archs: Optional[Sequence[str]] = None) -> "Sweep":
        """This sweep restricted to the cells of ``tasks`` and ``archs`` (None: all of them), in its
        own order; a name the sweep does not have is an error naming it and the ones it has."""
        for option, asked, known in (
            ("--task", tasks, [t for t, _ in self.cells]),
            ("--arch", archs, [a for _, a in self.cells]),
        ):
            unknown = [name for name in asked or () if name not in known]
            if unknown:
                raise ValueError(
                    f"{option}: {self.name} has no {', '.join(unknown)}; it has {', '.join(dict.fromkeys(known))}"
                )
        cells = tuple(
            (task, arch) for task, arch in self.cells if (not tasks or task in tasks) and (not archs or arch in archs)
        )
        return replace(self, cells=cells)

    def specs(self) -> List[RunSpec]:
        """Seed-major order: every cell's first seed before any cell's second, so a sweep that
        stops early still covers every cell."""
        seeds = sorted(set(self.seeds).union(*self.extra_seeds.values()) if self.extra_seeds else self.seeds)
        return [
            RunSpec(
                task=task,
                arch=arch,
                seed=seed,
                data_seed=self.data_seed,
                max_epoch=self.max_epoch,
                stop_after_perfect=self.stop_after_perfect,
                recipe=self.recipe,
                user_dir=self.user_dir,
                variant=variant,
                options=options,
            )
            for seed in seeds
            for variant, options in self.variants or ((self.variant, self.options),)
            for task, arch in self.cells
            if seed in self.seeds or seed in self.extra_seeds.get((task, arch), ())
        ]


def grid(tasks: Sequence[str], archs: Sequence[str]) -> Tuple[Tuple[str, str], ...]:
    return tuple((task, arch) for task in tasks for arch in archs)


SWEEPS: Dict[str, Sweep] = {}


def register(sweep: Sweep) -> Sweep:
    SWEEPS[sweep.name] = sweep
    return sweep


register(
    Sweep(
        "table2",
        "all 10 probing tasks x the main models (paper Tables 1-2 and the appendix)",
        grid(PROBING_TASKS, MAIN_MODELS),
    )
)
register(
    Sweep("table3-scan", "SCAN length split x the models of the paper's SCAN tables", grid(("scan",), SCAN_MODELS))
)
register(
    Sweep(
        "table3-cfq",
        "CFQ length split x the models of the paper's CFQ column (needs --data-dir: the CFQ 1.1 release)",
        grid(("cfq",), CFQ_MODELS),
        recipe="paper-cfq",
    )
)
register(
    Sweep(
        "table5",
        "the OneStep ablations on the 8 probing tasks of the paper's ablation table",
        grid(TABLE2_TASKS, ("gru_onestep",) + ABLATIONS),
    )
)
register(Sweep("table6", "DeDupe and PosRetrieve (the paper's appendix table)", grid(TABLE6_TASKS, TABLE6_MODELS)))
register(
    Sweep(
        "smoke",
        "two tiny runs to check an installation (minutes)",
        grid(("copy", "reverse_copy"), ("gru_onestep",)),
        seeds=(1,),
        max_epoch=1,
        stop_after_perfect=0,
        results=None,
    )
)


# Beyond the paper: the plain Transformer against its location variants (docs/transformer.md), with
# fairseq's sinusoidal positions (the default), learned ones, and none.
TRANSFORMER_TASKS = ("copy", "reverse_copy", "recopy", "inv_recopy", "lookup", "scan")
TRANSFORMER_RESULTS = "results/transformer"  # apart from the paper's tables, which aggregate reads from results/paper
TRANSFORMER_MODELS = ("transformer_small", "transformer_onestep", "transformer_monoattn", "transformer_mix_onestep")
register(
    Sweep(
        "transformer",
        "the plain Transformer against its location variants on six tasks (sinusoidal positions)",
        grid(TRANSFORMER_TASKS, TRANSFORMER_MODELS),
        results=TRANSFORMER_RESULTS,
    )
)
register(
    Sweep(
        "transformer-learned-pos",
        "the same with learned positions in encoder and decoder",
        grid(TRANSFORMER_TASKS, TRANSFORMER_MODELS),
        variant="learned-pos",
        options=("--encoder-learned-pos", "--decoder-learned-pos"),
        results=TRANSFORMER_RESULTS,
    )
)
register(
    Sweep(
        "transformer-no-pos",
        "the same without positional encodings",
        grid(TRANSFORMER_TASKS, TRANSFORMER_MODELS),
        variant="no-pos",
        options=("--no-token-positional-embeddings",),
        results=TRANSFORMER_RESULTS,
    )
)
register(
    Sweep(
        "transformer-recency",
        "the same without positional encodings or direction gate, the decoder's self-attention "
        "biased by distance (the variant that carries ReCopy to 100 digits)",
        grid(TRANSFORMER_TASKS, TRANSFORMER_MODELS),
        variant="no-pos-no-gate-recency1",
        options=("--no-token-positional-embeddings", "--direction-gate", "False", "--decoder-recency-bias", "1"),
        results=TRANSFORMER_RESULTS,
    )
)
# the _recency presets' options (models/transformer_monoattn.py, LENGTH_GENERALISATION) on the command
# line; tests/test_transformer.py checks that the two are the same model
LENGTH_GENERALISATION_OPTIONS = (
    "--no-token-positional-embeddings", "--direction-gate-summary", "none", "--direction-temperature", "50",
    "--direction-gate-keep-end", "True", "--decoder-recency-bias", "1", "--decoder-recency-exempt-start", "True",
)  # fmt: skip
register(
    Sweep(
        "transformer-length",
        "the same with the _recency presets' options: no positional encodings, a direction gate of one "
        "learned number at temperature 50 that keeps </s> last, the recency bias sparing the start symbol",
        grid(TRANSFORMER_TASKS, TRANSFORMER_MODELS),
        variant="start-end-gate50-recency1",
        options=LENGTH_GENERALISATION_OPTIONS,
        results=TRANSFORMER_RESULTS,
    )
)
register(
    Sweep(
        "transformer-length-fading-start",
        "the _recency presets' options but the start symbol's exemption from the recency bias",
        grid(TRANSFORMER_TASKS, TRANSFORMER_MODELS),
        variant="no-pos-end-gate50-recency1",
        options=LENGTH_GENERALISATION_OPTIONS[:-2],
        results=TRANSFORMER_RESULTS,
    )
)


# The workbench (workbench.py): the field's tasks and position schemes beside the paper's models.
for _sweep in workbench_sweeps(Sweep, MAX_EPOCH, STOP_AFTER_PERFECT):
    register(_sweep)


def get_sweep(name: str) -> Sweep:
    if name not in SWEEPS:
        raise KeyError(f"unknown sweep {name!r}; known: {', '.join(SWEEPS)}")
    return SWEEPS[name]


def with_more_seeds(sweep: Sweep, records: Sequence[dict], seeds: Sequence[int]) -> Tuple[Sweep, int]:
    """``sweep`` with ``seeds`` added to every cell whose records over the sweep's own seeds
    disagree with the paper (a median with another verdict at some length, or for SCAN and CFQ a
    mean outside the paper's mean ± 2 std); and how many cells that is.  The verdict of the sweep's
    own seeds decides, so that a cell whose first extra seed tips its median still gets them all."""
    from . import aggregate

    cells = aggregate.collect([r for r in records if r["seed"] in sweep.seeds])
    different = {key: tuple(seeds) for key, cell in cells.items() if key in sweep.cells and aggregate.disagrees(cell)}
    return replace(sweep, extra_seeds=different), len(different)


def status(sweep: Sweep, results: Path, records: Sequence[dict]) -> List[str]:
    """What is done and left of a sweep: records present and the CPU-hours their runs took, runs left
    and their CPU-hours (from the sweep's own records, or before it has any, every record of its
    cells), records not committed, records whose model is no longer the one their command builds."""
    from .git_records import uncommitted_records
    from .outdated import describe_differences, outdated_records
    from .records import check_record_matches
    from .spec import record_place

    specs = sweep.specs()
    by_path = {str(record_place(results, r["task"], r["arch"], r["variant"], r["seed"])): r for r in records}
    done, others = [], []  # a record of another run in a spec's place (another budget, say) is not done
    for spec in specs:
        record = by_path.get(str(spec.record_path(results)))
        if record is not None:
            try:
                check_record_matches(record, spec, spec.record_path(results))
                done.append(spec)
            except RunError as error:
                others.append(str(error))
    done_records = [by_path[str(s.record_path(results))] for s in done]
    timed = done_records or [r for r in records if (r["task"], r["arch"]) in sweep.cells]
    hours = sum(map(run_seconds, timed)) / max(1, len(timed)) / 3600
    left = len(specs) - len(done)
    spent = (
        f" ({hours * len(done):.1f} CPU-hours of training and scoring, {hours * 60:.1f} min a run)"
        if done_records
        else ""
    )
    lines = [
        f"{sweep.name}: {len(done)} of {len(specs)} runs have records in {results}{spent}; {left} left"
        + (f", about {hours * left:.1f} CPU-hours at {hours * 60:.1f} min a run" if timed and left else "")
    ]
    lines += [f"not this sweep's run: {error}" for error in others]
    left_out = uncommitted_records(done, results)
    if left_out:
        lines.append(
            f"{len(left_out)} of these records are not committed ({left_out[0].record_path(results)}"
            f"{', ...' if len(left_out) > 1 else ''}); `fairseq-monoattn-sweep run` with this sweep and "
            f"`--commit` commits them before it runs anything"
        )
    unscored = [r for r in done_records if any(set(RECORDED_SCORES) - set(s) for s in r["splits"].values())]
    if unscored:
        lines.append(
            f"{len(unscored)} of these records lack scores the scorer counts now; `fairseq-monoattn-sweep rescore` "
            f"adds them where the runs' checkpoints are in the work folder"
        )
    for record, changed in outdated_records(done_records):
        path = record_place(results, record["task"], record["arch"], record["variant"], record["seed"])
        lines.append(
            f"outdated: {path} ({describe_differences(changed, 'there')}); fairseq-monoattn-aggregate refuses it"
        )
    return lines


def prepare_source_data(
    sweep_name: str, pending: Sequence[RunSpec], work: Path, data_dir: Optional[Path], log: Callable[[str], None]
) -> None:
    """Prepare, before any run, the data of the pending runs' tasks whose source is not in the
    repository (CFQ), from ``data_dir``; RunError names what is missing.  ``data_dir`` given when
    no pending run reads it is an error too."""
    from .runs import prepared_data

    readers = [name for name, task in TASKS.items() if task.needs_data_dir]
    if data_dir is not None and not any(s.task in readers for s in pending):
        raise ValueError(f"--data-dir: no run of {sweep_name} left to run reads it (only {', '.join(readers)} do)")
    for task in dict.fromkeys(s.task for s in pending if s.task in readers):
        spec = next(s for s in pending if s.task == task)
        before = (spec.data_dir(work) / "manifest.json").exists()
        try:
            folder = prepared_data(spec, work, data_dir)
        except RunError as error:
            raise RunError(f"{sweep_name}: {error}") from None
        log(
            f"{task}: data in {folder}"
            + (" (prepared before; --data-dir is not read again)" if before and data_dir is not None else "")
        )


__all__ = ["Sweep", "SWEEPS", "get_sweep", "with_more_seeds", "status", "prepare_source_data", "read_records"]
