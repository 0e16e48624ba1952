"""Suite-wide setup: float64 references, fresh random data per test, and the `wide` marker."""

import os
import secrets

import numpy as np
import pytest

import jax

# The references run in float64 on the inputs' exact values.
jax.config.update("jax_enable_x64", True)

SEED_ENV = "JAXNORM_TEST_SEED"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "wide(cpu=False): rows for the GPU kernels' multi-block (cluster) paths, large for the CPU "
        "handlers; skipped on other backends unless cpu=True or JAXNORM_TEST_WIDE is set",
    )


def pytest_collection_modifyitems(config, items):
    # Wide rows take the GPU kernels' multi-block paths. The CPU handlers have no such dispatch,
    # so a CPU run keeps only the cases marked wide(cpu=True) (about 0.5 s each), unless
    # JAXNORM_TEST_WIDE is set.
    if jax.default_backend() == "gpu" or os.environ.get("JAXNORM_TEST_WIDE"):
        return
    skip = pytest.mark.skip(reason="wide rows: GPU only (JAXNORM_TEST_WIDE=1 runs them here)")
    for item in items:
        marker = item.get_closest_marker("wide")
        if marker is not None and not marker.kwargs.get("cpu", False):
            item.add_marker(skip)


@pytest.fixture
def rng(request):
    """Fresh random data every run. The seed is printed (pytest shows it with a failure);
    rerun with JAXNORM_TEST_SEED=<seed> to reproduce."""
    seed = int(os.environ.get(SEED_ENV) or secrets.randbits(63))
    print(f"{request.node.nodeid}: {SEED_ENV}={seed}")
    return np.random.default_rng(seed)
