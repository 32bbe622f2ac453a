"""The tools package is two halves that meet only in the CLI: sglang_gemma4.stack (the patch stack)
imports nothing of sglang_gemma4.gpu (the GPU host's side) nor the other way round; inside gpu, the
layers point one way (checks, studies and kernels use serve, never each other; serve uses none of
them). Beside them, sglang_gemma4.results (measured results as data) imports neither, and the
stack uses only its public names; within the stack, the user's side imports nothing of
stack.maintainer. All may use the shared leaf modules (markdown.py). The package and scripts run
as modules, without editing sys.path."""

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "python" / "sglang_gemma4"


def imported_modules(source: str, package: str) -> set[str]:
    """Absolute names of the sglang_gemma4 modules that `source`, a module of `package`, imports."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            parts = (
                package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            )
            base = ".".join(parts + ([node.module] if node.module else []))
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return {n for n in names if n == "sglang_gemma4" or n.startswith("sglang_gemma4.")}


SHARED = {"sglang_gemma4.markdown", "sglang_gemma4.markdown.MarkerError"} | {
    f"sglang_gemma4.markdown.{name}" for name in ("between", "replace_block")
}


def public_names(package: str) -> set[str]:
    """The names a package's __init__.py lists in __all__, as `package.name`."""
    init = PACKAGE / package / "__init__.py"
    for node in ast.walk(ast.parse(init.read_text())):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return {f"sglang_gemma4.{package}.{ast.literal_eval(e)}" for e in node.value.elts}
    return set()


def allowed(half: str) -> set[str]:
    if half == "stack":
        return SHARED | {"sglang_gemma4.results"} | public_names("results")
    return SHARED


def foreign_imports(half: str, within: str = "") -> list[str]:
    """Imports by the modules of `half` (or of its sub-package `within`) of anything outside it
    that it may not use."""
    own = re.compile(rf"^sglang_gemma4\.{half}(\.|$)")
    folder = PACKAGE / half
    return [
        f"{path.relative_to(REPO)} imports {name}"
        for path in sorted(folder.rglob("*.py"))
        for module in [f"sglang_gemma4.{half}." + ".".join(path.relative_to(folder).parts)[:-3]]
        for name in sorted(imported_modules(path.read_text(), module.rsplit(".", 1)[0]))
        if not own.match(name) and name not in allowed(half)
    ]


@pytest.mark.parametrize("half", ["stack", "gpu", "results"])
def test_a_half_imports_only_itself(half):
    assert foreign_imports(half) == []


def test_the_users_side_of_the_stack_imports_nothing_of_the_maintainers():
    stack = PACKAGE / "stack"
    users = [p for p in sorted(stack.rglob("*.py")) if "maintainer" not in p.parts]
    crossings = [
        f"{path.relative_to(REPO)} imports {name}"
        for path in users
        for name in imported_modules(path.read_text(), "sglang_gemma4.stack")
        if name.startswith("sglang_gemma4.stack.maintainer")
    ]
    assert users and crossings == []


def test_the_stack_uses_the_results_only_through_their_public_names():
    public = public_names("results")
    assert {"sglang_gemma4.results.regenerate", "sglang_gemma4.results.RESULTS_DIR"} <= public
    assert "sglang_gemma4.results.render" not in allowed("stack")


# What each layer of gpu/ may import besides itself and the gpu package (REPO); the stage table
# (stages/) and its runner (run.py), above them all, may import every layer.
GPU_LAYERS = {"serve": set(), "checks": {"serve"}, "studies": {"serve"}, "kernels": {"serve"}}


def layer_of(name: str) -> str | None:
    parts = name.split(".")
    return (
        parts[2]
        if len(parts) > 2 and parts[:2] == ["sglang_gemma4", "gpu"] and parts[2] in GPU_LAYERS
        else None
    )


def layer_crossings(layer: str, modules: dict[str, str]) -> list[str]:
    """`modules` (file name: source, of the package sglang_gemma4.gpu.<layer>) importing a layer
    they may not."""
    allowed = GPU_LAYERS[layer] | {layer}
    return [
        f"{file} imports {name}"
        for file, source in sorted(modules.items())
        for name in sorted(imported_modules(source, f"sglang_gemma4.gpu.{layer}"))
        if name.startswith("sglang_gemma4.gpu.")
        and name != "sglang_gemma4.gpu.REPO"
        and layer_of(name) not in allowed
    ]


def test_gpu_holds_its_layers_the_stages_and_the_runner_only():
    assert sorted(p.name for p in (PACKAGE / "gpu").iterdir() if p.name != "__pycache__") == sorted(
        ["__init__.py", "run.py", "stages", *GPU_LAYERS]
    )


@pytest.mark.parametrize("layer", GPU_LAYERS)
def test_a_gpu_layer_imports_only_itself_and_the_layers_below(layer):
    modules = {
        str(p.relative_to(REPO)): p.read_text()
        for p in sorted((PACKAGE / "gpu" / layer).rglob("*.py"))
    }
    assert modules and layer_crossings(layer, modules) == []


@pytest.mark.parametrize(
    "layer, source",
    [
        ("serve", "from sglang_gemma4.gpu.checks import smoke"),
        ("serve", "from ..studies.bench import Setup"),
        ("checks", "from sglang_gemma4.gpu.studies import bench"),
        ("studies", "import sglang_gemma4.gpu.kernels.kernel_grid"),
        ("kernels", "from sglang_gemma4.gpu.checks.fuzz import value"),
        ("checks", "from sglang_gemma4.gpu import run"),
    ],
)
def test_a_layer_crossing_is_seen(layer, source):
    assert layer_crossings(layer, {"x.py": source}) != []


@pytest.mark.parametrize(
    "layer, source",
    [
        ("checks", "from sglang_gemma4.gpu.serve.server import Server"),
        ("studies", "from sglang_gemma4.gpu import REPO"),
        ("kernels", "from .kernel_grid import measure"),
    ],
)
def test_a_layer_may_use_itself_serve_and_repo(layer, source):
    assert layer_crossings(layer, {"x.py": source}) == []


@pytest.mark.parametrize(
    "source",
    [
        "from sglang_gemma4.gpu.serve.variants import VARIANTS",
        "from ..gpu import server",
        "import sglang_gemma4.cli",
        "from .. import cli",
    ],
)
def test_every_spelling_of_a_crossing_is_seen(source):
    names = imported_modules(source, "sglang_gemma4.stack")
    assert any(n.startswith(("sglang_gemma4.gpu", "sglang_gemma4.cli")) for n in names), names


def test_no_sys_path_edits_in_the_package_or_scripts():
    edits = [
        f"{path.relative_to(REPO)}:{number}"
        for root in (REPO / "python", REPO / "scripts")
        for path in sorted(root.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"sys\.path\.(insert|append|extend)|sys\.path\s*=", line)
    ]
    assert edits == []
