"""The git work tree: the pristine upstream release as the base commit, one commit per patch.

Layout inside the work tree follows upstream's repository: wheel path `sglang/x.py` lives at
`python/sglang/x.py`, so patch files use the paths an upstream checkout has.  What the tools did
is recorded in .git/sglang-gemma4.json; anything else found there (edits, commits) is the user's
and is never overwritten unless they ask with --force, and even then it is stashed or branched.
"""

import json
import re
import shutil
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.fetch import fetch_wheel
from sglang_gemma4.stack.gitrepo import Git
from sglang_gemma4.stack.patchfile import PatchFile
from sglang_gemma4.stack.pin import Pin, PinnedWheel

BRANCH = "gemma4"
STATE_FILE = "sglang-gemma4.json"
COMPILED_SUFFIXES = (".so",)  # built per Python version; `build` takes them from the pinned wheel
IGNORED_IN_WORK_TREE = ("__pycache__/", "*.pyc", "*.so")
OFFSET = re.compile(r"Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)")
FAILED_HUNK = re.compile(r"error: patch failed: (\S+):(\d+)")
FILE_ERROR = re.compile(
    r"error: (\S+): (No such file or directory|does not exist in index|already exists in "
    r"(?:index|working directory))"
)


@dataclass
class AppliedPatch:
    name: str
    sha256: str
    commit: str


@dataclass
class State:
    version: str
    wheel_file: str
    wheel_sha256: str
    base: str
    applied: list[AppliedPatch] = field(default_factory=list)

    @property
    def head(self) -> str:
        return self.applied[-1].commit if self.applied else self.base

    @property
    def commits(self) -> list[str]:
        return [self.base] + [a.commit for a in self.applied]


@dataclass(frozen=True)
class ApplyResult:
    patch: PatchFile
    ok: bool
    offsets: tuple[str, ...] = ()  # "file hunk #n: offset k lines"
    error: str = ""

    @property
    def verdict(self) -> str:
        if not self.ok:
            return "NO"
        return "offset" if self.offsets else "yes"


def explain_failure(patch: PatchFile, stderr: str) -> str:
    """Name the file and hunk git apply refused, from its error lines."""
    lines = []
    for file, line in FAILED_HUNK.findall(stderr):
        hunk = patch.hunk_at(file, int(line))
        where = f"hunk #{hunk.number} ({hunk.header})" if hunk else f"the hunk at line {line}"
        lines.append(f"{file}: {where} does not match upstream")
    for file, reason in FILE_ERROR.findall(stderr):
        lines.append(f"{file}: {reason}")
    if not lines:
        lines.append(stderr.strip() or "git apply failed")
    return "\n".join(f"  {line}" for line in lines)


def git_apply(git: Git, patch: PatchFile, *mode: str) -> ApplyResult:
    """git apply with no fuzz (git never fuzzes); offsets are reported, rejects never written."""
    proc = git.run(
        "apply", *mode, "--verbose", "--whitespace=nowarn", str(patch.path.resolve()), check=False
    )
    if proc.returncode != 0:
        return ApplyResult(patch, ok=False, error=explain_failure(patch, proc.stderr))
    current = None
    offsets = []
    for line in proc.stderr.splitlines():
        if line.startswith("Checking patch "):
            current = line[len("Checking patch ") :].rstrip(".")
        match = OFFSET.match(line)
        if match:
            offsets.append(f"{current} hunk #{match.group(1)}: offset {match.group(3)} lines")
    return ApplyResult(patch, ok=True, offsets=tuple(offsets))


def unpack_wheel(wheel_path: Path, dest: Path) -> None:
    """Unpack a wheel's files into dest/python/<top-level> with their archived permissions, minus
    its .dist-info and compiled modules. Read with zipfile: every wheel here was checked against
    its pinned sha256 when fetched, so `wheel unpack`'s RECORD check (and its 3 s) buys nothing."""
    target = dest / "python"
    with zipfile.ZipFile(wheel_path) as wheel:
        for member in wheel.infolist():
            top = member.filename.split("/", 1)[0]
            if top.endswith(".dist-info") or Path(member.filename).suffix in COMPILED_SUFFIXES:
                continue
            path = Path(wheel.extract(member, target))
            if permissions := member.external_attr >> 16 & 0o777:
                path.chmod(permissions)


