"""At a stop of a rebase, fold the work tree's edits into a patch moved earlier in it (`make
rebase-amend PATCH=NAME`), for a failure whose cause belongs to that patch:

    check     the rebase is stopped at failing tests; NAME was moved (not dropped, not the stopped
              patch); the edits change only files NAME's commit changes
              (no edits at all: NAME's accepted failing tests are run again, nothing else)
    fold      the edits become a `fixup!` commit on the tip, autosquashed into NAME's commit with
              the later moved commits replayed on it (git rebase -i --autosquash)
    test      NAME's tests on its new commit, then the stopped patch's on the tip (the patches
              between them are not tested again)
    record    NAME's row says "amended at the stop of <stopped patch>"; the stop lists it

Any refusal after the fold began (a conflict while replaying, NAME's tests failing) puts the
commits, the edits and the saved state back as they were.
"""

from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.maintainer import patchtests

REPLAY_ENV = {"GIT_SEQUENCE_EDITOR": "true", "GIT_EDITOR": "true"}  # autosquash's order as it is


def find_taken(state, name: str):
    """NAME's index in state.taken; a refusal that says why it cannot be amended."""
    matches = [p for p in state.patches if p == name or p == f"{name}.patch"]
    if not matches:
        matches = [p for p in state.patches if p.startswith(name)]
    if len(matches) != 1:
        known = (
            "no patch of the series" if not matches else "several patches: " + ", ".join(matches)
        )
        raise StackError(f"cannot amend {name}: it names {known}")
    (name,) = matches
    if name in {d.name for d in state.dropped}:
        raise StackError(f"cannot amend {name}: it was dropped from this move")
    stopped = state.patches[state.position]
    if name == stopped:
        raise StackError(
            f"{name} is the stopped patch: `make rebase-continue` folds your edits into it"
        )
    if state.patches.index(name) > state.position:
        raise StackError(f"cannot amend {name}: it is not moved yet (the rebase is at {stopped})")
    return next(i for i, t in enumerate(state.taken) if t.name == name)


def edited_files(rebase) -> tuple[list[str], list[str]]:
    """Tracked files changed in the work tree, and new files (.rej files left out)."""
    git = rebase.work.git
    changed = git.out("diff", "--name-only", "HEAD").splitlines()
    return changed, [f for f in rebase._untracked() if not f.endswith(".rej")]


def amend(rebase, name: str) -> bool:
    """Fold the work tree's edits into the moved patch NAME; True when the stopped patch's tests
    pass afterwards."""
    state = rebase.load()
    if state.finishing:
        raise StackError("the finish has begun: there is no stop to amend from")
    if state.stop is None or state.stop.kind != "tests":
        kind = state.stop.kind if state.stop else "no stop (interrupted)"
        raise StackError(
            f"amend goes with a stop at failing tests, where the stopped patch is committed and "
            f"your edits are the only change; this rebase is at {kind}"
        )
    index = find_taken(state, name)
    target = state.taken[index]
    stopped = state.taken[-1]
    git = rebase.work.git
    if git.out("rev-parse", "HEAD") != stopped.commit:
        raise StackError(
            f"{rebase.work.path} is not at the stopped patch's commit ({stopped.commit[:12]}): "
            "leave your edits uncommitted there"
        )
    changed, created = edited_files(rebase)
    if not changed and not created:
        if target.accepted and state.run_tests:
            return test_again(rebase, state, target)
        raise StackError(f"no edits in {rebase.work.path} to fold into {target.name}")
    touched = set(git.out("diff", "--name-only", f"{target.commit}^", target.commit).splitlines())
    outside = sorted(set(changed + created) - touched)
    if outside:
        raise StackError(
            f"your edits change files {target.name} does not touch:\n  "
            + "\n  ".join(outside)
            + f"\nOnly its own files can be amended from here ({', '.join(sorted(touched))})"
        )
    saved, tip = rebase.state_file.read_text(), stopped.commit  # as they were, for a refusal
    git.run("add", "-A", "--", *changed, *created)
    fixup = git.commit_tree(git.out("write-tree"), tip, f"fixup! {target.commit}\n", None)
    rebase.log(f"rebase: folding your edits ({', '.join(changed + created)}) into {target.name}")
    try:
        commits = replay(rebase, state, index, fixup)
        for taken, commit in zip(state.taken[index:], commits):
            taken.commit = commit
        note = f"amended at the stop of {stopped.name}"
        if note not in target.detail:  # amended twice at one stop: said once
            target.detail = f"{target.detail}; {note}" if target.detail else note
        retest(rebase, state, target)
    except BaseException:
        restore(rebase, state.branch, tip, fixup, saved)
        raise
    if target.name not in state.stop.amended:
        state.stop.amended.append(target.name)
    rebase.save(state)
    return rerun_stopped(rebase, state)


