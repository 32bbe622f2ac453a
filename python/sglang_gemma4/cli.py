"""The sglang-gemma4 command: the patch stack's user and maintainer commands (COMMANDS)."""

import argparse
import getpass
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import sglang_gemma4.results as results
from sglang_gemma4.gpu.serve.variants import ARCHS, VARIANTS
from sglang_gemma4.markdown import MarkerError
from sglang_gemma4.results import archive
from sglang_gemma4.results.errors import ResultsError
from sglang_gemma4.stack import bundle
from sglang_gemma4.stack.build import build_wheel
from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.fetch import download_release, fetch_all, fetch_wheel
from sglang_gemma4.stack.layout import Layout
from sglang_gemma4.stack.maintainer import (
    drift,
    export,
    lint,
    port,
    readme_table,
    rebase,
    rebase_finish,
    rebase_text,
    subjects,
    testenv,
    verify,
)
from sglang_gemma4.stack.pin import Pin
from sglang_gemma4.stack.series import Series
from sglang_gemma4.stack.stackversion import local_version
from sglang_gemma4.stack.worktree import WorkTree


class Stack:
    """The checkout's pin, series and work tree, loaded on demand."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.pin = Pin.load(layout.pin_file)
        self.series = Series.load(layout.patches_dir)
        self.work = WorkTree(layout.work_dir)

    def ensure_work_tree(self) -> WorkTree:
        return self.work.ensure(self.pin, self.layout.cache_dir)


COMMANDS = """sglang-gemma4: manage the Gemma-4 patch stack on the pinned SGLang release.

Using the stack:
  fetch         download the pinned wheels with pip, verify sha256, cache in .cache/upstream
  apply         make work/sglang: pristine base commit + one commit per patch (idempotent)
  build         write dist/sglang-<version>+gemma4.<hash>-*.whl from the applied work tree
  status        per patch: subject, upstream status, does it apply to the pin, is it applied
  version       print the local version that names the current series
  bundle        an offline install archive (pristine + patched overlay + deps) for a GPU host
  checkpoint    write a Gemma-4-shaped checkpoint (real shapes; random or no weights)

Maintaining it:
  lint          check patches/series, every patch header and new commits' subjects
  refresh       export the work tree's commits back into their patch files (diff only)
  new           start a patch from uncommitted edits in work/sglang
  rebase        move the series to a newer sglang release, running each patch's tests once it
                is in: stops at a conflict or failing tests (--continue, which also resumes an
                interrupted run; --abort), asks before dropping a patch that looks upstream; the
                finish writes the repository's files and prints a checklist
  rebase-check  report how the series fares on a newer release, changing nothing
  drift-status  fail if the kept drift report was made for another series
  port-check    check a port (ports/X): in step with the series, applies exactly, its CPU tests
                pass
  port-build    the port's patched wheel in dist/
  verify-tests  prove each patch's tests fail without it and pass with it
  readme        rewrite README.md's patch and results tables, benchmark_results/README.md and the
                patches' Bench: lines (from benchmark_results/*/result.json)
  pack-run      move a result folder's raw files into its raw.tar.xz
