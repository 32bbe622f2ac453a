"""Move the series onto a newer upstream release, patch by patch, like `git rebase` / `quilt push`:

    start     the new release becomes a base commit; branch rebase/X is checked out in work/sglang
              and the patches are applied onto it one commit each
    test      after each patch goes in (clean, at offsets, by a 3-way merge, by hand) its own tests
              run against the work tree (patchtests.py); a failure stops the rebase like a conflict
    stop      at a patch that does not apply (3-way conflict markers or .rej files left in the work
              tree, every failing hunk named; a resolution git rerere recorded before is reused),
              at a patch that looks already upstream, or at a patch whose tests fail
    continue  the resolved tree becomes that patch's commit, a fix is folded into it, a failure is
              accepted with a reason, or the patch is dropped; go on.  After an interruption at any
              point it resumes where the saved state says
    amend     at failing tests, a fix that belongs to an earlier moved patch is folded into that
              patch's commit instead (rebase_amend.py)
    abort     the work tree returns to the old stack; nothing in the repository changed
    finish    after the last patch: the repository's files in one step (rebase_finish.py)

Nothing in the repository changes before the last patch is in.  The state lives in the work
tree's .git, written atomically after every step; every step can be redone from the saved state.
"""

import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.version import Version

from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.fetch import sha256_of
from sglang_gemma4.stack.layout import Layout
from sglang_gemma4.stack.maintainer import patchtests, rebase_text
from sglang_gemma4.stack.maintainer.hunks import HunkCheck, check_hunks
from sglang_gemma4.stack.maintainer.testenv import TestEnv
from sglang_gemma4.stack.patchfile import PatchFile
from sglang_gemma4.stack.pin import Pin, PinnedWheel
from sglang_gemma4.stack.series import Series
from sglang_gemma4.stack.worktree import (
    BRANCH,
    AppliedPatch,
    State,
    WorkTree,
    base_message,
    commit_directory,
    git_apply,
    unpack_wheel,
)

REBASE_STATE = "sglang-gemma4-rebase.json"
CONFLICT_MARKER = re.compile(r"^(<<<<<<< |>>>>>>> )", re.M)
# verdicts of the final report
CLEAN, OFFSET, MERGED, RESOLVED = (
    "clean",
    "refreshed (offsets)",
    "refreshed (3-way merge)",
    "resolved by hand",
)
REUSED = "resolved by a recorded resolution"
FORCED = "kept though it looked upstream"
UPSTREAM_TEXT, UPSTREAM_TESTS = "already upstream (text)", "already upstream (tests)"


@dataclass
class Taken:
    name: str
    commit: str
    verdict: str
    hunks: int
    failed_hunks: int = 0
    detail: str = ""
    tests: str = ""  # patchtests verdict; "" while they have not run on this commit
    tests_detail: str = ""
    accepted: str = ""  # why the maintainer went on although its tests fail


@dataclass
class Dropped:
    name: str
    evidence: str
    tests: list[str] = field(default_factory=list)  # its test files, removed at the finish


@dataclass
class Stop:
    kind: str  # "conflict", "upstream" or "tests"
    detail: str
    upstream: str = ""  # at a conflict: the already-upstream test check's outcome
    tests_sha: str = (
        ""  # the digest of its test files at the stop (a later edit is reported, or checked again)
    )
    amended: list[str] = field(default_factory=list)  # earlier patches amended here (rebase_amend)


