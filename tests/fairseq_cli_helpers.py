"""Run fairseq's own command-line entry points in this process (fast) or as real commands."""

import contextlib
import io
from pathlib import Path

import forked_commands
from fairseq import checkpoint_utils, distributed_utils, options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq_cli import generate as generate_cli
from fairseq_cli import preprocess as preprocess_cli
from fairseq_cli import train as train_cli

import fairseq_monoattn

USER_DIR = str(Path(fairseq_monoattn.__file__).resolve().parent)


def forget_previous_runs():
    """fairseq keeps the best validation score of a run on functions (save_checkpoint.best,
    should_stop_early.best/num_runs): a second in-process run would compare against the
    first run's scores.  A fresh fairseq-train process starts without them."""
    for function in (checkpoint_utils.save_checkpoint, train_cli.should_stop_early):
        for name in ("best", "num_runs"):
            function.__dict__.pop(name, None)


def train(argv):
    """fairseq-train ARGV, in-process, as a fresh process would run it."""
    forget_previous_runs()
    args = options.parse_args_and_arch(options.get_training_parser(), [*argv, "--user-dir", USER_DIR])
    cfg = convert_namespace_to_omegaconf(args)
    with contextlib.redirect_stdout(io.StringIO()):
        distributed_utils.call_main(cfg, train_cli.main)


def preprocess(argv):
    """fairseq-preprocess ARGV, in-process (it logs to DESTDIR/preprocess.log through a handler it
    adds on every call; the handler goes again afterwards, as a process's would at exit)."""
    handlers = list(preprocess_cli.logger.handlers)
    try:
        preprocess_cli.main(options.get_preprocessing_parser().parse_args([str(a) for a in argv]))
    finally:
        for handler in preprocess_cli.logger.handlers[len(handlers) :]:
            preprocess_cli.logger.removeHandler(handler)
            handler.close()


def rebinarized(data: Path, out: Path, edit, split: str = "test9", sides=("src", "tgt")) -> Path:
    """A prepared data set's raw ``split`` binarized again by fairseq-preprocess as split "test",
    with the dictionaries of ``sides`` changed by ``edit`` (a function of the list of dictionary
    lines) and the others as they are, as a separate preprocessing run can."""
    out.mkdir()
    for side in ("src", "tgt"):
        lines = (data / "bin" / f"dict.{side}.txt").read_text().splitlines()
        lines = edit(lines) if side in sides else lines
        (out / f"dict.{side}.txt").write_text("".join(line + "\n" for line in lines))
    preprocess(
        ["--source-lang", "src", "--target-lang", "tgt", "--testpref", data / "raw" / split, "--srcdict",
         out / "dict.src.txt", "--tgtdict", out / "dict.tgt.txt", "--destdir", out / "bin", "--workers", "1"]
    )  # fmt: skip
    return out / "bin"


def swapped(lines):
    """A dictionary's first two symbol lines in the other order."""
    return [lines[1], lines[0], *lines[2:]]


def generate(argv, results_path: Path, subset: str):
    """fairseq-generate ARGV, in-process; returns the lines it writes."""
    args = options.parse_args_and_arch(
        options.get_generation_parser(),
        [*argv, "--user-dir", USER_DIR, "--results-path", str(results_path), "--gen-subset", subset],
    )
    generate_cli.main(args)
    return (results_path / f"generate-{subset}.txt").read_text().splitlines()


def hypotheses(lines):
    """{example id: hypothesis string} from fairseq-generate output lines."""
    found = {}
    for line in lines:
        if line.startswith("H-"):
            key, _score, text = (line.split("\t") + [""])[:3]
            found[int(key[2:])] = text
    return found