"""


def cmd_fetch(stack: Stack, args) -> int:
    fetch_all(stack.pin, stack.layout.cache_dir)
    print(f"fetch: {len(stack.pin.wheels)} pinned wheels verified in {stack.layout.cache_dir}")
    return 0


def cmd_apply(stack: Stack, args) -> int:
    rebase.refuse_during_rebase(stack.layout, "apply")
    patches = stack.series.patches()
    stack.ensure_work_tree().apply(stack.pin, patches, force=args.force)
    return 0


def cmd_build(stack: Stack, args) -> int:
    wheel = stack.pin.wheel(args.python)
    path = fetch_wheel(stack.pin, wheel, stack.layout.cache_dir)
    build_wheel(stack.work, stack.pin, wheel, path, stack.series.patches(), stack.layout.dist_dir)
    return 0


def cmd_readme(stack: Stack, args) -> int:
    readme_table.update_readme(stack.layout.root / "README.md", stack.series)
    print(f"readme: patch table updated ({len(stack.series.names)} patches)")
    patch_paths = [stack.layout.patches_dir / name for name in stack.series.names]
    print("readme: " + results.regenerate(stack.layout.root, stack.pin.version, patch_paths))
    return 0


def cmd_pack_run(stack: Stack, args) -> int:
    packed = archive.pack(Path(args.folder))
    print(f"pack-run: {len(packed)} files moved into {Path(args.folder) / archive.RAW_ARCHIVE}")
    return 0


def cmd_status(stack: Stack, args) -> int:
    if args.markdown:
        print(readme_table.patch_table(stack.series))
        return 0
    patches = stack.series.patches()
    work = stack.ensure_work_tree()
    state = work.load_state()
    results = work.check_series(state.base, patches)
    applied = {(a.name, a.sha256) for a in state.applied}
    print(
        f"{stack.pin.requirement}  series {local_version(stack.pin, patches)}  work tree "
        f"{work.path}"
    )
    print(f"{'#':>3}  {'patch':<45} {'applies':<8} {'applied':<8} upstream status")
    for i, (patch, result) in enumerate(zip(patches, results), start=1):
        in_tree = "yes" if (patch.name, patch.sha256) in applied else "no"
        print(
            f"{i:>3}  {patch.name:<45} {result.verdict:<8} {in_tree:<8} "
            f"{patch.fields.get('Upstream-Status', '?')}"
        )
        for detail in result.offsets:
            print(f"{'':>5}{detail}")
        if result.error:
            print(result.error)
    dirty = work.local_changes()
    if dirty:
        print(f"work tree has {len(dirty)} uncommitted paths")
    return 0 if all(r.ok for r in results) else 1


def cmd_lint(stack: Stack, args) -> int:
    errors = lint.lint(stack.series, stack.layout.root)
    long, note = subjects.long_subjects(stack.layout.root)
    errors += long
    for error in errors:
        print(error)
    if note:
        print(f"lint: commit subjects not checked: {note}")
    print(f"lint: {len(stack.series.names)} patches, {len(errors)} problems")
    return 1 if errors else 0


def cmd_refresh(stack: Stack, args) -> int:
    rebase.refuse_during_rebase(stack.layout, "refresh")
    export.refresh(stack.work, stack.series)
    return 0


def cmd_new(stack: Stack, args) -> int:
    rebase.refuse_during_rebase(stack.layout, "new")
    export.new_patch(stack.work, stack.series, args.slug, args.subject, args.author)
    return 0


def cached_release(stack: Stack, version: str, python: str) -> Path | None:
    tag = "cp" + python.replace(".", "")
    found = sorted(stack.layout.cache_dir.glob(f"{stack.pin.name}-{version}-{tag}-*.whl"))
    return found[-1] if found else None


def release_wheels(stack: Stack, args, tmp: Path) -> list[Path]:
    """The newer release's wheels: local files (--wheel), else one per pinned Python, from the
    cache when a rebase or rebase-check already fetched it, else from PyPI (--to)."""
    if args.wheel:
        return [Path(p).resolve() for p in args.wheel]
    wheels = []
    for wheel in stack.pin.wheels:
        cached = cached_release(stack, args.to, wheel.python)
        if not cached:
            print(f"downloading {stack.pin.name}=={args.to} for Python {wheel.python} ...")
            cached = download_release(stack.pin.name, args.to, wheel.python, tmp)
        wheels.append(cached)
    return wheels


def target_version(stack: Stack, args) -> str:
    if args.to:
        return args.to
    return rebase.pin_from_wheels(stack.pin.name, [Path(p) for p in args.wheel]).version


def test_env(stack: Stack, args, new_pin: Pin, wheels: list[Path]) -> testenv.TestEnv | None:
    """Where each patch's tests run: none (--skip-tests), the named interpreter (--python), or
    the release's own CPU environment (built once under .cache/testenv/)."""
    if args.skip_tests:
        return None
    if args.python:
        return testenv.given(args.python)
    by_file = {w.name: w for w in wheels}
    version = testenv.python_version(args.env_python)
    pinned = next((w for w in new_pin.wheels if w.python == version), new_pin.wheels[0])
    wheel = by_file[pinned.file]
    keep = port.kept_test_packages(stack.layout, new_pin.version)
    return testenv.ensure(stack.layout, new_pin.version, wheel, args.env_python, keep=keep)


def repository_head(root: Path) -> str:
    return (
        rebase_finish.git_repository(root)
        and subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or ""
    )


