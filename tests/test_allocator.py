"""glibc keeps the memory a training update frees for the next update (fairseq_monoattn/allocator.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_monoattn import allocator

TESTS = Path(__file__).resolve().parent

# Ten training updates of MonoAttn on one batch of 32 sources of 20-50 digits, after a first one,
# with glibc's settings and then with the plugin's (one process, started with them switched off):
# the page faults each ten cost (the kernel handing out zeroed memory again).
UPDATES = r"""
import json, resource
import torch
from fairseq_monoattn.allocator import keep_freed_memory
from fairseq_monoattn.testing import batch, build, digit_dictionary
from model_helpers import random_digits

D = digit_dictionary()
model = build("gru_monoattn", D, seed=1).train()
optimizer = torch.optim.Adam(model.parameters())
sources = random_digits(torch.Generator().manual_seed(1), 32, 20, 50)
sample = batch(D, sources, [s[::-1] for s in sources])

def update():
    logits, _ = model(**sample["net_input"])
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), sample["target"].flatten(), ignore_index=D.pad())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

def page_faults():
    update()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        update()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

with_defaults = page_faults()
assert keep_freed_memory(environ={})
print(json.dumps([with_defaults, page_faults()]))
"""


def transparent_huge_pages_always() -> bool:
    """Whether the kernel backs the heap with 2 MiB pages wherever it can (far fewer faults to count)."""
    setting = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    return setting.is_file() and "[always]" in setting.read_text()


@pytest.mark.skipif(allocator.glibc() is None, reason="glibc's malloc settings: this C library is not glibc")
@pytest.mark.skipif(transparent_huge_pages_always(), reason="transparent huge pages 'always': faults are not pages")
def test_freed_memory_is_kept_for_the_next_update():
    mine = (*allocator.GLIBC_MALLOC_VARIABLES, "GLIBC_TUNABLES", "LD_PRELOAD")
    env = {key: value for key, value in os.environ.items() if key not in mine}
    env.update(FAIRSEQ_MONOATTN_MALLOC="0", OMP_NUM_THREADS="1", PYTHONPATH=str(TESTS))
    done = subprocess.run([sys.executable, "-c", UPDATES], capture_output=True, text=True, env=env, cwd=TESTS)
    assert done.returncode == 0, done.stderr[-2000:]
    with_defaults, kept = json.loads(done.stdout.strip().splitlines()[-1])
    assert with_defaults > 4 * kept, (with_defaults, kept)  # 17,352 against 1,405 here


def test_the_plugins_fixes_keep_freed_memory(monkeypatch):
    """What the plugin's task applies when it is set up (importing the plugin leaves glibc's
    settings alone: tests/test_plugin_import.py)."""
    from fairseq_monoattn import fairseq_compat

    calls = []
    monkeypatch.setattr(fairseq_compat, "keep_freed_memory", lambda: calls.append(1))
    fairseq_compat.apply_fixes()
    assert calls


@pytest.mark.parametrize(
    "environ, reason",
    [
        ({}, None),
        ({"FAIRSEQ_MONOATTN_MALLOC": "1", "LD_PRELOAD": "/usr/lib/libfoo.so"}, None),
        ({"FAIRSEQ_MONOATTN_MALLOC": "0"}, "FAIRSEQ_MONOATTN_MALLOC=0"),
        ({"MALLOC_TRIM_THRESHOLD_": "0"}, "malloc configured by MALLOC_TRIM_THRESHOLD_"),
        ({"MALLOC_TOP_PAD_": "1048576"}, "malloc configured by MALLOC_TOP_PAD_"),
        ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}, "malloc configured by GLIBC_TUNABLES"),
        ({"GLIBC_TUNABLES": "glibc.rtld.nns=2"}, None),
        ({"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}, "another allocator preloaded (LD_PRELOAD)"),
    ],
)
def test_the_users_allocator_settings_stand(environ, reason):
    assert allocator.reason_to_keep_defaults(environ) == reason