@dataclass
class RebaseState:
    pin: dict  # the new pin: name, version, wheels
    old: dict  # the work tree's State before the rebase
    base: str
    patches: list[str]
    python: str
    run_tests: bool
    position: int = 0  # index in `patches` of the next (or stopped-at) patch
    taken: list[Taken] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    stop: Stop | None = None
    env_notes: list[str] = field(
        default_factory=list
    )  # how the tests' environment differs from the pins
    env_pins: dict = field(
        default_factory=dict
    )  # the CPU environment's pins (test/requirements-cpu.txt)
    check_upstream: bool = False  # run the tests-based upstream check before every patch
    repo_head: str = ""  # the repository's commit when the rebase started (tagged series/<old>)
    finishing: bool = False

    @property
    def new_pin(self) -> Pin:
        wheels = tuple(PinnedWheel(**w) for w in self.pin["wheels"])
        return Pin(name=self.pin["name"], version=self.pin["version"], wheels=wheels)

    @property
    def tip(self) -> str:
        return self.taken[-1].commit if self.taken else self.base

    @property
    def branch(self) -> str:
        return f"rebase/{self.pin['version']}"

    @property
    def old_state(self) -> State:
        return State(**{**self.old, "applied": [AppliedPatch(**a) for a in self.old["applied"]]})

    def current(self) -> Taken | None:
        """The patch at `position` when it is committed but its tests are not settled yet."""
        if (
            self.taken
            and self.position < len(self.patches)
            and self.taken[-1].name == self.patches[self.position]
        ):
            return self.taken[-1]
        return None

    @classmethod
    def from_json(cls, text: str) -> "RebaseState":
        data = json.loads(text)
        data["taken"] = [Taken(**t) for t in data["taken"]]
        data["dropped"] = [Dropped(**d) for d in data["dropped"]]
        data["stop"] = Stop(**data["stop"]) if data["stop"] else None
        return cls(**data)


def pin_from_wheels(name: str, wheel_paths: list[Path]) -> Pin:
    """A pin for local wheel files: version and Python from their names, sha256 from their bytes."""
    wheels, versions = [], set()
    for path in wheel_paths:
        dist, version, python_tag = path.name.split("-")[:3]
        if dist != name:
            raise StackError(f"{path.name} is not a {name} wheel")
        versions.add(version)
        digits = python_tag[2:]
        wheels.append(
            PinnedWheel(python=f"{digits[0]}.{digits[1:]}", file=path.name, sha256=sha256_of(path))
        )
    if len(versions) != 1:
        raise StackError(f"the wheels name different versions: {', '.join(sorted(versions))}")
    return Pin(name=name, version=versions.pop(), wheels=tuple(wheels))


def tests_pass_without(layout: Layout, tree: Path, patch: PatchFile, python: str) -> str:
    """Whether `patch` looks upstream by its tests, but for its switch's, run on `tree`, which lacks
    it: "its tests pass without it (...)" is the evidence; anything else says why not."""
    run = patchtests.run_patch_tests(layout.root, tree, patch, python, patchtests.UPSTREAM_MARKERS)
    if run.verdict == patchtests.PASSED:
        return f"its tests pass without it ({run.summary()})"
    if (
        run.verdict == patchtests.FAILED
    ):  # the first error tells a missing fix from a test the release broke
        first = run.first_error.replace("|", "/")[:160]  # a cell of the report's table
        return f"no: its tests fail without it ({run.failed} failed; first error: {first})"
    if run.verdict in (patchtests.NO_TESTS, patchtests.NO_CPU_TESTS):
        but = " but its kill_switch/gpu ones" if run.verdict == patchtests.NO_CPU_TESTS else ""
        return f"could not tell: {run.verdict}{but}"
    return f"could not tell: {run.summary()}"


def upstream_by_tests(evidence: str) -> bool:
    return evidence.startswith("its tests pass")


def refuse_during_rebase(layout: Layout, command: str) -> None:
    """apply/refresh/new would rewrite the work tree or patches/ under a rebase's feet."""
    if Rebase(layout).in_progress():
        raise StackError(
            f"a rebase is in progress in {layout.work_dir}: finish it with `make rebase-continue` "
            f"or `make rebase-abort` before `{command}`"
        )