def cmd_rebase(stack: Stack, args) -> int:
    work = rebase.Rebase(stack.layout)
    if args.status:
        print(rebase_text.status(work.load()) if work.in_progress() else "rebase: none under way")
        return 0
    if args.abort:
        work.abort()
        return 0
    if args.amend:
        work.amend(args.amend)
        return 0
    if args.resume:
        return (
            0
            if work.resume(drop=args.drop, why=args.why, accept_failing=args.accept_failing)
            else 1
        )
    if args.drop or args.why or args.accept_failing:
        raise StackError("--drop, --accept-failing and --why go with --continue")
    rebase.check_start(
        stack.layout, stack.pin, target_version(stack, args), args.force
    )  # before any download
    with tempfile.TemporaryDirectory() as tmp:
        wheels = release_wheels(stack, args, Path(tmp))
        new_pin = rebase.pin_from_wheels(stack.pin.name, wheels)
        env = test_env(stack, args, new_pin, wheels)
        done = work.start(
            stack.pin,
            new_pin,
            wheels,
            env,
            check_upstream=args.check_upstream,
            force=args.force,
            repo_head=repository_head(stack.layout.root),
        )
    return 0 if done else 1


def cmd_rebase_check(stack: Stack, args) -> int:
    stack.ensure_work_tree()
    rebase.refuse_during_rebase(stack.layout, "rebase-check")
    with tempfile.TemporaryDirectory() as tmp:
        wheels = release_wheels(stack, args, Path(tmp))
        new_pin = rebase.pin_from_wheels(stack.pin.name, wheels)
        env = test_env(stack, args, new_pin, wheels)
        rows = drift.check_release(
            stack.layout, new_pin, wheels[0], env.python if env else "", env is not None
        )
    out = drift.write_report(
        stack.layout,
        stack.pin,
        new_pin,
        rows,
        env is not None,
        Path(args.out) if args.out else None,
        env.describe() if env else "",
    )
    print(out.read_text())
    print(f"rebase-check: report written to {out} (and {out.with_suffix('.json').name})")
    return 0


def cmd_drift_status(stack: Stack, args) -> int:
    stale = drift.stale_reports(stack.layout, stack.pin)
    for line in stale:
        print(f"drift-status: stale: {line}")
    if not stale:
        print(
            "drift-status: every report in "
            f"{drift.report_dir(stack.layout).relative_to(stack.layout.root)} "
            "describes the current series"
        )
    return 1 if stale else 0


def cmd_port_check(stack: Stack, args) -> int:
    problems = port.check(stack.layout, args.port, args.python, args.write, not args.skip_tests)
    for line in problems:
        print(f"port-check: {line}")
    if not problems:
        print(
            f"port-check: ports/{args.port} is in step with patches/series, applies exactly"
            + (", and its CPU tests pass" if not args.skip_tests else " (tests not run)")
        )
    return 1 if problems else 0


def cmd_port_build(stack: Stack, args) -> int:
    port.build(stack.layout, args.port, args.python)
    return 0


def cmd_verify_tests(stack: Stack, args) -> int:
    ok = verify.verify_tests(
        stack.layout.root, stack.work, stack.series.patches(), args.python, jobs=args.jobs
    )
    return 0 if ok else 1


def cmd_bundle(stack: Stack, args) -> int:
    bundle.build_bundle(stack.layout, Path(args.target), stack.layout.dist_dir / "bundle")
    return 0


def cmd_checkpoint(stack: Stack, args) -> int:
    from sglang_gemma4.gpu.serve.checkpoint import write_checkpoint

    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        write_checkpoint(
            args.variant,
            Path(args.out),
            layers=args.layers,
            arch=args.arch,
            weights=args.weights,
            seed=args.seed,
            repo_root=stack.layout.root,
            device=device,
        )
    except ValueError as e:  # a shape or option this generator does not make
        raise StackError(f"checkpoint: {e}") from None
    return 0


def cmd_version(stack: Stack, args) -> int:
    print(local_version(stack.pin, stack.series.patches()))
    return 0


