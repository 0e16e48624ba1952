"""Host programs that check CUDA-side logic without a GPU, so CI runs them:
- tile_choice_check.cc: every row width maps to an instantiated tile that holds the row;
- divisor_check.cc: the padding copies' multiply-high index division equals integer division."""

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("program", ["tile_choice_check", "divisor_check"])
def test_host_program(program, tmp_path):
    exe = tmp_path / program
    subprocess.run(
        ["g++", "-std=c++17", "-O2", "-I", str(ROOT / "ffi_src"), str(ROOT / "tests" / f"{program}.cc"),
         "-o", str(exe)],
        check=True,
    )
    out = subprocess.run([str(exe)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:]