def test_again(rebase, state, target) -> bool:
    """No edits in the tree, and NAME went on with failing tests: its tests again (e.g. adapted in
    this repository since); passing, its accepted failure is gone from the table."""
    stopped = state.taken[-1]
    retest(rebase, state, target)
    if target.accepted:
        rebase.log(f"rebase: {target.name}'s tests still fail; its accepted failure stays")
    else:
        note = f"tested again at the stop of {stopped.name}"
        if note not in target.detail:
            target.detail = f"{target.detail}; {note}" if target.detail else note
    rebase.save(state)
    return not target.accepted


def replay(rebase, state, index: int, fixup: str) -> list[str]:
    """Autosquash the fixup into state.taken[index]'s commit; the new commits from it to the tip,
    each checked to be the same patch as before. A conflict is a refusal (restored by the
    caller)."""
    git = rebase.work.git
    target = state.taken[index]
    git.run("reset", "-q", "--hard", fixup)
    env = {**git.commit_env(), **REPLAY_ENV}
    for key in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE"):
        env.pop(key)  # each replayed commit keeps its own author
    run = git.run(
        "rebase",
        "-q",
        "-i",
        "--autosquash",
        "--empty=keep",
        "--reapply-cherry-picks",
        f"{target.commit}^",
        env=env,
        check=False,
    )
    if run.returncode != 0:
        unmerged = sorted(set(rebase._unmerged()))
        git.run("rebase", "--abort", check=False)
        raise StackError(
            f"your edits do not replay onto the patches after {target.name}: a conflict in "
            + (", ".join(unmerged) or run.stderr.strip()[-300:])
            + "\nEverything is as it was (your edits are still in the work tree); make them fit "
            "the later patches, or fold them into the stopped patch with `make rebase-continue`"
        )
    commits = git.out("rev-list", "--reverse", f"{target.commit}^..HEAD").splitlines()
    names = [
        git.out("log", "-1", "--format=%(trailers:key=Patch-File,valueonly)", c) for c in commits
    ]
    expected = [t.name for t in state.taken[index:]]
    if names != expected:
        raise StackError(
            f"the replay gave other commits than the moved patches ({', '.join(names)} for "
            f"{', '.join(expected)}); everything is as it was"
        )
    return commits


def retest(rebase, state, target) -> None:
    """The amended patch's tests on its new commit (the tree as the move tested it); a failure
    it did not have before is a refusal."""
    if not state.run_tests:
        target.tests, target.tests_detail = patchtests.NOT_RUN, "TESTS=0"
        return
    git = rebase.work.git
    tip = git.out("rev-parse", "HEAD")
    patch = rebase.patch(target.name)
    git.run("reset", "-q", "--hard", target.commit)
    try:
        run = patchtests.run_patch_tests(rebase.layout.root, rebase.work.path, patch, state.python)
    finally:
        git.run("reset", "-q", "--hard", tip)
    rebase.log(f"rebase:   {target.name}'s tests on its commit: {run.summary()}")
    if not run.ok and not target.accepted:
        raise StackError(
            f"the amendment breaks {target.name}'s own tests: {run.summary()}\n"
            "Everything is as it was (your edits are still in the work tree)"
        )
    target.tests, target.tests_detail = run.verdict, run.summary()
    if run.ok:
        target.accepted = ""  # its accepted failure is gone


def rerun_stopped(rebase, state) -> bool:
    """The stopped patch's tests again, on the amended tip; the stop stays (more may be
    amended), with their new outcome."""
    stopped = state.taken[-1]
    if not state.run_tests:
        return True
    patch = rebase.patch(stopped.name)
    run = patchtests.run_patch_tests(rebase.layout.root, rebase.work.path, patch, state.python)
    stopped.tests, stopped.tests_detail = run.verdict, run.summary()
    state.stop.detail = run.summary()
    rebase.save(state)
    rebase.log(f"rebase:   {stopped.name}'s tests now: {run.summary()}")
    after = (
        "`make rebase-continue` goes on"
        if run.ok
        else "fix more, amend again, or `make rebase-continue` with your fix"
    )
    rebase.log(f"rebase: {state.taken[-1].name} stays stopped until you continue: {after}")
    return run.ok


def restore(rebase, branch: str, tip: str, fixup: str, saved: str) -> None:
    """Back to the stop as it was: the tip, the edits uncommitted in the work tree, the state."""
    git = rebase.work.git
    git.run("rebase", "--abort", check=False)
    git.run("checkout", "-q", "-f", "-B", branch, fixup)
    git.run("reset", "-q", tip)
    tmp = rebase.state_file.with_suffix(".tmp")
    tmp.write_text(saved)
    tmp.replace(rebase.state_file)