def commit_directory(git: Git, directory: Path, message: str) -> str:
    """Commit every file of `directory` as a parentless commit, touching no checkout or index."""
    with tempfile.TemporaryDirectory() as tmp:
        index = Git(git.repo, index_file=Path(tmp) / "index")
        index.run("--work-tree", str(directory), "add", "-A", ".")
        tree = index.out("write-tree")
    return git.commit_tree(tree, None, message)


def base_message(pin: Pin, wheel: PinnedWheel) -> str:
    return (
        f"{pin.name} {pin.version} (pristine upstream)\n\n"
        f"Unpacked from the pinned wheel; compiled modules left out.\n\n"
        f"Upstream-Wheel: {wheel.file}\nUpstream-Sha256: {wheel.sha256}\n"
    )


class WorkTree:
    def __init__(self, path: Path):
        self.path = path
        self.git = Git(path)

    @property
    def state_file(self) -> Path:
        return self.path / ".git" / STATE_FILE

    def exists(self) -> bool:
        return self.state_file.is_file()

    def require(self) -> "WorkTree":
        if not self.exists():
            raise StackError(f"no work tree at {self.path}: run `make apply` first")
        return self

    def load_state(self) -> State:
        data = json.loads(self.state_file.read_text())
        data["applied"] = [AppliedPatch(**a) for a in data["applied"]]
        return State(**data)

    def save_state(self, state: State) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=1) + "\n")
        tmp.replace(self.state_file)

    # -- creation -----------------------------------------------------------------------------

    def ensure(self, pin: Pin, cache_dir: Path) -> "WorkTree":
        """This work tree, created first from the pinned wheel (downloaded into `cache_dir` and
        verified unless it is there) when it does not exist yet."""
        if not self.exists():
            wheel = pin.wheel()
            self.create(pin, wheel, fetch_wheel(pin, wheel, cache_dir))
        return self

    def create(self, pin: Pin, wheel: PinnedWheel, wheel_path: Path, log=print) -> None:
        """Unpack the pinned wheel and commit it as the pristine base (atomically: a partial
        work tree is never left at self.path)."""
        partial = self.path.with_name(self.path.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        git = Git(partial)
        git.run("init", "-q", "-b", BRANCH)
        (partial / ".git" / "info").mkdir(exist_ok=True)
        (partial / ".git" / "info" / "exclude").write_text("\n".join(IGNORED_IN_WORK_TREE) + "\n")
        log(f"apply: unpacking {wheel.file} into {self.path} ...")
        unpack_wheel(wheel_path, partial)
        base = commit_directory(git, partial, base_message(pin, wheel))
        git.run("update-ref", f"refs/heads/{BRANCH}", base)
        git.run("read-tree", "HEAD")
        git.run("update-index", "-q", "--refresh", check=False)
        git.run("tag", "-f", f"upstream/{pin.version}", base)
        Path(partial / ".git" / STATE_FILE).write_text(
            json.dumps(
                asdict(
                    State(
                        version=pin.version,
                        wheel_file=wheel.file,
                        wheel_sha256=wheel.sha256,
                        base=base,
                    )
                ),
                indent=1,
            )
        )
        partial.rename(self.path)
        log(
            f"apply: base commit {base[:12]} = {pin.requirement} pristine (tag "
            f"upstream/{pin.version})"
        )

    # -- checks ---------------------------------------------------------------------------------

    def local_changes(self) -> list[str]:
        return self.git.dirty_paths()

    def head(self) -> str:
        return self.git.out("rev-parse", "HEAD")

    def require_synced(self, patches: list[PatchFile]) -> State:
        """The state of a work tree that is exactly the series: clean, nothing extra, nothing
        stale."""
        state = self.require().load_state()
        dirty = self.local_changes()
        if dirty:
            raise StackError(
                f"{self.path} has uncommitted changes ({len(dirty)} paths, e.g. "
                f"{dirty[0].strip()}):"
                " commit and `make refresh`, or `make new`, first"
            )
        if self.head() != state.head:
            raise StackError(
                f"{self.path}: HEAD is not the last applied patch; `make refresh` exports "
                "commits you made, `make apply` re-syncs"
            )
        expected = [(p.name, p.sha256) for p in patches]
        if [(a.name, a.sha256) for a in state.applied] != expected:
            raise StackError(
                f"{self.path} does not hold the current patches/series: run `make apply`"
            )
        return state

    # -- apply ----------------------------------------------------------------------------------

    def apply(self, pin: Pin, patches: list[PatchFile], force: bool = False, log=print) -> State:
        """Bring the work tree to base + every patch of the series, one commit each.

        Idempotent: patches already applied from identical files are kept.  Stops at the first
        patch that does not apply, leaving the tree at the last good one (StackError).
        """
        state = self.load_state()
        if state.version != pin.version or state.wheel_sha256 not in {w.sha256 for w in pin.wheels}:
            raise StackError(
                f"{self.path} was made from {state.wheel_file}, not the pin ({pin.requirement}); "
                "move it away (or `make clean-work`) and re-run"
            )
        stamp = time.strftime("%Y%m%d-%H%M%S")
        dirty = self.local_changes()
        if dirty:
            if not force:
                raise StackError(
                    f"{self.path} has uncommitted changes ({len(dirty)} paths, e.g. "
                    f"{dirty[0].strip()}).\n"
                    "Keep them with `git commit` + `make refresh` or `make new`, or re-run with "
                    "FORCE=1 "
                    "(stashes them with `git stash`)."
                )
            self.git.run(
                "stash",
                "push",
                "-q",
                "--include-untracked",
                "-m",
                f"sglang-gemma4 apply --force {stamp}",
            )
            log(f"apply: stashed {len(dirty)} uncommitted paths (git -C {self.path} stash list)")
        head = self.head()
        if head not in state.commits:
            if not force:
                raise StackError(
                    f"{self.path}: HEAD {head[:12]} has commits that no patch file holds.\n"
                    "Export them with `make refresh` (or `make new`), or re-run with FORCE=1 "
                    "(keeps them on a backup branch)."
                )
            self.git.run("branch", f"backup/{stamp}", head)
            log(f"apply: kept your commits on branch backup/{stamp}")
            self.git.run("reset", "-q", "--hard", state.head)
            head = state.head
        state.applied = state.applied[: state.commits.index(head)]

        keep = 0
        while keep < min(len(state.applied), len(patches)) and (
            state.applied[keep].name,
            state.applied[keep].sha256,
        ) == (patches[keep].name, patches[keep].sha256):
            keep += 1
        if keep < len(state.applied):
            stale = ", ".join(a.name for a in state.applied[keep:])
            log(f"apply: rewinding past {stale} (changed or removed in patches/)")
            state.applied = state.applied[:keep]
        self.git.run("reset", "-q", "--hard", state.head)
        self.save_state(state)

        todo = patches[keep:]
        if not todo:
            log(f"apply: {self.path} is up to date ({len(patches)} patches on {pin.requirement})")
        for i, patch in enumerate(todo, start=keep + 1):
            result = git_apply(self.git, patch, "--index")
            if not result.ok:
                raise StackError(
                    f"patch {i}/{len(patches)} {patch.name} does not apply to {pin.requirement}:\n"
                    f"{result.error}\nThe work tree stays at the last good patch "
                    f"({state.applied[-1].name if state.applied else 'the pristine base'})."
                )
            tree = self.git.out("write-tree")
            commit = self.git.commit_tree(
                tree, state.head, patch.commit_message(), patch.fields.get("Author")
            )
            self.git.run("update-ref", "HEAD", commit)
            state.applied.append(AppliedPatch(patch.name, patch.sha256, commit))
            self.save_state(state)
            note = (
                f" (with {'; '.join(result.offsets)}: run `make refresh`)" if result.offsets else ""
            )
            log(f"apply: [{i}/{len(patches)}] {patch.name}: {patch.subject}{note}")
        return state

    # -- index-only checks (the checkout is never touched) ---------------------------------------

    def check_series(self, base: str, patches: list[PatchFile]) -> list[ApplyResult]:
        """Apply the series in order onto `base` in a scratch index; later patches are checked on
        top of the ones that applied."""
        with tempfile.TemporaryDirectory() as tmp:
            index = Git(self.path, index_file=Path(tmp) / "index")
            index.run("read-tree", base)
            return [git_apply(index, patch, "--cached") for patch in patches]
