"""The rebase's words: stop messages (what stopped, what to do next) and the table of patches,
each headed by how the tests ran."""

from pathlib import Path

from sglang_gemma4.stack.maintainer import patchtests
from sglang_gemma4.stack.maintainer.hunks import HunkCheck
from sglang_gemma4.stack.patchfile import PatchFile


def where(state) -> str:
    return f"patch {state.position + 1}/{len(state.patches)}"


def env_line(state) -> str:
    if not state.run_tests:
        return "tests: not run (TESTS=0): nothing proves the moved patches work"
    notes = "; ".join(state.env_notes) or "every pin as the release asks"
    return f"tests run with {state.python} ({notes})"


def upstream_message(state, name: str, evidence: str) -> str:
    return (
        f"\nrebase: stopped at {where(state)} {name}: it looks already upstream in "
        f"sglang {state.pin['version']}\n  {evidence}\n"
        "Next:\n  make rebase-continue DROP=1   drop it (patches/dropped.toml keeps the evidence;\n"
        f'                                WHY="..." adds yours, e.g. the upstream function)\n'
        f"  make rebase-continue          keep it and apply it anyway\n"
        f"  make rebase-abort             forget the rebase; the repository is unchanged\n"
        f"{report(state)}"
    )


def conflict_message(state, work: Path, patch: PatchFile, failed: list[HunkCheck], how: str) -> str:
    hunks = (
        "\n".join(f"  {c.describe()}" for c in failed)
        or "  (every hunk applies alone; together they do not)"
    )
    upstream = state.stop.upstream if state.stop else ""
    check = (
        f"Already upstream? {upstream} (its tests but the kill_switch ones, on "
        f"{state.pin['version']} "
        f"without it)\n"
        if upstream
        else "Already upstream? not checked (TESTS=0)\n"
    )
    return (
        f"\nrebase: stopped at {where(state)} {patch.name}: it does not apply to sglang "
        f"{state.pin['version']}\nFailing hunks ({len(failed)} of "
        f"{len(patch.hunks)}):\n{hunks}\n{check}"
        f"The work tree ({work}, branch {state.branch}) holds {how}\n"
        f"Next: edit the files until they hold the patch's change for {state.pin['version']}, "
        "then\n"
        f"  make rebase-continue          take the result as the new {patch.name}, test it, go on\n"
        '  make rebase-continue DROP=1 WHY="..."   drop this patch instead (say why: upstream\'s '
        "fix)\n"
        f"  make rebase-abort             forget the rebase; the repository is unchanged\n"
        f"{report(state)}"
    )


def tests_message(state, work: Path, patch: PatchFile, run: patchtests.TestRun) -> str:
    tests = " ".join(patchtests.test_files(patch))
    return (
        f"\nrebase: stopped at {where(state)} {patch.name}: it applied, but its tests "
        f"{run.verdict} "
        f"on sglang {state.pin['version']}\n  {run.summary()}\n"
        f"  rerun: SGLANG_GEMMA4_TREE={work} PYTHONPATH=python {state.python} -m pytest -m 'not "
        f"gpu' {tests}\n"
        f"Next: fix the code in {work} (or the test in this repository), then\n"
        f"  make rebase-continue          fold your edits into {patch.name}, test again, go on\n"
        "  make rebase-amend PATCH=NAME   fold them into NAME, a patch moved before (its cause)\n"
        '  make rebase-continue ACCEPT_FAILING=1 WHY="..."   go on with the failure (the reason '
        "is reported)\n"
        f'  make rebase-continue DROP=1 WHY="..."   drop this patch\n'
        f"  make rebase-abort             forget the rebase; the repository is unchanged\n"
        f"{report(state)}"
    )


NEXT = {
    "conflict": "resolve the files in the work tree, then `make rebase-continue` "
    '(or `make rebase-continue DROP=1 WHY="..."`)',
    "tests": "fix the code or the test, then `make rebase-continue` "
    '(or ACCEPT_FAILING=1 WHY="...", or DROP=1 WHY="..."); a fix that belongs to an earlier '
    "patch: `make rebase-amend PATCH=NAME`",
    "upstream": "`make rebase-continue DROP=1` drops it, `make rebase-continue` keeps it",
}


def status(state) -> str:
    """Where a rebase under way stands (make rebase-status)."""
    at = (
        f"{where(state)} {state.patches[state.position]}"
        if state.position < len(state.patches)
        else "every patch taken"
    )
    if state.finishing:
        now, next_step = "finishing", "`make rebase-continue` completes the finish"
    elif state.stop:
        now = f"stopped: {state.stop.kind}: {(state.stop.detail.splitlines() or [''])[0]}"
        if state.stop.amended:
            now += f"\n  amended at this stop: {', '.join(state.stop.amended)}"
        next_step = NEXT[state.stop.kind]
    else:
        now, next_step = "interrupted", "`make rebase-continue` resumes it"
    return (
        f"rebase: to sglang {state.pin['version']} (branch {state.branch}), {at}, "
        f"{len(state.taken)} taken, {len(state.dropped)} dropped\n  {now}\n"
        f"Next: {next_step}; `make rebase-abort` forgets it\n{report(state)}"
    )


def report(state) -> str:
    rows = [
        f"({env_line(state)})",
        "| # | patch | verdict | hunks (failed) | tests | detail |",
        "|---|---|---|---|---|---|",
    ]
    taken = {t.name: t for t in state.taken}
    dropped = {d.name: d for d in state.dropped}
    for i, name in enumerate(state.patches[: state.position + 1], start=1):
        if name in taken:
            entry = taken[name]
            tests = entry.tests_detail or entry.tests or "pending"
            if entry.accepted:
                tests += f"; accepted: {entry.accepted}"
            rows.append(
                f"| {i} | {name} | {entry.verdict} | {entry.hunks} ({entry.failed_hunks}) | "
                f"{tests} | "
                f"{entry.detail} |"
            )
        elif name in dropped:
            rows.append(f"| {i} | {name} | dropped | | | {dropped[name].evidence} |")
        elif state.stop:
            rows.append(f"| {i} | {name} | stopped: {state.stop.kind} | | | |")
    return "\n".join(rows)
