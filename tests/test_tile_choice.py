"""The CUDA kernels' dispatch table is consistent: every row width maps to an instantiated tile
that holds the row (a host program, so CI checks it without a GPU)."""

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_every_width_maps_to_an_instantiated_tile(tmp_path):
    exe = tmp_path / "tile_choice_check"
    subprocess.run(
        ["g++", "-std=c++17", "-O1", "-I", str(ROOT / "ffi_src"), str(ROOT / "tests" / "tile_choice_check.cc"),
         "-o", str(exe)],
        check=True,
    )
    out = subprocess.run([str(exe)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:]
