"""Loads jaxnorm's compiled handler modules and registers them with XLA, once per platform."""

from __future__ import annotations

import importlib

import jax

_CPU_MODULE = "jaxnorm._jaxnorm_cpu"
_CUDA_MODULE = "jaxnorm._jaxnorm_cuda"


def _load(name: str):
    try:
        return importlib.import_module(name), None
    except ImportError as e:  # not built, or built for another machine
        return None, e


_cpu, _cpu_error = _load(_CPU_MODULE)
if _cpu is None:
    raise ImportError(
        f"jaxnorm's compiled CPU handlers ({_CPU_MODULE}) failed to import: {_cpu_error}. "
        "Reinstall with `pip install .` from the source tree."
    ) from _cpu_error

_cuda, _cuda_error = _load(_CUDA_MODULE)

for _name, _capsule in _cpu.registrations().items():
    jax.ffi.register_ffi_target(_name, _capsule, platform="cpu")
if _cuda is not None:
    for _name, _capsule in _cuda.registrations().items():
        jax.ffi.register_ffi_target(_name, _capsule, platform="CUDA")


def cuda_built() -> bool:
    """True when this installation contains the CUDA handlers."""
    return _cuda is not None


def cuda_unavailable_reason() -> str:
    if _cuda is not None:
        return ""
    return (
        "jaxnorm was installed without its CUDA handlers "
        f"({_CUDA_MODULE} did not import: {_cuda_error}). Reinstall with nvcc on PATH "
        "(or JAXNORM_CUDA=ON to make a missing nvcc an error)."
    )


def cuda_device_summary() -> dict:
    """Device facts the CUDA module reads (SM count, L2, shared memory), or {} without CUDA or
    without a CUDA device (the module then holds placeholders, compute capability 0)."""
    if _cuda is None:
        return {}
    facts = dict(_cuda.device_summary())
    return facts if facts.get("compute_capability_major", 0) > 0 else {}
