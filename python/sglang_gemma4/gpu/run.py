"""The one runner of the GPU stages (stages/table.py), from the offline bundle alone;
scripts/gpu/check.sh is its entry on the GPU host.

    python -m sglang_gemma4.gpu.run STAGE[:CHOICE,...][:KEY=VALUE]... [--out DIR] [--dry-run]
        [--host-setup]
    python -m sglang_gemma4.gpu.run --list

Each step runs in its build's environment (a harness step: the pristine build's, so transformers is
the release sglang pins on both sides of every comparison) with this package on top; a failing stage
is reported and the next one still runs. --host-setup (check.sh) first writes
OUT/results/host-pip-freeze.txt and gpu.txt, installs the bundle (scripts/gpu/setup.sh, setup.log),
puts every result under OUT/results and packs them into OUT/results.tgz after each stage and when
the run ends, also when it is stopped (SIGTERM, e.g. from timeout(1)); OUT/results/stages.jsonl has
a line per stage. A stage past its time limit has its step stopped the same way. --dry-run prints
every command instead (and, for the harness modules that start servers, the exact server command
lines they would start)."""

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from sglang_gemma4.gpu import REPO
from sglang_gemma4.gpu.serve.server import describe, in_build
from sglang_gemma4.gpu.stages.steps import Step
from sglang_gemma4.gpu.stages.table import STAGES, Expanded, expand, refuse_old_knobs

# The harness modules that start servers (or bench_one_batch) and print their command lines on
# --dry-run.
DRY_RUNS = {
    f"sglang_gemma4.gpu.{m}"
    for m in (
        "checks.smoke",
        "checks.parity",
        "checks.media_parity",
        "checks.bad_input",
        "checks.repro",
        "checks.mtp_greedy",
        "checks.access_check",
        "checks.openai_suite",
        "checks.fuzz",
        "checks.sampling_fuzz",
        "studies.bench",
        "studies.step_trace",
        "studies.profile",
        "studies.memory",
        "studies.spec_step",
        "studies.prefill_profile",
    )
}
STOP_WAIT_S = 90  # for a stopped step to stop its server (Server.stop waits up to 60 s)


class Stopped(Exception):
    """SIGTERM to the runner."""


def command(step: Step) -> list[str]:
    """What runs: the step's argv inside its build's environment (a harness step: the pristine
    build's)."""
    return in_build(step.build or "pristine", list(step.argv), harness=step.package_on_top)


def dry_run(step: Step) -> bool:
    ok = True
    for s in filter(None, (step.beside, step)):
        print(describe(s.build or "harness", s.env, list(s.argv)), flush=True)
        if s.module in DRY_RUNS:  # the servers it would start
            argv = [sys.executable, "-m", s.module, "--dry-run", *s.argv[3:]]
            ok &= subprocess.run(argv, env={**os.environ, **s.env}).returncode == 0
    return ok


