"""One sglang server of a chosen build (pristine or patched), started through the launch preset
and stopped with its whole process group, its log kept."""

import json
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path

from sglang_gemma4.gpu import REPO
from sglang_gemma4.gpu.serve import launch

ERROR_LINE = re.compile(
    r"^\w*(Error|Exception)\b.*:"
)  # a traceback's last line, e.g. "ValueError: ..."
# sglang checks its pools for leaked slots once idle and dies on one
# (SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE), after the last answer was sent: a run ends with the
# server idle this long and still running
IDLE_CHECK_S = 5
# the launcher (launch.py) as scripts/launch_gemma4.sh runs it, in the build's environment with this
# package on top
LAUNCHER = ("python3", "-m", "sglang_gemma4.gpu.serve.launch")
READY_POLL_S = 2  # between readiness checks while a server starts (minutes)
PORT_WAIT_S = 90  # for a server a cut-off run is still stopping (Server.stop waits up to 60 s)
# The launcher's own options, which may come among a server's extra flags: the preset decides with
# them (26B-A4B serves the unified KV pool at tp 1 and the split at tp 2; --multimodal serves the
# towers' checkpoint), so sglang's --tp-size and --dp-size are read as the launcher's --tp and --dp
# rather than passed past the preset.
LAUNCHER_NUMBERS = {"--tp": "tp", "--tp-size": "tp", "--dp": "dp", "--dp-size": "dp"}
LAUNCHER_SWITCHES = {"--static-kv": "static_kv", "--multimodal": "multimodal"}
# Where the servers listen: another port lets a second run share the machine, on its other GPUs
# (CUDA_VISIBLE_DEVICES)
PORT_ENV = "SGLANG_GEMMA4_PORT"


def default_port() -> int:
    return int(os.environ.get(PORT_ENV, "30000"))


def launcher_options(flags: list[str]) -> tuple[dict, list[str]]:
    """({launch.Launch field: value} for the launcher's options among `flags` (--static-kv,
    --multimodal, --tp N, --dp N, or sglang's --tp-size/--dp-size), the rest of the flags for
    sglang)."""
    options, rest = {}, []
    words = iter(flags)
    for word in words:
        name, eq, value = word.partition("=")
        if word in LAUNCHER_SWITCHES:
            options[LAUNCHER_SWITCHES[word]] = True
        elif name in LAUNCHER_NUMBERS:
            value = value if eq else next(words, "")
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"{name} wants a positive number of GPUs, got {value!r}")
            options[LAUNCHER_NUMBERS[name]] = int(value)
        else:
            rest.append(word)
    return options, rest


def http_json(
    method: str,
    url: str,
    payload: dict | bytes | None = None,
    timeout: float = 120,
    headers: dict | None = None,
    with_headers: bool = False,
) -> tuple:
    """(status, body), with the answer's headers third if `with_headers`. Bytes go as they are (e.g.
    non-standard JSON such as NaN), anything else as JSON."""
    data = (
        payload
        if isinstance(payload, bytes)
        else None
        if payload is None
        else json.dumps(payload).encode()
    )
    request = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = (
                response.status,
                response.read().decode(errors="replace"),
                dict(response.headers),
            )
    except urllib.error.HTTPError as e:
        answer = e.code, e.read().decode(errors="replace"), dict(e.headers)
    return answer if with_headers else answer[:2]


def admin_key() -> str:
    return secrets.token_hex(24)  # hex: never starts with "-", which argparse would take for a flag


def build_env_script(build: str) -> str:
    """The script (scripts/gpu/setup.sh writes it) that puts `build`'s sglang on the Python path."""
    return f"{os.environ.get('SGLANG_GEMMA4_PREFIX', '/tmp/sglang-gemma4')}/env-{build}.sh"


def describe(build: str, env: dict, command: list[str]) -> str:
    """One command line as a dry run prints it: the build whose environment runs it, then the
    command with its extra environment."""
    pairs = [f"{key}={value}" for key, value in env.items()]
    return f"{build}: " + shlex.join([*(["env", *pairs] if pairs else []), *command])


def in_build(build: str, argv: list[str], harness: bool = False) -> list[str]:
    """`argv` run in `build`'s environment: bash sources the build's env script, then runs argv word
    for word (they reach bash as positional parameters, never parsed as shell). `harness`: with this
    package importable on top of the build's packages."""
    if harness:
        return [
            "bash",
            "-c",
            '. "$0" && PYTHONPATH="$1:$PYTHONPATH" exec "${@:2}"',
            build_env_script(build),
            str(REPO / "python"),
            *argv,
        ]
    return ["bash", "-c", '. "$0" && exec "$@"', build_env_script(build), *argv]


def patched_env(pairs: list[str]) -> dict:
    """--patched-env KEY=VALUE ... as a dict."""
    bad = [pair for pair in pairs if "=" not in pair or pair.startswith("=")]
    if bad:
        raise SystemExit(f"--patched-env takes KEY=VALUE pairs, got {bad}")
    return dict(pair.split("=", 1) for pair in pairs)