def check_start(layout: Layout, old: Pin, version: str, force: bool) -> None:
    """Everything a start needs that can be checked before any download."""
    if Rebase(layout).in_progress():
        raise StackError(
            f"a rebase to {Rebase(layout).load().pin['version']} is in progress: "
            "`make rebase-continue` or `make rebase-abort` first"
        )
    if Version(version) == Version(old.version):
        raise StackError(f"the series is already on {old.requirement}")
    if Version(version) < Version(old.version) and not force:
        raise StackError(
            f"{version} is older than the pinned {old.version}: moving back is refused "
            "(FORCE=1 / --force moves the series back all the same)"
        )
    WorkTree(layout.work_dir).require_synced(Series.load(layout.patches_dir).patches())


class Rebase:
    def __init__(self, layout: Layout, log=print):
        self.layout = layout
        self.work = WorkTree(layout.work_dir)
        self.log = log

    @property
    def state_file(self) -> Path:
        return self.work.path / ".git" / REBASE_STATE

    def in_progress(self) -> bool:
        return self.state_file.is_file()

    def load(self) -> RebaseState:
        if not self.in_progress():
            raise StackError("no rebase in progress (start one with `make rebase TO=X`)")
        return RebaseState.from_json(self.state_file.read_text())

    def save(self, state: RebaseState) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=1) + "\n")
        tmp.replace(self.state_file)

    def patch(self, name: str) -> PatchFile:
        return PatchFile.read(self.layout.patches_dir / name)

    # -- start, continue, abort ---------------------------------------------------------------

    def start(
        self,
        old: Pin,
        new: Pin,
        wheels: list[Path],
        env: TestEnv | None,
        check_upstream: bool = False,
        force: bool = False,
        repo_head: str = "",
    ) -> bool:
        """env None: no tests run (text checks only)."""
        check_start(self.layout, old, new.version, force)
        patches = Series.load(self.layout.patches_dir).patches()
        old_state = self.work.require_synced(patches)
        self.layout.cache_dir.mkdir(parents=True, exist_ok=True)
        for path in wheels:  # sha256 recorded from these very bytes: the cache stays verified
            if path.resolve() != (self.layout.cache_dir / path.name).resolve():
                shutil.copy2(path, self.layout.cache_dir / path.name)
        seed = self.layout.cache_dir / new.wheel().file
        self.log(f"rebase: unpacking {seed.name} as the new base ...")
        with tempfile.TemporaryDirectory() as tmp:
            unpack_wheel(seed, Path(tmp))
            base = commit_directory(self.work.git, Path(tmp), base_message(new, new.wheel()))
        self.work.git.run("tag", "-f", f"upstream/{new.version}", base)
        self.work.git.run("config", "rerere.enabled", "true")
        state = RebaseState(
            pin={
                "name": new.name,
                "version": new.version,
                "wheels": [asdict(w) for w in new.wheels],
            },
            old=asdict(old_state),
            base=base,
            patches=[p.name for p in patches],
            python=env.python if env else "",
            run_tests=env is not None,
            env_notes=env.notes if env else ["tests not run (TESTS=0)"],
            env_pins=env.pins if env else {},
            check_upstream=check_upstream,
            repo_head=repo_head,
        )
        self.save(state)  # from here on `make rebase-continue` resumes, whatever happens next
        self.log(
            f"rebase: {old.requirement} -> {new.requirement}: {len(patches)} patches onto branch "
            f"{state.branch} in {self.work.path}\nrebase: {rebase_text.env_line(state)}"
        )
        return self._run(state)

    def resume(self, drop: bool = False, why: str = "", accept_failing: bool = False) -> bool:
        state = self.load()
        if state.finishing:
            self.log("rebase: finishing the interrupted finish")
            return self._finish(state)
        if state.stop is None:
            if drop or accept_failing:
                raise StackError(
                    "the rebase is not stopped at a patch: `make rebase-continue` alone resumes it"
                )
            self.log(f"rebase: resuming at {rebase_text.where(state)} (interrupted)")
            return self._run(state)
        name = state.patches[state.position]
        patch = self.patch(name)
        kind = state.stop.kind
        if accept_failing:
            if kind != "tests":
                raise StackError("ACCEPT_FAILING goes with a stop at failing tests")
            if not why.strip():
                raise StackError('say why the failure is acceptable: ACCEPT_FAILING=1 WHY="..."')
            state.taken[-1].accepted = why
            self.log(f"rebase: going on with {name} although its tests fail: {why}")
            self._advance(state)
        elif drop:
            self._drop(state, patch, why)
        elif (
            kind == "upstream"
        ):  # kept: the stop stays recorded until the forced apply is committed
            self._clean_to(state.tip, patch)
            if not self._apply(state, patch, verdict_override=FORCED):
                return False
        elif kind == "tests":
            self._take_fix(state, patch)
        else:
            self._take_resolution(state, patch)
        return self._run(state)

    def abort(self) -> None:
        state = self.load()
        if state.finishing:
            raise StackError(
                "the finish has begun writing the repository's files: `make rebase-continue` "
                "completes it (`make rebase-abort` would leave them half written)"
            )
        old = state.old_state
        self.work.git.run("reset", "-q", "--hard", state.tip)
        self.work.git.run("clean", "-q", "-fd")
        self.work.git.run("checkout", "-q", "-B", BRANCH, old.head)
        self.work.git.run("branch", "-D", state.branch, check=False)
        self.work.git.run("tag", "-d", f"upstream/{state.pin['version']}", check=False)
        self.state_file.unlink()
        self.log(
            f"rebase: aborted; {self.work.path} is back on {BRANCH} at {old.head[:12]} "
            f"(sglang {old.version}); the repository was not changed"
        )

    # -- the loop -------------------------------------------------------------------------------

    def _run(self, state: RebaseState) -> bool:
        """Apply and test the patches from state.position on; True when finished, False at a
        stop."""
        self._on_branch(state)
        total = len(state.patches)
        while state.position < total:
            name = state.patches[state.position]
            patch = self.patch(name)
            current = state.current()
            if current is None:
                self._clean_to(state.tip, patch)
                self.log(f"rebase: [{state.position + 1}/{total}] {name}")
                if not self._take(state, patch):
                    return False
                current = state.taken[-1]
            else:
                self._clean_to(current.commit, patch)
            if not self._test(state, patch, current):
                return False
            self._advance(state)
        return self._finish(state)

    def _advance(self, state: RebaseState) -> None:
        state.stop = None
        state.position += 1
        self.save(state)

    def _on_branch(self, state: RebaseState) -> None:
        if self.work.git.out("rev-parse", "--abbrev-ref", "HEAD") != state.branch:
            self.work.git.run("checkout", "-q", "-f", "-B", state.branch, state.tip)

    def _clean_to(self, commit: str, patch: PatchFile) -> None:
        """Back to a commit the tools made: their half-done apply undone (.rej files, files the
        patch creates); anything else untracked is left alone."""
        self.work.git.run("reset", "-q", "--hard", commit)
        strays = [f for f in self._untracked() if f.endswith(".rej") or f in patch.files]
        for path in strays:
            (self.work.path / path).unlink(missing_ok=True)

    def _take(self, state: RebaseState, patch: PatchFile) -> bool:
        """The upstream checks, then the patch applied and committed (False: stopped)."""
        evidence = self._upstream_text(state, patch)
        if not evidence and state.check_upstream and state.run_tests:
            tested = tests_pass_without(self.layout, self.work.path, patch, state.python)
            self.log(f"rebase:   already upstream? {tested}")
            evidence = (
                f"{UPSTREAM_TESTS}: {tested} on {state.pin['version']}"
                if upstream_by_tests(tested)
                else ""
            )
        if evidence:
            return self._stop(
                state,
                Stop("upstream", evidence),
                lambda s: rebase_text.upstream_message(s, patch.name, evidence),
            )
        return self._apply(state, patch)

    def _upstream_text(self, state: RebaseState, patch: PatchFile) -> str:
        if git_apply(self.work.git, patch, "--cached", "--reverse", "--check").ok:
            return f"{UPSTREAM_TEXT}: the patch reverse-applies on {state.pin['version']}"
        return ""

    def _stop(self, state: RebaseState, stop: Stop, message) -> bool:
        """Record the stop, then say it (`message(state)` reads the stop from the state)."""
        state.stop = stop
        self.save(state)
        self.log(message(state))
        return False

    def _apply(self, state: RebaseState, patch: PatchFile, verdict_override: str = "") -> bool:
        """Apply one patch onto the tip: exactly, then by a 3-way merge; stop on a conflict."""
        checks = check_hunks(self.work.git, state.tip, patch, self._left_out(state))
        failed = [c for c in checks if not c.applies]
        result = git_apply(self.work.git, patch, "--index")
        if result.ok:
            verdict = OFFSET if result.offsets else CLEAN
            return self._commit(
                state, patch, verdict_override or verdict, checks, "; ".join(result.offsets)
            )
        upstream = ""
        if state.run_tests and not verdict_override:  # the tree is the tip, without the patch
            upstream = tests_pass_without(self.layout, self.work.path, patch, state.python)
        merge = self.work.git.run(
            "apply", "--index", "--3way", str(patch.path.resolve()), check=False
        )
        if merge.returncode == 0:
            if self.work.git.out("write-tree") == self.work.git.out(
                "rev-parse", f"{state.tip}^{{tree}}"
            ):
                if verdict_override:
                    raise StackError(
                        f"{patch.name} changes nothing on {state.pin['version']}: there is nothing "
                        "to keep; `make rebase-continue DROP=1` drops it"
                    )
                evidence = f"{UPSTREAM_TEXT}: a 3-way merge leaves nothing to change"
                return self._stop(
                    state,
                    Stop("upstream", evidence),
                    lambda s: rebase_text.upstream_message(s, patch.name, evidence),
                )
            return self._commit(state, patch, verdict_override or MERGED, checks, "")
        if self._reuse_resolutions():
            return self._commit(
                state, patch, REUSED, checks, "git rerere replayed an earlier resolution"
            )
        how = self._leave_conflict(patch)
        stop = Stop(
            "conflict", "\n".join(c.describe() for c in failed), upstream, self._tests_digest(patch)
        )
        return self._stop(
            state,
            stop,
            lambda s: rebase_text.conflict_message(s, self.work.path, patch, failed, how),
        )

    def _reuse_resolutions(self) -> bool:
        """git rerere's recorded resolutions, replayed; True when they resolve every file."""
        unmerged = self._unmerged()
        if not unmerged:
            return False
        self.work.git.run("rerere", check=False)
        resolved = [
            f
            for f in unmerged
            if not CONFLICT_MARKER.search((self.work.path / f).read_text(errors="replace"))
        ]
        if resolved:
            self.work.git.run("add", "--", *resolved)
            self.log("rebase:   a recorded resolution resolved " + ", ".join(resolved))
        return len(resolved) == len(unmerged)

    def _leave_conflict(self, patch: PatchFile) -> str:
        """What the work tree holds after a failed 3-way apply (it writes nothing when it cannot
        merge at all, e.g. a file the release lacks: then the hunks that apply go in, the rest
        to .rej files)."""
        unmerged = self._unmerged()
        if unmerged:
            return "conflict markers (<<<<<<< ours / >>>>>>> theirs) in:\n" + "\n".join(
                f"    {f}" for f in unmerged
            )
        self.work.git.run("apply", "--reject", str(patch.path.resolve()), check=False)
        rejects = self._rejects()
        if rejects:
            return "rejected hunks in .rej files beside their targets:\n" + "\n".join(
                f"    {f}" for f in rejects
            )
        return "nothing: none of its files could be patched (port the change by hand)"

    def _commit(
        self,
        state: RebaseState,
        patch: PatchFile,
        verdict: str,
        checks: list[HunkCheck],
        detail: str,
        parent: str | None = None,
    ) -> bool:
        tree = self.work.git.out("write-tree")
        commit = self.work.git.commit_tree(
            tree, parent or state.tip, patch.commit_message(), patch.fields.get("Author")
        )
        self.work.git.run("reset", "-q", "--hard", commit)
        failed = sum(not c.applies for c in checks)
        state.taken.append(Taken(patch.name, commit, verdict, len(checks), failed, detail))
        state.stop = None
        self.save(state)
        self.log(f"rebase:   {verdict}" + (f" ({detail})" if detail else ""))
        return True

    def _test(self, state: RebaseState, patch: PatchFile, taken: Taken) -> bool:
        """The patch's own tests on the work tree holding it; False (a stop) when they do not
        pass."""
        if taken.tests and (
            taken.accepted or taken.tests not in (patchtests.FAILED, patchtests.COULD_NOT_RUN)
        ):
            return True
        if not state.run_tests:
            taken.tests, taken.tests_detail = patchtests.NOT_RUN, "TESTS=0"
            return True
        run = patchtests.run_patch_tests(self.layout.root, self.work.path, patch, state.python)
        taken.tests, taken.tests_detail = run.verdict, run.summary()
        self.log(f"rebase:   its tests: {run.summary()}")
        if run.ok:
            self.save(state)
            return True
        return self._stop(
            state,
            Stop("tests", run.summary(), tests_sha=self._tests_digest(patch)),
            lambda s: rebase_text.tests_message(s, self.work.path, patch, run),
        )

    def _tests_edited(self, stop: Stop, patch: PatchFile) -> bool:
        """The patch's test files changed in this repository since the stop."""
        return bool(stop.tests_sha) and stop.tests_sha != self._tests_digest(patch)

    def _tests_digest(self, patch: PatchFile) -> str:
        digest = hashlib.sha256()
        for test in patchtests.test_files(patch):
            path = self.layout.root / test
            digest.update(
                test.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"") + b"\0"
            )
        return digest.hexdigest()

    # -- what a maintainer's continue takes ----------------------------------------------------

    def _stage(self, patch: PatchFile) -> list[str]:
        """Stage the work tree's changes: tracked files, and the untracked files the patch
        creates; any other new file is refused (a note, an editor's backup)."""
        untracked = [f for f in self._untracked() if not f.endswith(".rej")]
        strays = [f for f in untracked if f not in patch.files]
        if strays:
            raise StackError(
                "the work tree has new files the patch does not create:\n  "
                + "\n  ".join(strays)
                + f"\nDelete or move them, or `git -C {self.work.path} add FILE` to make one "
                "part of the patch, then `make rebase-continue` again"
            )
        self.work.git.run("add", "-u")
        created = [f for f in untracked if f in patch.files]
        if created:
            self.work.git.run("add", "--", *created)
        return created

    def _take_resolution(self, state: RebaseState, patch: PatchFile) -> None:
        """Commit the resolved work tree as the patch, unless a conflict marker or .rej file is
        left."""
        problems = [
            f"{f}: rejected hunks left (port them, then delete the file)" for f in self._rejects()
        ]
        self.work.git.run("rerere", check=False)  # remember this resolution for the next time
        self._stage(patch)
        changed = self.work.git.out("diff", "--cached", "--name-only", state.tip).splitlines()
        for path in changed:
            file = self.work.path / path
            if file.is_file() and CONFLICT_MARKER.search(file.read_text(errors="replace")):
                problems.append(f"{path}: conflict markers left")
        if problems:
            raise StackError("the conflict is not resolved yet:\n  " + "\n  ".join(problems))
        if not changed:
            raise StackError(
                "the resolved tree changes nothing: `make rebase-continue DROP=1` drops "
                f"{patch.name}"
            )
        others = sorted(set(changed) - set(patch.files))
        details = (
            ([f"also changes {', '.join(others)}"] if others else [])
            + ([f"already upstream? {state.stop.upstream}"] if state.stop.upstream else [])
            + (
                ["its tests edited at the conflict"]
                if self._tests_edited(state.stop, patch)
                else []
            )
        )
        checks = check_hunks(self.work.git, state.tip, patch, self._left_out(state))
        self._commit(state, patch, RESOLVED, checks, "; ".join(details))

    def _take_fix(self, state: RebaseState, patch: PatchFile) -> None:
        """After failing tests: fold the work tree's edits into the patch's commit (none: the fix
        was in the repository, e.g. its test), and test again."""
        taken = state.taken[-1]
        parent = self.work.git.out("rev-parse", f"{taken.commit}^")
        self._stage(patch)
        if self.work.git.out("diff", "--cached", "--name-only", taken.commit):
            tree = self.work.git.out("write-tree")
            taken.commit = self.work.git.commit_tree(
                tree, parent, patch.commit_message(), patch.fields.get("Author")
            )
            self.work.git.run("reset", "-q", "--hard", taken.commit)
            taken.verdict = f"{taken.verdict}, fixed by hand after its tests failed"
            self.log(f"rebase: your edits are now part of {patch.name}")
        if self._tests_edited(state.stop, patch):
            edited = "its tests edited after they failed"
            taken.detail = f"{taken.detail}; {edited}" if taken.detail else edited
            self.log(f"rebase: {edited} (in this repository: commit them with the move)")
        taken.tests = taken.tests_detail = ""
        state.stop = None
        self.save(state)

    def _drop(self, state: RebaseState, patch: PatchFile, why: str) -> None:
        stop = state.stop
        if stop.kind == "tests":
            state.taken.pop()
            evidence = f"its tests fail on {state.pin['version']} ({stop.detail})"
        elif stop.kind == "upstream":
            evidence = stop.detail
        elif upstream_by_tests(stop.upstream):
            evidence = f"{UPSTREAM_TESTS}: {stop.upstream} on {state.pin['version']}"
        else:
            evidence = self._recheck_upstream(state, patch, stop)
        self.work.git.run("reset", "-q", "--hard", state.tip)
        self.work.git.run("rerere", "clear", check=False)
        for path in self._rejects():
            (self.work.path / path).unlink()
        state.dropped.append(
            Dropped(
                patch.name, f"{evidence}; {why}" if why else evidence, patchtests.test_files(patch)
            )
        )
        self.log(f"rebase: dropped {patch.name}")
        self._advance(state)

    def _recheck_upstream(self, state: RebaseState, patch: PatchFile, stop: Stop) -> str:
        """A drop at a conflict after its tests were edited (adapted to the release): the
        already-upstream check again, on the tip without the patch, so the evidence is the
        tests'."""
        if not (state.run_tests and self._tests_edited(stop, patch)):
            return "dropped at a conflict"
        self._clean_to(state.tip, patch)
        tested = tests_pass_without(self.layout, self.work.path, patch, state.python)
        self.log(f"rebase:   its tests were edited: already upstream? {tested}")
        if upstream_by_tests(tested):
            return (
                f"{UPSTREAM_TESTS}: {tested} on {state.pin['version']} (tests edited at the stop)"
            )
        return f"dropped at a conflict (already upstream? {tested})"

    # -- helpers --------------------------------------------------------------------------------

    def _left_out(self, state: RebaseState) -> list[PatchFile]:
        dropped = {d.name for d in state.dropped}
        return [self.patch(n) for n in state.patches[: state.position] if n in dropped]

    def _unmerged(self) -> list[str]:
        return sorted(set(self.work.git.out("diff", "--name-only", "--diff-filter=U").splitlines()))

    def _untracked(self) -> list[str]:
        return self.work.git.out("ls-files", "--others", "--exclude-standard").splitlines()

    def _rejects(self) -> list[str]:
        return [f for f in self._untracked() if f.endswith(".rej")]

    def _finish(self, state: RebaseState) -> bool:
        from sglang_gemma4.stack.maintainer.rebase_finish import finish

        finish(self, state)
        return True

    def amend(self, name: str) -> bool:
        from sglang_gemma4.stack.maintainer.rebase_amend import amend

        return amend(self, name)

    def report(self, state: RebaseState) -> str:
        return rebase_text.report(state)