def stop(process: subprocess.Popen, group: bool = False) -> None:
    """SIGTERM (the harness then stops its servers), SIGKILL if it is still running STOP_WAIT_S
    later."""
    if process.poll() is not None:
        return
    kill = (lambda sig: os.killpg(process.pid, sig)) if group else process.send_signal
    kill(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        kill(signal.SIGKILL)
        process.wait()


def launch(step: Step, own_session: bool = False) -> subprocess.Popen:
    """The step started; a step with a report writes its output there as it goes (a stopped step's
    too)."""
    if step.report:
        step.report.parent.mkdir(parents=True, exist_ok=True)
    output = open(step.report, "w") if step.report else None
    try:
        return subprocess.Popen(
            command(step),
            env={**os.environ, **step.env},
            cwd=REPO,
            stdout=output,
            stderr=subprocess.STDOUT if output else None,
            start_new_session=own_session,
        )
    finally:
        if output:
            output.close()


def run(step: Step, deadline: float) -> bool | None:
    """True or False: the step passed or failed; None: stopped at the stage's deadline."""
    if step.unless_exists and step.unless_exists.exists():
        return True
    if step.empty_first:
        shutil.rmtree(step.empty_first, ignore_errors=True)
    if step.link:
        link, target = step.link
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    beside = launch(step.beside, own_session=True) if step.beside else None  # stopped as a group
    process = launch(step)
    timed_out = False
    try:
        process.wait(timeout=max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:  # also when the runner is stopped
        stop(process)
        if beside:
            stop(beside, group=True)
    if step.report:
        lines = step.report.read_text(errors="replace").splitlines(keepends=True)
        print(
            "".join(lines[-step.shown_lines :] if step.shown_lines else lines), end="", flush=True
        )
    if timed_out:
        print(
            f"run: stopped at the stage's time limit: {shlex.join(command(step))}",
            file=sys.stderr,
            flush=True,
        )
        return None
    if process.returncode and not step.may_fail:
        print(
            f"run: failed ({process.returncode}): {shlex.join(command(step))}",
            file=sys.stderr,
            flush=True,
        )
    return process.returncode == 0 or step.may_fail


def pack(results: Path) -> None:
    """OUT/results.tgz, the results so far (the device tool returns few files)."""
    subprocess.run(
        [
            "tar",
            "-czf",
            str(results.parent / "results.tgz"),
            "-C",
            str(results.parent),
            results.name,
        ]
    )


def set_up_host(results: Path) -> None:
    """What the host is, then the bundle installed (scripts/gpu/setup.sh); a failed install ends the
    run."""
    results.mkdir(parents=True, exist_ok=True)
    freeze = subprocess.run(
        ["python3", "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True
    )
    (results / "host-pip-freeze.txt").write_text(freeze.stdout)
    gpu = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (results / "gpu.txt").write_text(gpu)
    print(gpu, end="", flush=True)
    with open(results / "setup.log", "w") as log:
        setup = subprocess.Popen(
            ["bash", "scripts/gpu/setup.sh", "dist/bundle"],
            cwd=REPO,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for line in setup.stdout:
            print(line, end="", flush=True)
            log.write(line)
    if setup.wait():
        raise SystemExit(f"run: scripts/gpu/setup.sh failed ({setup.returncode})")


def run_stage(stage: Expanded, record: Path) -> bool:
    started = time.monotonic()
    deadline = started + stage.timeout_s
    outcomes = []
    try:
        for step in stage.steps:  # a failing step is reported, and the next one still runs
            outcomes.append(run(step, deadline))
            if outcomes[-1] is None:
                break
    finally:  # also when the runner is stopped: what this stage got to
        ok = len(outcomes) == len(stage.steps) and all(outcomes)
        entry = {
            "stage": stage.word,
            "ok": ok,
            "steps": len(stage.steps),
            "steps_done": len(outcomes),
            "timed_out": None in outcomes,
            "seconds": round(time.monotonic() - started),
        }
        with open(record, "a") as f:
            f.write(json.dumps(entry) + "\n")
    return ok


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("stages", nargs="*", metavar="STAGE[:CHOICE,...][:KEY=VALUE]...")
    p.add_argument("--out", type=Path, default=Path("gpu-results"))
    p.add_argument(
        "--dry-run", action="store_true", help="print the commands (and the servers they start)"
    )
    p.add_argument(
        "--host-setup",
        action="store_true",
        help="the GPU host's run: host files, the bundle installed, "
        "results under OUT/results packed into OUT/results.tgz",
    )
    p.add_argument(
        "--list", action="store_true", help="the stages, what each runs and its arguments"
    )
    return p


def listing() -> str:
    rows = []
    for name, stage in STAGES.items():
        args = " ".join(
            f"{k}={shlex.quote(a.default) if a.default else ''}" for k, a in stage.args.items()
        )
        rows.append(
            f"{name:<22}{'gate' if stage.gate else 'experiment'}, {stage.timeout_s} s"
            f"{'; ' + args if args else ''}\n{'':<22}{stage.what}"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.list or not args.stages:
        print(listing())
        return 0
    refuse_old_knobs()
    out = args.out.resolve()
    results = out / "results" if args.host_setup and not args.dry_run else out
    stages = [
        expand(word, results) for word in args.stages
    ]  # every word checked before anything runs
    if args.dry_run:
        return 0 if all([dry_run(step) for stage in stages for step in stage.steps]) else 1

    def on_sigterm(signum, frame):
        if args.host_setup:
            pack(results)  # first: stopping the running step may take a minute
        raise Stopped

    signal.signal(signal.SIGTERM, on_sigterm)
    ok = True
    try:
        if args.host_setup:
            set_up_host(results)
        results.mkdir(parents=True, exist_ok=True)
        for stage in stages:
            ok &= run_stage(stage, results / "stages.jsonl")
            if args.host_setup:
                pack(results)
    except Stopped:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the results are being packed
        print("run: stopped (SIGTERM); the results so far are kept", file=sys.stderr, flush=True)
        ok = False
    finally:
        if args.host_setup:
            pack(results)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
