"""The public surface: names, docstrings, citation metadata, the command line."""

import inspect
import pathlib
import subprocess
import sys

import pytest

import tritri_jax as tt

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONTRACT = [  # DESIGN.md section 2
    "interval",
    "intersects",
    "pair_energy",
    "crossing_length",
    "pair_energy_grad_hessian",
    "candidate_pairs",
    "find_intersections",
    "intersection_energy",
]


def test_contract_names_exist_and_every_public_name_is_documented():
    for name in CONTRACT:
        assert callable(getattr(tt, name)), name
    public = [n for n in dir(tt) if not n.startswith("_")]
    for name in public:
        obj = getattr(tt, name)
        doc = inspect.getdoc(obj)
        assert doc and len(doc) > 20, f"{name} has no docstring"


def test_citation_is_valid_cff():
    cffconvert = pytest.importorskip("cffconvert")
    assert cffconvert
    result = subprocess.run(
        [sys.executable, "-m", "cffconvert", "--validate", "-i", str(ROOT / "CITATION.cff")],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0 and "No module named cffconvert" in result.stderr:
        result = subprocess.run(
            ["cffconvert", "--validate", "-i", str(ROOT / "CITATION.cff")], capture_output=True, text=True
        )
    assert result.returncode == 0, result.stdout + result.stderr
    text = (ROOT / "CITATION.cff").read_text()
    assert "arXiv:2606.06511" in text and "Möller" in text