def add_test_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--python",
        help="interpreter that runs each patch's tests, used as it is (default: the "
        "release's own CPU environment, built once under .cache/testenv/ from its wheel's pins)",
    )
    p.add_argument(
        "--env-python",
        default=sys.executable,
        help="the interpreter the release's CPU environment is made with (default: this one)",
    )
    p.add_argument(
        "--skip-tests",
        action="store_true",
        help="run no test: already-upstream by text alone, and nothing proves a moved patch works",
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sglang-gemma4",
        description=COMMANDS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("fetch", help="download and verify the pinned wheels").set_defaults(
        run=cmd_fetch
    )
    a = sub.add_parser("apply", help="pristine base + one commit per patch in work/sglang")
    a.add_argument(
        "--force",
        action="store_true",
        help="stash uncommitted edits / branch off unexported commits instead of refusing",
    )
    a.set_defaults(run=cmd_apply)
    b = sub.add_parser("build", help="write the patched wheel to dist/")
    b.add_argument("--python", help="target CPython, e.g. 3.12 (default: this interpreter's)")
    b.set_defaults(run=cmd_build)
    s = sub.add_parser("status", help="table of patches: applies? applied? upstream status")
    s.add_argument("--markdown", action="store_true", help="print the README patch table instead")
    s.set_defaults(run=cmd_status)
    sub.add_parser(
        "readme", help="rewrite README.md's tables, the results index and the Bench: lines"
    ).set_defaults(run=cmd_readme)
    pk = sub.add_parser(
        "pack-run",
        help="move a result folder's raw files (all but README.md, result.json "
        "and *.png) into its raw.tar.xz",
    )
    pk.add_argument(
        "folder",
        help="a run folder: benchmark_results/sglang-<release>/<date>-<gpu>-<variants>-<what>",
    )
    pk.set_defaults(run=cmd_pack_run)
    sub.add_parser(
        "lint", help="check the series, every patch header and commit subjects"
    ).set_defaults(run=cmd_lint)
    sub.add_parser("refresh", help="rewrite patch files from the work tree's commits").set_defaults(
        run=cmd_refresh
    )
    n = sub.add_parser("new", help="make a new patch (end of the series) from uncommitted edits")
    n.add_argument("slug", help="lower-case words joined by '-', e.g. gemma4-fused-router")
    n.add_argument("--subject", required=True, help="one-line summary (the patch's Subject:)")
    n.add_argument(
        "--author",
        default=f"{getpass.getuser()} <{getpass.getuser()}@localhost>",
        help="'Name <email>' for the Author: field",
    )
    n.set_defaults(run=cmd_new)
    r = sub.add_parser(
        "rebase",
        help="move the series to a newer sglang release, stopping at each conflict",
        description="Apply the series onto a newer release in work/sglang (branch rebase/X), one "
        "patch at a time, running each patch's own tests once it is in. It stops at a patch that "
        "does not apply (conflict markers or .rej files left to resolve; every failing hunk named; "
        "resolutions recorded by git rerere replayed), that looks already upstream (it "
        "reverse-applies, or at a conflict its tests pass without it), or whose tests fail. "
        "--continue also resumes after an interruption. The repository's files are written only "
        "after the last patch, then a checklist of what is left is printed.",
    )
    action = r.add_mutually_exclusive_group(required=True)
    action.add_argument(
        "--to", metavar="VERSION", help="start: download this sglang release from PyPI"
    )
    action.add_argument(
        "--wheel", nargs="+", metavar="WHL", help="start: use these local wheel files instead"
    )
    action.add_argument(
        "--continue",
        dest="resume",
        action="store_true",
        help="take the resolved work tree as the stopped patch (or keep a patch that looked "
        "upstream) and go on",
    )
    action.add_argument(
        "--abort", action="store_true", help="forget the rebase; back to the old pin's work tree"
    )
    action.add_argument(
        "--amend",
        metavar="PATCH",
        help="at failing tests: fold the work tree's edits into PATCH, moved earlier in this "
        "rebase, replay the later patches, and run PATCH's and the stopped patch's tests again",
    )
    action.add_argument(
        "--status",
        action="store_true",
        help="where a rebase under way stands: its patch, why it stopped, what to run next",
    )
    r.add_argument("--drop", action="store_true", help="with --continue: drop the stopped patch")
    r.add_argument(
        "--why",
        default="",
        help="with --drop: the evidence kept in the series comment "
        "(e.g. the upstream file and function that does the same); with --accept-failing: the "
        "reason",
    )
    r.add_argument(
        "--accept-failing",
        action="store_true",
        help="with --continue at failing tests: go on all the same (--why is required)",
    )
    r.add_argument(
        "--check-upstream",
        action="store_true",
        help="start: run the tests-based already-upstream check before every patch, not only "
        "at a conflict",
    )
    r.add_argument("--force", action="store_true", help="start: allow a release older than the pin")
    add_test_arguments(r)
    r.set_defaults(run=cmd_rebase)
    rc = sub.add_parser(
        "rebase-check", help="report how the series fares on a newer release (changes nothing)"
    )
    source = rc.add_mutually_exclusive_group(required=True)
    source.add_argument("--to", metavar="VERSION", help="download this sglang release from PyPI")
    source.add_argument(
        "--wheel", nargs="+", metavar="WHL", help="use these local wheel files instead"
    )
    rc.add_argument(
        "--out", help="report file (default docs/drift/sglang-VERSION.md, plus a .json beside it)"
    )
    add_test_arguments(rc)
    rc.set_defaults(run=cmd_rebase_check)
    sub.add_parser(
        "drift-status", help="fail if a drift report in docs/drift/ was made for another series"
    ).set_defaults(run=cmd_drift_status)
    pc = sub.add_parser(
        "port-check",
        help="check a port to a newer release (ports/VERSION)",
        description="Verify the port's wheels, apply its series exactly onto the release in "
        "work/ports/VERSION, run each ported patch's CPU tests there in the release's CPU test "
        "environment (.cache/testenv/), and check that every patch of patches/series is ported "
        "from its current version or named in the port's [dropped] table, and that the port "
        "agrees with docs/drift/. --write rewrites results.json and REPORT.md instead of "
        "comparing them.",
    )
    pc.add_argument(
        "--port", required=True, metavar="VERSION", help="the port's release, e.g. 0.5.23"
    )
    pc.add_argument(
        "--python",
        help="run the tests with this interpreter as it is (default: the release's "
        "CPU test environment, built once)",
    )
    pc.add_argument(
        "--write", action="store_true", help="rewrite the port's results.json and REPORT.md"
    )
    pc.add_argument("--skip-tests", action="store_true", help="only the data and apply checks")
    pc.set_defaults(run=cmd_port_check)
    pb = sub.add_parser(
        "port-build", help="write the port's patched wheel to dist/ (ports/VERSION)"
    )
    pb.add_argument(
        "--port", required=True, metavar="VERSION", help="the port's release, e.g. 0.5.23"
    )
    pb.add_argument("--python", help="the wheel's Python, e.g. 3.12 (default: this interpreter's)")
    pb.set_defaults(run=cmd_port_build)
    v = sub.add_parser("verify-tests", help="each patch's tests fail without it and pass with it")
    v.add_argument(
        "--python", default=sys.executable, help="interpreter with the test requirements"
    )
    v.add_argument(
        "--jobs",
        type=int,
        help="test runs at once, each in its own git worktree (default: one per core)",
    )
    v.set_defaults(run=cmd_verify_tests)
    bn = sub.add_parser(
        "bundle", help="offline install archive for a GPU host (dist/bundle/*.part-NN)"
    )
    bn.add_argument(
        "--target", default="scripts/gpu/target-hopper-py312.toml", help="the host's description"
    )
    bn.set_defaults(run=cmd_bundle)
    c = sub.add_parser(
        "checkpoint", help="a Gemma-4-shaped checkpoint (config, tokenizer, random or no weights)"
    )
    c.add_argument("--variant", required=True, choices=sorted(VARIANTS))
    c.add_argument("--layers", type=int, help="fewer layers, keeping the variant's features")
    c.add_argument(
        "--arch",
        choices=sorted(ARCHS),
        default="causal",
        help="text-only, multimodal, or the MTP assistant draft of a 26b-a4b/31b target",
    )
    c.add_argument(
        "--weights",
        choices=["random", "none"],
        default="none",
        help="random: safetensors with O(1) activations; none: serve with --load-format dummy",
    )
    c.add_argument("--seed", type=int, default=0)
    c.add_argument(
        "--device",
        default="cpu",
        help="where random weights are made: cpu, cuda (much faster) or auto (cuda when present)",
    )
    c.add_argument("--out", required=True)
    c.set_defaults(run=cmd_checkpoint)
    sub.add_parser("version", help="print the local version naming this series").set_defaults(
        run=cmd_version
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        status = args.run(Stack(Layout.discover()), args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's own flush at exit
        return status
    except (StackError, ResultsError, MarkerError) as e:
        print(f"sglang-gemma4 {args.command}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        if not stdout_reader_gone():
            # another pipe or socket broke (a download, a child process): that error is the news
            raise
        # The reader left early (`status | head`): stop as a shell tool does on SIGPIPE, with no
        # traceback, and point stdout at /dev/null so that the exit flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end is closed (poll reports an error on it)."""
    poller = select.poll()
    poller.register(sys.stdout.fileno(), select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))
