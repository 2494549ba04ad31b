"""Every preset computes the function it computed when tests/fixtures/pinned_outputs.json was
written (see tests/pinned_outputs.py): the same initial draw from the same seed, the same
log-probabilities, attention and gradients, in float64."""

import json

import pytest
from pinned_outputs import FIXTURE, configurations, pinned

PINNED = json.loads(FIXTURE.read_text())
CONFIGURATIONS = {name: (arch, overrides) for name, arch, overrides in configurations()}


def test_every_configuration_is_pinned():
    assert sorted(PINNED) == sorted(CONFIGURATIONS)


def assert_close(got, want, where):
    if isinstance(want, dict):
        assert sorted(got) == sorted(want), where
        for key in want:
            assert_close(got[key], want[key], f"{where}/{key}")
    elif isinstance(want, list) and want and isinstance(want[0], list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, f"{where}[{i}]")
    elif want is None:
        assert got is None, where
    else:
        assert got == pytest.approx(want, rel=1e-8, abs=1e-10), where


@pytest.mark.parametrize("name", sorted(CONFIGURATIONS))
def test_pinned_function(name):
    arch, overrides = CONFIGURATIONS[name]
    got = pinned(arch, overrides)
    want = PINNED[name]
    assert got["parameter_names"] == want["parameter_names"], "parameters were renamed or reordered"
    for part in ("init", "perturbed"):
        assert_close(got[part], want[part], f"{name}/{part}")
