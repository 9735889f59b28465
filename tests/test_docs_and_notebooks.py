"""The documentation site builds in strict mode and documents every public name; the notebooks run."""

import importlib.util
import inspect
import os
import pathlib
import re
import subprocess
import sys

import pytest

import tritri_jax as tt

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_every_public_name_is_in_the_api_reference():
    api = (ROOT / "docs" / "api.md").read_text()
    # every exported function and class, and the user-facing modules (other submodules appear in
    # dir(tt) once some test has imported them: the command line is documented in a how-to guide)
    public = [name for name in dir(tt) if not name.startswith("_") and not inspect.ismodule(getattr(tt, name))]
    public += ["scenes", "io", "viz"]
    missing = [name for name in public if f"::: tritri_jax.{name}\n" not in api]
    assert not missing, f"docs/api.md lacks {missing}"


@pytest.mark.slow
def test_docs_build_in_strict_mode(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail("mkdocs is not installed (pip install -e '.[dev]')")
    result = subprocess.run(  # the interpreter running the tests: works without an activated venv
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert "find_intersections" in api and "UntangleResult" in api


def test_notebooks_are_stored_without_outputs():
    nbformat = pytest.importorskip("nbformat")
    assert len(NOTEBOOKS) == 4
    for path in NOTEBOOKS:
        book = nbformat.read(path, as_version=4)
        for cell in book.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name}: outputs not stripped"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    book = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        book, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    errors = [o for c in book.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    images = [o for c in book.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert images, f"{path.name} drew no picture"


def _public_callables():
    """Every exported function and class, and the functions of the user-facing modules."""
    names = [(name, getattr(tt, name)) for name in dir(tt) if not name.startswith("_")]
    names = [(name, obj) for name, obj in names if not inspect.ismodule(obj)]
    for module in (importlib.import_module(f"tritri_jax.{name}") for name in ("scenes", "io", "viz")):
        names += [
            (f"{module.__name__}.{name}", obj)
            for name, obj in vars(module).items()
            if not name.startswith("_") and inspect.isfunction(obj) and obj.__module__ == module.__name__
        ]
    return names


def test_every_public_name_has_a_runnable_example():
    # the examples themselves run as doctests (pytest --doctest-modules over the package)
    missing = [name for name, obj in _public_callables() if ">>> " not in (inspect.getdoc(obj) or "")]
    assert not missing, f"no example in the docstring of {missing}"


def test_readme_figures_are_the_benchmark_pages():
    # every measured figure in the README's results (numbers with a decimal point, percentages and
    # "N of M" counts) stands in docs/benchmarks.md, where the benchmark scripts write their tables
    readme = (ROOT / "README.md").read_text()
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    begin, end = readme.index("<!-- figures:begin -->"), readme.index("<!-- figures:end -->")
    figures = re.findall(r"\d[\d,]*\.\d+|\d+ of \d+|\d+%", readme[begin:end])
    assert len(figures) >= 5
    stale = [figure for figure in figures if not re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d])", page)]
    assert not stale, f"README figures not in docs/benchmarks.md: {stale}"
