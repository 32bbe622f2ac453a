"""The tools package is two halves that meet only in the CLI: sglang_gemma4.stack (the patch stack)
imports nothing of sglang_gemma4.gpu (the GPU host's side) nor the other way round; and the
package and scripts run as modules, without editing sys.path."""

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


def foreign_imports(half: str) -> list[str]:
    own = re.compile(rf"^sglang_gemma4\.{half}(\.|$)")
    return [
        f"{path.relative_to(REPO)} imports {name}"
        for path in sorted((PACKAGE / half).rglob("*.py"))
        for name in sorted(imported_modules(path.read_text(), f"sglang_gemma4.{half}"))
        if not own.match(name)
    ]


@pytest.mark.parametrize("half", ["stack", "gpu"])
def test_a_half_imports_only_itself(half):
    assert foreign_imports(half) == []


@pytest.mark.parametrize(
    "source",
    [
        "from sglang_gemma4.gpu.variants import VARIANTS",
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
