"""The FFI targets against their committed contract, tests/ffi_targets.json.

An exported artifact stores, for each jaxnorm custom call, the target name, its operands and
results (count, rank, element type; workspace results included), its attributes (name and type)
and its operand/result aliasing. A newer jaxnorm must run old artifacts, so none of that may change
for a released target name (README, "Export": the target policy). These tests fail on any such
change; the fix is never to edit the contract of a released target but to register the new
signature under a new name (`..._v2`), add it to the contract, and raise FFI_API_VERSION.

The signatures are those of export_program.py's calls, one configuration per target: an optional
operand is pinned as that program passes it (absent: a rank-1 placeholder).

`python tests/test_ffi_targets.py` prints the signatures the current code lowers to as the
contract's entries, for a new target.
"""

import json
import pathlib
import re

import numpy as np
import pytest

import jax
from jax.interpreters.mlir import ir

import jaxnorm
from jaxnorm import _ffi
from jaxnorm._ops import TARGETS

from export_program import inputs, program

CONTRACT = json.loads((pathlib.Path(__file__).parent / "ffi_targets.json").read_text())
PINNED = CONTRACT["targets"]


def _walk(op):
    yield op
    for region in op.regions:
        for block in region:
            for child in block:
                yield from _walk(child.operation)


def _tensor(value) -> str:
    t = ir.RankedTensorType(value.type)
    return f"{t.element_type}[{t.rank}d]"


def _signature(op) -> dict:
    attrs = op.attributes
    config = attrs["mhlo.backend_config"] if "mhlo.backend_config" in attrs else []
    aliases = re.findall(r"output_tuple_indices = \[(\d*)\], operand_index = (\d+)",
                         str(attrs["output_operand_aliases"])) if "output_operand_aliases" in attrs else []
    return {
        "operands": [_tensor(v) for v in op.operands],
        "results": [_tensor(v) for v in op.results],
        "attributes": {a.name: str(a.attr.type) for a in config},  # i1 is a bool
        "aliases": [[int(out or 0), int(operand)] for out, operand in aliases],  # (result, operand)
    }


def lowered_signatures() -> dict[str, list[dict]]:
    """Each jaxnorm target's distinct signatures in the lowered export program."""
    module = jax.jit(program).lower(inputs(np.random.default_rng(0))).compiler_ir("stablehlo")
    found: dict[str, list[dict]] = {}
    for op in _walk(module.operation):
        if op.name == "stablehlo.custom_call":
            target = ir.StringAttr(op.attributes["call_target_name"]).value
            sigs = found.setdefault(target, [])
            if (sig := _signature(op)) not in sigs:
                sigs.append(sig)
    return found


@pytest.fixture(scope="module")
def lowered():
    return lowered_signatures()


def test_every_target_is_in_the_program(lowered):
    # Otherwise its signature would go unchecked: extend tests/export_program.py.
    assert set(TARGETS) <= set(lowered), sorted(set(TARGETS) - set(lowered))


@pytest.mark.parametrize("target", TARGETS)
def test_signature_is_the_pinned_one(target, lowered):
    assert target in PINNED, f"{target} is not in tests/ffi_targets.json: add it (with since = a new FFI_API_VERSION)"
    (sig,) = lowered[target]  # one configuration per target in export_program.py, so one signature
    want = {k: PINNED[target][k] for k in sig}
    assert sig == want, (
        f"the serialized signature of {target} changed: old artifacts would break. Keep {target} "
        f"as it was and register the new signature as a new target (README, Export).\n"
        f"pinned:  {want}\nlowered: {sig}")


def test_registered_targets_are_the_contract():
    # Targets kept only for old artifacts stay registered and stay in the contract; a target is
    # removed from both together, when the policy retires it.
    assert set(_ffi._cpu.registrations()) == set(PINNED)
    if _ffi.cuda_built():
        assert set(_ffi._cuda.registrations()) == set(PINNED)


def test_api_version_is_the_contract():
    assert jaxnorm.FFI_API_VERSION == CONTRACT["ffi_api_version"]
    changes = [v for entry in PINNED.values() for v in (entry["since"], entry.get("retired", 0))]
    assert jaxnorm.FFI_API_VERSION == max(changes), "a target was added or retired: raise FFI_API_VERSION"


def test_export_checks_name_every_target():
    assert [c.is_custom_call() for c in jaxnorm.export_checks()] == list(TARGETS)


def contract_lines(lowered: dict) -> str:
    """The contract's "targets" entries, one line each; a target not pinned yet gets since = the
    next FFI_API_VERSION, which its addition requires."""
    entries = []
    for target, sigs in lowered.items():
        since = PINNED.get(target, {}).get("since", jaxnorm.FFI_API_VERSION + 1)
        entries.append(f'    "{target}": ' + json.dumps({"since": since, **sigs[0]} if len(sigs) == 1 else sigs))
    return ",\n".join(entries)


if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)  # as the suite runs (tests/conftest.py)
    print(contract_lines(lowered_signatures()))