def wait_ready(url: str, timeout: float, alive=lambda: True) -> bool:
    """Poll /health_generate until it answers 200 (True), the server dies or time runs out
    (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        try:
            if http_json("GET", f"{url}/health_generate", timeout=5)[0] == 200:
                return True
        except OSError:
            pass
        time.sleep(READY_POLL_S)
    return False


def exit_on_sigterm() -> None:
    """Turn SIGTERM into a normal exit, so `with Server` blocks stop their servers. A time limit
    (timeout(1)) ends the harness with SIGTERM, whose default action skips them, and the server, in
    its own session, would outlive the run."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def port_taken(port: int) -> bool:
    """Whether something on this host already accepts connections on the port."""
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def port_freed(port: int, within: float) -> bool:
    """Whether the port is free, or frees within `within` seconds: a server whose run was just cut
    off by its time limit is still being stopped by it (up to a minute) when the next run starts."""
    deadline = time.monotonic() + within
    while port_taken(port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)
    return True


@dataclass
class Server:
    variant: str
    build: str  # "pristine" | "patched": which env-<build>.sh of the installed bundle
    log_path: Path
    model: str | None = None
    mtp: bool = False  # the preset's MTP (assistant draft) mode
    draft: str | None = None  # the MTP draft checkpoint (default: the preset's config-only one)
    port: int = field(default_factory=default_port)
    # launch_server flags after the preset's; the launcher's own options among them go to it
    extra: list[str] = field(default_factory=list)
    env: dict = field(default_factory=dict)
    # --admin-api-key, for a run that calls admin routes (/start_profile): the patched build closes
    # them without one; a fresh key per server (admin_key() makes one)
    admin_key: str | None = None
    process: subprocess.Popen | None = None
    ready_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def launch_options(self) -> launch.Launch:
        """The launcher's options for this server; extra flags last, so that they win over the
        preset."""
        options, flags = launcher_options(self.extra)
        return launch.Launch(
            self.variant,
            model=self.model,
            mtp=self.mtp,
            draft=self.draft,
            port=self.port,
            admin_api_key=self.admin_key,
            tp=options.get("tp", 1),
            dp=options.get("dp", 1),
            # pristine sglang cannot serve the unified KV pool (patch 0021)
            static_kv=options.get("static_kv", False) or self.build == "pristine",
            multimodal=options.get("multimodal", False),
            extra=tuple(flags),
        )

    def command(self) -> list[str]:
        """The launcher's command line for this server."""
        return [*LAUNCHER, *self.launch_options().argv()]

    def admin_json(
        self, method: str, path: str, payload: dict | None = None, timeout: float = 120
    ) -> tuple[int, str]:
        """http_json to one of the server's admin routes, with its admin key."""
        if not self.admin_key:
            raise RuntimeError(
                (
                    f"{self.variant}/{self.build}: {path} is an admin route; start the server "
                    "with admin_key"
                )
            )
        return http_json(
            method,
            self.url + path,
            payload,
            timeout,
            headers={"Authorization": f"Bearer {self.admin_key}"},
        )

    def describe(self) -> str:
        """The server's command line as the launch preset expands it, with its build and environment
        (what a dry run prints instead of starting it)."""
        _, command = launch.commands(replace(self.launch_options(), dry_run=True))
        return describe(self.build, self.env, command)

    def start(self, timeout: float = 540) -> "Server":
        # A server left running (e.g. by a run cut off by its time limit) would answer the readiness
        # check and the benchmark in place of this one, while this one fails to bind or load.
        if not port_freed(self.port, within=PORT_WAIT_S):
            raise RuntimeError(
                f"port {self.port} is still served by another process {PORT_WAIT_S} s on (a server "
                f"left from an earlier run?); not starting {self.variant}/{self.build}"
            )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "w")
        # the log names what it is a log of: the build, the extra environment (opt-in switches), the
        # flags
        log.write(describe(self.build, self.env, self.command()) + "\n")
        log.flush()
        started = time.monotonic()
        exit_on_sigterm()
        self.process = subprocess.Popen(
            in_build(self.build, self.command(), harness=True),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=REPO,
            env={**os.environ, **self.env},
        )
        try:
            ready = wait_ready(self.url, timeout, alive=lambda: self.process.poll() is None)
        except BaseException:  # SIGTERM or Ctrl-C while it starts: `with` has not entered yet
            self.stop()
            raise
        if ready:
            self.ready_s = time.monotonic() - started
            return self
        if self.process.poll() is not None:
            raise RuntimeError(
                f"{self.variant}/{self.build} server exited ({self.process.returncode}); "
                f"log: {self.log_path}\n{self.tail()}"
            )
        self.stop()
        raise RuntimeError(
            f"{self.variant}/{self.build} server not ready after {timeout} s\n{self.tail()}"
        )

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def death(self) -> str | None:
        """None while the server runs; once it has exited, the last error its log names (sglang's
        scheduler kills the whole server on an exception, e.g. its idle check finding leaked KV
        slots)."""
        if self.process is None or self.process.poll() is None:
            return None
        lines = (
            self.log_path.read_text(errors="replace").splitlines() if self.log_path.exists() else []
        )
        errors = [line.strip() for line in lines if ERROR_LINE.match(line)]
        return (
            errors[-1] if errors else f"exited ({self.process.returncode}) with no error in its log"
        )

    def death_once_idle(self) -> str | None:
        """death() after IDLE_CHECK_S seconds without requests."""
        time.sleep(IDLE_CHECK_S)
        return self.death()

    def tail(self, lines: int = 30) -> str:
        return (
            "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
            if self.log_path.exists()
            else ""
        )

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
