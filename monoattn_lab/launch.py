"""Running many :class:`RunSpec` on existing engines: local worker processes, or SLURM (or
submitit's local executor) through ``submitit``.

Local: ``jobs`` worker processes at once, each pinned (``taskset``) to its own share of the
cores this process may use, each with ``OMP_NUM_THREADS`` = the size of its share, or the
``OMP_NUM_THREADS`` this process was given where that is smaller.  Every run
is a separate ``python -m monoattn_lab.worker`` process, so a crash or a kill
loses that run's current epoch only (it resumes from ``checkpoint_last.pt``).

submitit: one array job, one task per run, which trains as a local worker does (its fairseq-train
forked from a server that imported fairseq once); ``requeue`` on preemption comes from submitit's
checkpointing (a preempted run is requeued and resumes from its last checkpoint).

Either way, a run whose folder another process holds (another sweep over the same work
folder is training it) is skipped, not failed: its task ends at once and says so.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from .processes import die_with_parent
from .records import RecordError, check_record_matches, read_record, run_seconds
from .runs import last_error, run
from .spec import BUSY_EXIT, INTERRUPTED_EXIT, RunBusy, RunError, RunSpec, spec_from_dict

LAB_DIR = Path(__file__).resolve().parent  # this package: its workers start beside it


def cpu_shares(jobs: int, cpus: Optional[Sequence[int]] = None) -> List[List[int]]:
    """Split the usable cores into ``jobs`` disjoint groups (round robin); a group is never empty
    (more jobs than cores share cores)."""
    cpus = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    if jobs <= len(cpus):
        return [cpus[i::jobs] for i in range(jobs)]
    return [[cpus[i % len(cpus)]] for i in range(jobs)]


def job_threads(share: Sequence[int], environ=os.environ) -> int:
    """Threads for a job pinned to ``share``: one a core, at most the ``OMP_NUM_THREADS`` the
    launcher was given (a positive whole number; anything else is ignored). A user who runs a
    sweep beside other work with ``OMP_NUM_THREADS=1`` gets one-thread runs even where a job has
    several cores: two threads on a core another process also uses spin against each other."""
    limit = environ.get("OMP_NUM_THREADS", "").strip()
    if limit.isdigit() and int(limit) > 0:
        return min(len(share), int(limit))
    return len(share)


def spec_to_json(spec: RunSpec) -> str:
    return json.dumps(asdict(spec))


def spec_from_json(text: str) -> RunSpec:
    return spec_from_dict(json.loads(text))


class Progress:
    """done / running / left, with an estimate of the time left from the durations of the runs
    done (those recorded before, as their records give them, and those done here)."""

    def __init__(self, total: int, skipped: int, log: Callable[[str], None], past: Sequence[float] = ()):
        self.total, self.done, self.running, self.failed = total, skipped, 0, 0
        self.elsewhere: List[Path] = []  # the records of runs found being trained by another process
        self.durations: List[float] = list(past)
        self.log = log
        self.lock = threading.Lock()
        self.start = time.time()

    def started(self):
        with self.lock:
            self.running += 1

    def finished(self, seconds: float, ok: bool, elsewhere: Optional[Path] = None, stopped: bool = False):
        """``elsewhere``: the record of a run another process was found training; it is neither done
        nor failed here, and counts as done once that process writes the record.  ``stopped``: a run
        interrupted (Ctrl-C), left, not failed."""
        with self.lock:
            self.running -= 1
            self.done += ok
            if elsewhere is not None:
                self.elsewhere.append(elsewhere)
            self.failed += not ok and elsewhere is None and not stopped
            if ok:
                self.durations.append(seconds)

    def line(self, jobs: int) -> str:
        done_there = sum(record.exists() for record in self.elsewhere)
        done, elsewhere = self.done + done_there, len(self.elsewhere) - done_there
        left = self.total - done - self.failed - elsewhere
        estimate = ""
        if self.durations and left > 0:
            mean = sum(self.durations) / len(self.durations)
            hours = mean * left / max(1, jobs) / 3600
            estimate = f"; about {mean / 60:.1f} min a run, {hours:.1f} h left at {jobs} at once"
        return (
            f"{done}/{self.total} runs done, {self.running} running, {left} left"
            + (f", {self.failed} failed" if self.failed else "")
            + (f", {elsewhere} being trained by another process" if elsewhere else "")
            + estimate
        )


def workers_nice(nice: int) -> int:
    """The nice value the workers take: ``nice``, or this process's own where it is higher (a
    launcher started under ``nice -n N`` passes N on to its workers' sessions)."""
    return max(nice, os.getpriority(os.PRIO_PROCESS, 0)) if hasattr(os, "getpriority") else nice