def run_command(name, *argv, cwd=None, new_process=False):
    """A console script of this environment (fairseq-train, fairseq-generate, ...), on one thread,
    forked from the tests' command server (forked_commands.py) or, with ``new_process``, as a new
    process; its output, or an AssertionError with it."""
    run = forked_commands.new_process if new_process else forked_commands.command
    result = run(name, *argv, cwd=cwd)
    if result.returncode != 0:
        raise AssertionError(f"{name} failed ({result.returncode}):\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    return result.stdout + result.stderr


class ForkedFunction:
    """``function(*args)`` in a child forked from this test process: torch, fairseq and the plugin
    are imported already, so the child spends none of a new interpreter's start-up (3-5 CPU-seconds
    where fairseq is imported).  For a test that needs a process of its own for its state (a
    resource limit, a distributed rank), not a fresh interpreter; a command's start-up is what the
    command server's children keep (forked_commands.py).  The child's standard output and error go
    to the file ``output``; it works in ``cwd``, calls ``before()`` first, and exits with
    ``function``'s result (0 for None), a SystemExit's code, or 1 after an exception's traceback,
    never returning into pytest.  Several may run at once."""

    def __init__(self, function, *args, output: Path, cwd=None, before=None):
        import os
        import sys
        import traceback

        self.output = Path(output)
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:
            code = 1
            try:
                os.setpgid(0, 0)  # its own group: a kill at the time limit reaches its children too
                descriptor = os.open(self.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(descriptor, 1)
                os.dup2(descriptor, 2)
                sys.stdout = os.fdopen(1, "w", buffering=1)
                sys.stderr = os.fdopen(2, "w", buffering=1)
                if cwd is not None:
                    os.chdir(cwd)
                if before is not None:
                    before()
                result = function(*args)
                code = 0 if result is None else int(result)
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            except BaseException:
                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        self.returncode = None

    def wait(self, timeout: float) -> int:
        """The exit code (negative: the signal that ended it); past ``timeout`` seconds the child
        is killed and subprocess.TimeoutExpired raised."""
        import os
        import subprocess
        import time

        deadline = time.monotonic() + timeout
        while self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif time.monotonic() > deadline:
                self.kill()
                raise subprocess.TimeoutExpired(f"forked {self.pid}", timeout)
            else:
                time.sleep(0.05)
        return self.returncode

    def kill(self) -> None:
        """End the child and what it started (nothing where it has ended)."""
        import os
        import signal

        if self.returncode is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            self.returncode = -signal.SIGKILL

    def read_output(self) -> str:
        return self.output.read_text(errors="replace")


def write_copy_dataset(out: Path, sizes, seed: int = 0) -> Path:
    """A small prepared Copy data set: sizes maps split -> (examples, shortest, longest)."""
    import random

    from fairseq_monoattn.data.writer import write_dataset

    rng = random.Random(seed)
    write_dataset({split: copy_examples(rng, *size) for split, size in sizes.items()}, out, "copy", seed=seed)
    return out


def copy_examples(rng, count, low, high):
    """`count` Copy examples of `low`..`high` random digits (fairseq_monoattn.data.common.Example)."""
    from fairseq_monoattn.data.common import Example

    out = []
    for _ in range(count):
        digits = " ".join(str(rng.randrange(10)) for _ in range(rng.randint(low, high)))
        out.append(Example(digits, digits, len(digits.split())))
    return out


# A run small enough for the tests: a few dozen Copy examples, a test split of its own length.
TINY = {"train": (96, 3, 5), "valid": (13, 5, 6), "test9": (13, 9, 9), "test_iid": (5, 3, 5)}


def tiny_spec(seed=3, task="copy", arch="gru_onestep", max_epoch=2, **kw):
    from monoattn_lab.spec import RunSpec

    return RunSpec(task=task, arch=arch, seed=seed, max_epoch=max_epoch, **kw)


def with_tiny_data(work, *specs):
    """Put a tiny prepared data set where each spec looks for its task's data."""
    for spec in specs:
        if not (spec.data_dir(work) / "manifest.json").exists():
            write_copy_dataset(spec.data_dir(work), TINY, seed=spec.data_seed)
    return specs
