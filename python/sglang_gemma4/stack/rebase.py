"""Move the series onto a newer upstream release, patch by patch, like `git rebase` / `quilt push`:

    start     the new release becomes a base commit; branch rebase/X is checked out in work/sglang
              and the patches are applied onto it one commit each
    stop      at a patch that does not apply (3-way conflict markers or .rej files left in the work
              tree, every failing hunk named), or at a patch that looks already upstream (it
              reverse-applies, or its own tests pass without it): the maintainer decides
    continue  the resolved tree becomes that patch's commit (or --drop drops it); go on
    abort     the work tree returns to the old stack; nothing in the repository changed
    finish    after the last patch: upstream.toml, patches/ and the README table in one step

Nothing in the repository changes before the last patch is in.  The state of a rebase under way
lives in the work tree's .git, beside the tools' record of the applied series.
"""

import json
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sglang_gemma4.stack import readme_table, result_text
from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.fetch import sha256_of
from sglang_gemma4.stack.hunks import HunkCheck, check_hunks
from sglang_gemma4.stack.layout import Layout
from sglang_gemma4.stack.lint import listed_paths
from sglang_gemma4.stack.patchfile import PatchFile
from sglang_gemma4.stack.pin import Pin, PinnedWheel
from sglang_gemma4.stack.results import RESULTS_DIR
from sglang_gemma4.stack.series import Series
from sglang_gemma4.stack.verify import run_tests
from sglang_gemma4.stack.worktree import BRANCH, AppliedPatch, State, WorkTree, base_message, commit_directory, git_apply, unpack_wheel

REBASE_STATE = "sglang-gemma4-rebase.json"
CONFLICT_MARKER = re.compile(r"^(<<<<<<< |>>>>>>> )", re.M)
# verdicts of the final report
CLEAN, OFFSET, MERGED, RESOLVED = "clean", "refreshed (offsets)", "refreshed (3-way merge)", "resolved by hand"
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


@dataclass
class Dropped:
    name: str
    evidence: str


@dataclass
class Stop:
    kind: str  # "conflict" or "upstream"
    detail: str


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
        wheels.append(PinnedWheel(python=f"{digits[0]}.{digits[1:]}", file=path.name, sha256=sha256_of(path)))
    if len(versions) != 1:
        raise StackError(f"the wheels name different versions: {', '.join(sorted(versions))}")
    return Pin(name=name, version=versions.pop(), wheels=tuple(wheels))


def tests_pass_without(layout: Layout, tree: Path, patch: PatchFile, python: str) -> str:
    """Evidence that `patch` is upstream: its own tests pass on `tree`, which lacks it ("" if not)."""
    tests = [p for p in listed_paths(patch.fields.get("Tests", "")) if p.startswith("test/")]
    if not tests:
        return ""
    outcome = run_tests(layout.root, tree, tests, python)
    if outcome.passed > 0 and outcome.failed == 0:
        return f"its tests pass without it ({outcome})"
    return ""