def run_local(
    specs: Sequence[RunSpec],
    work: Path,
    results: Path,
    jobs: int = 1,
    cpus: Optional[Sequence[int]] = None,
    on_record: Optional[Callable[[RunSpec, Path], None]] = None,
    log: Callable[[str], None] = print,
    nice: int = 0,
) -> Dict[str, str]:
    """Run every spec whose record is missing, ``jobs`` at a time; returns {spec key: "ok" or the
    error}.  ``on_record(spec, record_path)`` is called (one call at a time) as each run finishes.
    ``nice`` > 0 (or this process's own nice value, where higher): each worker and its training run
    at that nice value, their session's group too (``worker.lower_priority``)."""
    nice = workers_nice(nice)
    pending, past, unreadable = [], [], {}
    for spec in specs:  # a run with a record is done, and its recorded time feeds the estimate
        path = spec.record_path(results)
        if not path.exists():
            pending.append(spec)
            continue
        try:
            record = read_record(path)
            check_record_matches(record, spec, path)  # e.g. another data seed's record in this folder
            past.append(run_seconds(record))
        except RecordError as error:  # never trained over: the file is the user's to look at
            unreadable[spec.key] = f"failed: its record cannot be read ({error})"
        except RunError as error:
            unreadable[spec.key] = f"failed: {error}"
    progress = Progress(len(specs), len(past), log, past=past)
    log(progress.line(jobs))
    shares = cpu_shares(jobs, cpus)
    free = list(range(jobs))
    free_lock, record_lock = threading.Lock(), threading.Lock()
    interrupted = threading.Event()
    workers: Dict[str, subprocess.Popen] = {}  # the running workers, by spec key (under free_lock)
    outcome: Dict[str, str] = {s.key: "ok" for s in specs if s not in pending}
    outcome.update(unreadable)

    def one(spec: RunSpec) -> str:
        with free_lock:
            slot = free.pop()
        progress.started()
        start = time.time()
        try:
            share = shares[slot]
            log(
                f"[{spec.key}] started on cpu {','.join(map(str, share))}; log: {spec.run_dir(work) / 'worker.log'}. "
                f"{progress.line(jobs)}"
            )
            command = [
                sys.executable,
                "-m",
                "monoattn_lab.worker",
                spec_to_json(spec),
                str(Path(work).resolve()),
                str(Path(results).resolve()),
                *([str(nice)] if nice else []),
            ]
            if sys.platform.startswith("linux"):
                command = ["taskset", "-c", ",".join(map(str, share)), *command]
            threads = str(job_threads(share))
            env = dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, PYTHONWARNINGS="ignore")
            log_dir = spec.run_dir(work)
            log_dir.mkdir(parents=True, exist_ok=True)
            with open(log_dir / "worker.log", "a") as out:
                # `python -m` searches its working folder first: start it next to this very
                # package, so the worker runs the launcher's code whatever folder we were started in;
                # in a session of its own, so that a Ctrl-C at the terminal reaches this process alone,
                # which passes it on once to each worker and its training (stop_workers)
                with free_lock:
                    if interrupted.is_set():  # started as the sweep was being stopped
                        code = None
                    else:
                        workers[spec.key] = subprocess.Popen(
                            command,
                            env=env,
                            cwd=LAB_DIR.parent,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            preexec_fn=die_with_parent(),
                            start_new_session=True,
                        )
                if spec.key in workers:
                    code = workers[spec.key].wait()
            ok = code == 0 and spec.record_path(results).exists()
            elsewhere = not ok and code == BUSY_EXIT
            if ok:
                result = "ok"
            elif elsewhere:
                result = f"{SKIPPED}: another process is training it (see {log_dir / 'worker.log'})"
            elif code is None:
                result = f"{NOT_STARTED}: the command was interrupted first"
            elif code in (INTERRUPTED_EXIT, -signal.SIGINT) or interrupted.is_set():
                result = f"{INTERRUPTED}: stopped; it resumes from its last checkpoint"
            else:
                result = worker_failure(code, log_dir / "worker.log")
        finally:
            with free_lock:
                free.append(slot)
                workers.pop(spec.key, None)
        progress.finished(
            time.time() - start,
            ok,
            elsewhere=spec.record_path(results) if elsewhere else None,
            stopped=result.startswith((INTERRUPTED, NOT_STARTED)),
        )
        if ok and on_record is not None:
            with record_lock:
                on_record(spec, spec.record_path(results))
        log(f"[{spec.key}] {result}. {progress.line(jobs)}")
        return result

    pool = ThreadPoolExecutor(max_workers=jobs)
    futures = {pool.submit(one, spec): spec for spec in pending}
    try:
        for future in as_completed(futures):
            outcome[futures[future].key] = future.result()
    except KeyboardInterrupt:  # Ctrl-C: stop every run where it is, start no other, say what is done
        log("interrupted: stopping the runs under way (each resumes from its last checkpoint)")
        interrupted.set()
        pool.shutdown(wait=False, cancel_futures=True)
        stop_workers(workers, free_lock, signal.SIGINT)
        for future, spec in futures.items():
            while True:
                try:
                    outcome[spec.key] = (
                        f"{NOT_STARTED}: the command was interrupted first" if future.cancelled() else future.result()
                    )
                    break
                except KeyboardInterrupt:  # a second Ctrl-C: no waiting for a clean stop
                    stop_workers(workers, free_lock, signal.SIGKILL)
    pool.shutdown(wait=True)
    return outcome


