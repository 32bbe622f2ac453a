"""0003: the JIT all-reduce and TP q/k-norm kernels check pointer alignment without std::bit_cast,
which libstdc++ lacks before gcc 11.  The alignment checks are taken verbatim from the patched
sources and compiled by the host g++ in C++17 mode (where libstdc++'s <bit> has no bit_cast, as in
gcc 10's C++20 mode), then run on aligned and misaligned pointers."""

import re
import shutil
import subprocess

import pytest
from patched_tree import TREE

SOURCES = TREE / "python" / "sglang" / "kernels" / "jit" / "csrc" / "distributed"
FILES = ("custom_all_reduce.cuh", "tp_qknorm.cuh")
ALIGNMENT_CHECK = re.compile(
    r"^\s*(RuntimeCheck\(\w+_cast<intptr_t>\([\w.]+(?:\(\))?\) % 16 == 0, .*\);)$", re.M
)

PROGRAM = """
#include <cstdint>
#include <cstdio>
#include <initializer_list>
template <typename... Args>
void RuntimeCheck(bool ok, Args&&...) { std::printf("%d", ok ? 1 : 0); }
struct Params { void* q_ptr; void* k_ptr; const void* q_weight; const void* k_weight; };
struct Tensor { void* ptr; void* data_ptr() const { return ptr; } };
alignas(16) static char buffer[64];
int main() {
  for (int offset : {0, 1, 8, 16, 33}) {
    void* input_ptr = buffer + offset;
    Params params{buffer + offset, buffer + offset, buffer + offset, buffer + offset};
    Tensor in_{buffer + offset};
    CHECKS
    std::printf("\\n");
  }
}
"""


def alignment_checks(name: str) -> list[str]:
    return ALIGNMENT_CHECK.findall((SOURCES / name).read_text())


@pytest.mark.parametrize("name", FILES)
def test_no_bit_cast_left(name):
    source = (SOURCES / name).read_text()
    assert "bit_cast" not in source
    assert alignment_checks(name)  # the checks are still there


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler (g++)")
@pytest.mark.parametrize("name", FILES)
def test_checks_compile_without_bit_cast_and_accept_only_aligned_pointers(tmp_path, name):
    checks = alignment_checks(name)
    (tmp_path / "checks.cpp").write_text(PROGRAM.replace("CHECKS", "\n    ".join(checks)))
    subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-Werror",
            "-o",
            str(tmp_path / "checks"),
            str(tmp_path / "checks.cpp"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    rows = subprocess.run(
        [str(tmp_path / "checks")], check=True, capture_output=True, text=True
    ).stdout.split()
    expected = [
        "1" * len(checks) if offset % 16 == 0 else "0" * len(checks) for offset in (0, 1, 8, 16, 33)
    ]
    assert rows == expected