def refuse_during_rebase(layout: Layout, command: str) -> None:
    """apply/refresh/new would rewrite the work tree or patches/ under a rebase's feet."""
    if Rebase(layout).in_progress():
        raise StackError(f"a rebase is in progress in {layout.work_dir}: finish it with `make rebase-continue` "
                         f"or `make rebase-abort` before `{command}`")


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

    def start(self, old: Pin, new: Pin, wheels: list[Path], python: str, run_tests: bool) -> bool:
        if self.in_progress():
            raise StackError(f"a rebase to {self.load().pin['version']} is in progress: "
                             "`make rebase-continue` or `make rebase-abort` first")
        if new.version == old.version:
            raise StackError(f"the series is already on {old.requirement}")
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
        state = RebaseState(pin={"name": new.name, "version": new.version, "wheels": [asdict(w) for w in new.wheels]},
                            old=asdict(old_state), base=base, patches=[p.name for p in patches],
                            python=python, run_tests=run_tests)
        self.work.git.run("checkout", "-q", "-B", state.branch, base)
        self.save(state)
        self.log(f"rebase: {old.requirement} -> {new.requirement}: {len(patches)} patches onto branch "
                 f"{state.branch} in {self.work.path}")
        return self._run(state)

    def resume(self, drop: bool = False, why: str = "") -> bool:
        state = self.load()
        if state.stop is None:
            raise StackError("the rebase is not stopped at a patch; run `make rebase-abort` to forget it")
        name = state.patches[state.position]
        patch = self.patch(name)
        if drop:
            self._reset(state.tip)
            evidence = state.stop.detail if state.stop.kind == "upstream" else "dropped at a conflict"
            state.dropped.append(Dropped(name, f"{evidence}; {why}" if why else evidence))
            self.log(f"rebase: dropped {name}")
        elif state.stop.kind == "upstream":
            state.stop = None
            if not self._apply(state, patch, verdict_override=FORCED):
                return False
        else:
            self._take_resolution(state, patch)
        state.stop = None
        state.position += 1
        self.save(state)
        return self._run(state)

    def abort(self) -> None:
        state = self.load()
        old = state.old_state
        self._reset(state.tip)
        self.work.git.run("checkout", "-q", "-B", BRANCH, old.head)
        self.work.git.run("branch", "-D", state.branch, check=False)
        self.work.git.run("tag", "-d", f"upstream/{state.pin['version']}", check=False)
        self.state_file.unlink()
        self.log(f"rebase: aborted; {self.work.path} is back on {BRANCH} at {old.head[:12]} "
                 f"(sglang {old.version}); the repository was not changed")

    # -- the loop -------------------------------------------------------------------------------

    def _run(self, state: RebaseState) -> bool:
        """Apply the patches from state.position on; True when finished, False at a stop."""
        total = len(state.patches)
        while state.position < total:
            name = state.patches[state.position]
            patch = self.patch(name)
            self.log(f"rebase: [{state.position + 1}/{total}] {name}")
            evidence = self._upstream_evidence(state, patch)
            if evidence:
                state.stop = Stop("upstream", evidence)
                self.save(state)
                self.log(self._upstream_message(state, name, evidence))
                return False
            if not self._apply(state, patch):
                return False
            state.position += 1
            self.save(state)
        self._finish(state)
        return True

    def _upstream_evidence(self, state: RebaseState, patch: PatchFile) -> str:
        if git_apply(self.work.git, patch, "--cached", "--reverse", "--check").ok:
            return f"{UPSTREAM_TEXT}: the patch reverse-applies on {state.pin['version']}"
        if state.run_tests:
            evidence = tests_pass_without(self.layout, self.work.path, patch, state.python)
            if evidence:
                return f"{UPSTREAM_TESTS}: {evidence} on {state.pin['version']}"
        return ""

    def _apply(self, state: RebaseState, patch: PatchFile, verdict_override: str = "") -> bool:
        """Apply one patch onto the tip: exactly, then by a 3-way merge; stop on a conflict."""
        checks = check_hunks(self.work.git, state.tip, patch, self._left_out(state))
        failed = [c for c in checks if not c.applies]
        result = git_apply(self.work.git, patch, "--index")
        if result.ok:
            verdict = OFFSET if result.offsets else CLEAN
            return self._commit(state, patch, verdict_override or verdict, checks, "; ".join(result.offsets))
        merge = self.work.git.run("apply", "--index", "--3way", str(patch.path.resolve()), check=False)
        if merge.returncode == 0:
            if self.work.git.out("write-tree") == self.work.git.out("rev-parse", f"{state.tip}^{{tree}}"):
                if verdict_override:
                    raise StackError(f"{patch.name} changes nothing on {state.pin['version']}: there is nothing "
                                     "to keep; `make rebase-continue DROP=1` drops it")
                state.stop = Stop("upstream", f"{UPSTREAM_TEXT}: a 3-way merge leaves nothing to change")
                self.save(state)
                self.log(self._upstream_message(state, patch.name, state.stop.detail))
                return False
            return self._commit(state, patch, verdict_override or MERGED, checks, "")
        how = self._leave_conflict(patch)
        state.stop = Stop("conflict", "\n".join(c.describe() for c in failed))
        self.save(state)
        self.log(self._conflict_message(state, patch, failed, how))
        return False

    def _leave_conflict(self, patch: PatchFile) -> str:
        """What the work tree holds after a failed 3-way apply (it writes nothing when it cannot
        merge at all, e.g. a file the release lacks: then the hunks that apply go in, the rest
        to .rej files)."""
        unmerged = self._unmerged()
        if unmerged:
            return "conflict markers (<<<<<<< ours / >>>>>>> theirs) in:\n" + "\n".join(f"    {f}" for f in unmerged)
        self.work.git.run("apply", "--reject", str(patch.path.resolve()), check=False)
        rejects = self._rejects()
        if rejects:
            return "rejected hunks in .rej files beside their targets:\n" + "\n".join(f"    {f}" for f in rejects)
        return "nothing: none of its files could be patched (port the change by hand)"

    def _commit(self, state: RebaseState, patch: PatchFile, verdict: str, checks: list[HunkCheck],
                detail: str) -> bool:
        tree = self.work.git.out("write-tree")
        commit = self.work.git.commit_tree(tree, state.tip, patch.commit_message(), patch.fields.get("Author"))
        self.work.git.run("reset", "-q", "--hard", commit)
        failed = sum(not c.applies for c in checks)
        state.taken.append(Taken(patch.name, commit, verdict, len(checks), failed, detail))
        self.log(f"rebase:   {verdict}" + (f" ({detail})" if detail else ""))
        return True

    def _take_resolution(self, state: RebaseState, patch: PatchFile) -> None:
        """Stage the work tree as it is (as `git add -A` would) and commit it, unless a conflict
        marker or a .rej file is left."""
        problems = [f"{f}: rejected hunks left (port them, then delete the file)" for f in self._rejects()]
        self.work.git.run("add", "-A", "--", ".", ":!*.rej")
        changed = self.work.git.out("diff", "--cached", "--name-only", state.tip).splitlines()
        for path in changed:
            file = self.work.path / path
            if file.is_file() and CONFLICT_MARKER.search(file.read_text(errors="replace")):
                problems.append(f"{path}: conflict markers left")
        if problems:
            raise StackError("the conflict is not resolved yet:\n  " + "\n  ".join(problems))
        if not changed:
            raise StackError(f"the resolved tree changes nothing: `make rebase-continue DROP=1` drops {patch.name}")
        checks = check_hunks(self.work.git, state.tip, patch, self._left_out(state))
        self._commit(state, patch, RESOLVED, checks, "")

    def _left_out(self, state: RebaseState) -> list[PatchFile]:
        dropped = {d.name for d in state.dropped}
        return [self.patch(n) for n in state.patches[: state.position] if n in dropped]

    def _unmerged(self) -> list[str]:
        return sorted(set(self.work.git.out("diff", "--name-only", "--diff-filter=U").splitlines()))

    def _rejects(self) -> list[str]:
        untracked = self.work.git.out("ls-files", "--others", "--exclude-standard").splitlines()
        return [f for f in untracked if f.endswith(".rej")]

    def _reset(self, commit: str) -> None:
        self.work.git.run("reset", "-q", "--hard", commit)
        self.work.git.run("clean", "-q", "-fd")

    # -- messages -------------------------------------------------------------------------------

    def _where(self, state: RebaseState) -> str:
        return f"patch {state.position + 1}/{len(state.patches)}"

    def _upstream_message(self, state: RebaseState, name: str, evidence: str) -> str:
        return (f"\nrebase: stopped at {self._where(state)} {name}: it looks already upstream in "
                f"sglang {state.pin['version']}\n  {evidence}\n"
                f"Next:\n  make rebase-continue DROP=1   drop it (the series keeps a comment with this evidence;\n"
                f"                                WHY=\"...\" adds yours, e.g. the upstream function)\n"
                f"  make rebase-continue          keep it and apply it anyway\n"
                f"  make rebase-abort             forget the rebase; the repository is unchanged")

    def _conflict_message(self, state: RebaseState, patch: PatchFile, failed: list[HunkCheck], how: str) -> str:
        hunks = "\n".join(f"  {c.describe()}" for c in failed) or "  (every hunk applies alone; together they do not)"
        return (f"\nrebase: stopped at {self._where(state)} {patch.name}: it does not apply to sglang "
                f"{state.pin['version']}\nFailing hunks ({len(failed)} of {len(patch.hunks)}):\n{hunks}\n"
                f"The work tree ({self.work.path}, branch {state.branch}) holds {how}\n"
                f"Next: edit the files until they hold the patch's change for {state.pin['version']}, then\n"
                f"  make rebase-continue          take the result as the new {patch.name} and go on\n"
                f"  make rebase-continue DROP=1 WHY=\"...\"   drop this patch instead (say why: upstream's fix)\n"
                f"  make rebase-abort             forget the rebase; the repository is unchanged\n"
                f"{self.report(state)}")

    def report(self, state: RebaseState) -> str:
        rows = ["| # | patch | verdict | hunks (failed) | detail |", "|---|---|---|---|---|"]
        by_name = {t.name: t for t in state.taken} | {d.name: d for d in state.dropped}
        for i, name in enumerate(state.patches[: state.position + 1], start=1):
            entry = by_name.get(name)
            if isinstance(entry, Taken):
                rows.append(f"| {i} | {name} | {entry.verdict} | {entry.hunks} ({entry.failed_hunks}) | {entry.detail} |")
            elif isinstance(entry, Dropped):
                rows.append(f"| {i} | {name} | dropped | | {entry.evidence} |")
            elif state.stop:
                rows.append(f"| {i} | {name} | stopped: {state.stop.kind} | | |")
        return "\n".join(rows)

    # -- finish -------------------------------------------------------------------------------

    def _finish(self, state: RebaseState) -> None:
        """The last patch is in: write upstream.toml, patches/ and the README table together."""
        new, git = state.new_pin, self.work.git
        kept = []
        for taken in state.taken:
            patch = self.patch(taken.name)
            text = patch.with_diff(git.diff(f"{taken.commit}^", taken.commit))
            if text != patch.text:
                patch.path.write_text(text)
            kept.append(AppliedPatch(taken.name, PatchFile.read(patch.path).sha256, taken.commit))
        evidence = {d.name: d.evidence for d in state.dropped}
        lines = []
        for line in self.layout.series_file.read_text().splitlines():
            entry = line.split("#", 1)[0].strip()
            if entry in evidence:
                (self.layout.patches_dir / entry).unlink()
                lines.append(f"# {entry}: dropped in the move to sglang {new.version}: {evidence[entry]}")
            else:
                lines.append(line)
        self.layout.series_file.write_text("\n".join(lines) + "\n")
        self.layout.pin_file.write_text(new.render())
        readme = self.layout.root / "README.md"
        if readme.is_file():
            series = Series.load(self.layout.patches_dir)
            readme_table.update_readme(readme, series)
            if (self.layout.root / RESULTS_DIR).is_dir():  # the results table names the pin it compares with
                result_text.regenerate(self.layout.root, new.version,
                                       [self.layout.patches_dir / name for name in series.names])

        old_version = state.old_state.version
        git.run("branch", "-f", f"{BRANCH}-{old_version}", state.old_state.head)
        git.run("checkout", "-q", "-B", BRANCH, state.tip)
        git.run("branch", "-D", state.branch, check=False)
        wheel = new.wheel()
        self.work.save_state(State(version=new.version, wheel_file=wheel.file, wheel_sha256=wheel.sha256,
                                   base=state.base, applied=kept))
        self.log(f"\nrebase: done, {len(kept)} patches on {new.requirement}, {len(state.dropped)} dropped.\n"
                 f"{self.report(state)}\n"
                 f"Written: upstream.toml, patches/, README.md's generated tables. Review the move with\n"
                 f"  git -C {self.work.path} range-diff upstream/{old_version}..{BRANCH}-{old_version} "
                 f"upstream/{new.version}..{BRANCH}")
        self.state_file.unlink()