def stop_workers(workers: Dict[str, subprocess.Popen], lock: threading.Lock, signum: int) -> None:
    """Send ``signum`` to each running worker's process group (the worker and its fairseq-train)."""
    with lock:
        running = list(workers.values())
    for process in running:
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:  # ended meanwhile
            pass


def worker_failure(code: int, worker_log: Path) -> str:
    """A failed run's outcome: its exit code and why, as the worker's log says it (the worker's
    error names the file that has more, e.g. fairseq-train's output), or the log to read."""
    cause = last_error(worker_log)
    if cause is None:
        return f"failed (exit {code}); see {worker_log}"
    cause = cause[len("error: ") :] if cause.startswith("error: ") else f"{cause} (in {worker_log})"
    return f"failed (exit {code}): {cause}"


SKIPPED = "skipped"
INTERRUPTED = "interrupted"
NOT_STARTED = "not started"


def summarize_outcome(outcome: Dict[str, str], log: Callable[[str], None] = print) -> int:
    """Report the runs that failed or were skipped; the exit status: 1 if any failed, else
    BUSY_EXIT if any was skipped because another process is training it (not a failure, but this
    command did not record it), else 0."""
    stopped = [key for key, result in outcome.items() if result.startswith((INTERRUPTED, NOT_STARTED))]
    failed = {
        key: result
        for key, result in outcome.items()
        if result != "ok" and not result.startswith(SKIPPED) and key not in stopped
    }
    skipped = [key for key, result in outcome.items() if result.startswith(SKIPPED)]
    for key in skipped:
        log(f"skipped {key}: {outcome[key][len(SKIPPED) + 2 :]}")
    for key, result in failed.items():
        log(f"FAILED {key}: {result}")
    if stopped:
        done = sum(result == "ok" for result in outcome.values())
        under_way = [key for key in stopped if outcome[key].startswith(INTERRUPTED)]
        log(
            f"interrupted: {done} of {len(outcome)} runs have records"
            + (f" ({len(failed)} failed)" if failed else "")
            + f"; stopped: {', '.join(under_way) or 'none'} (each resumes from its last checkpoint); "
            f"{len(stopped) - len(under_way)} not started. The same command resumes (exit status {INTERRUPTED_EXIT})"
        )
        return INTERRUPTED_EXIT
    if skipped and not failed:
        log(
            f"{len(skipped)} of {len(outcome)} runs not run here: another process is training them; the same "
            f"command once it has finished records them (exit status {BUSY_EXIT})"
        )
    return 1 if failed else BUSY_EXIT if skipped else 0


def run_submitit(
    specs: Sequence[RunSpec],
    work: Path,
    results: Path,
    folder: Path,
    executor=None,
    log: Callable[[str], None] = print,
    **parameters,
):
    """Submit every spec without a record as one submitit array job and wait for it.

    ``executor``: a ready submitit executor (tests pass ``submitit.LocalExecutor``); otherwise an
    ``AutoExecutor`` on ``folder`` with ``parameters`` (e.g. slurm_partition="cpu",
    cpus_per_task=1, timeout_min=120, slurm_array_parallelism=50)."""
    import submitit

    pending = [s for s in specs if not s.record_path(results).exists()]
    if not pending:
        log(f"all {len(specs)} runs have records; nothing to submit")
        return []
    if executor is None:
        executor = submitit.AutoExecutor(folder=str(folder))
        executor.update_parameters(**parameters)
    jobs = executor.map_array(RequeueableRun(work, results), pending)
    log(f"submitted {len(jobs)} runs ({len(specs) - len(pending)} had records); job ids {jobs[0].job_id}...")
    outcomes = [job.result() for job in jobs]
    skipped = [outcome["skipped"] for outcome in outcomes if "skipped" in outcome]
    for reason in skipped:
        log(f"skipped: {reason}")
    log(
        f"{len(outcomes) - len(skipped)} runs recorded"
        + (f", {len(skipped)} skipped (being trained by another process)" if skipped else "")
    )
    return outcomes


class RequeueableRun:
    """A picklable callable for submitit: runs one spec; on preemption or timeout submitit calls
    ``checkpoint``, which requeues the same call (the run resumes from checkpoint_last.pt)."""

    def __init__(self, work: Path, results: Path):
        self.work, self.results = Path(work), Path(results)

    def __call__(self, spec: RunSpec) -> dict:
        """The run's record, or {"skipped": why} when another process is training it.  As the
        local worker does, the task's fairseq-train is forked from a server that has imported
        fairseq once (the task imports it to score anyway), not a new process importing it again."""
        from .runs import check_not_busy
        from .worker import forked_training

        try:
            check_not_busy(spec, self.work, self.results)  # before importing fairseq for a run it would skip
            with forked_training() as forked:
                return run(spec, self.work, self.results, forked=forked)
        except RunBusy as busy:
            return {"skipped": str(busy)}

    def checkpoint(self, spec: RunSpec):
        import submitit

        return submitit.helpers.DelayedSubmission(self, spec)
