"""A stage's steps: commands of this package (or sglang's) with the build whose environment runs
them, and the A/B comparison (studies/bench.py) most experiments are made of."""

from dataclasses import dataclass, field
from pathlib import Path

from sglang_gemma4.gpu.serve import presets


@dataclass(frozen=True)
class Step:
    argv: tuple[str, ...]
    build: str | None = (
        None  # run inside this build's environment (None: the harness's, the pristine build's)
    )
    env: dict = field(default_factory=dict)
    package_on_top: bool = True  # this repository's package on the Python path above the build's
    may_fail: bool = (
        False  # e.g. the pristine side of a check whose pristine build is expected to crash
    )
    report: Path | None = None  # its output is also written here
    shown_lines: int | None = None  # print only the report's last lines
    empty_first: Path | None = (
        None  # removed before the step (e.g. the compile caches of a cold start)
    )
    unless_exists: Path | None = None  # skipped when this file exists
    link: tuple[Path, Path] | None = None  # (link, target): a symbolic link made before the step
    beside: "Step | None" = (
        None  # started first in its own session, output to its report, stopped after
    )

    @property
    def module(self) -> str | None:
        return self.argv[2] if self.argv[:2] == ("python3", "-m") else None


def harness(module: str, *args: str, **step) -> Step:
    """A module of this package, e.g. harness("checks.smoke", "--out", ...)."""
    return Step(("python3", "-m", f"sglang_gemma4.gpu.{module}", *args), **step)


def env_words(env: dict[str, str]) -> list[str]:
    return [f"{key}={value}" for key, value in env.items()]


def with_env(setup: str, env: dict[str, str]) -> str:
    """A bench setup with `env` before its own environment pairs (which win); a bare build becomes
    the setup of that name."""
    head, _, rest = setup.partition(" ")
    if "=" not in head:
        head = f"{head}={head}"
    return " ".join([head, *env_words(env), *([rest] if rest else [])])


def known(catalog: dict[str, str], names: list[str], stage: str) -> list[str]:
    """`names`, each a setup of the stage's `catalog`, or the run refused."""
    unknown = [n for n in names if n not in catalog]
    if unknown:
        raise SystemExit(
            f"run: {stage}: unknown setup {', '.join(unknown)} (one of {', '.join(catalog)})"
        )
    return names


def named(catalog: dict[str, str], names: list[str], stage: str) -> tuple[str, ...]:
    """The patched build in each named setup of `catalog`, as bench --config specs."""
    return tuple(f"{n}=patched {catalog[n]}".strip() for n in known(catalog, names, stage))


@dataclass(frozen=True)
class Comparison:
    """An A/B run of bench.py: each setup's server in turn on the same GPU, the same workloads."""

    out: str  # folder under OUT; {variant} is filled in
    setups: tuple[str, ...]  # bench --config specs; a bare build name is that build as it is
    workloads: tuple[str, ...]
    flags: tuple[str, ...] = presets.BENCH_GRAPHS
    variants: tuple[str, ...] = ("26b-a4b",)
    mtp: bool = False
    model: str | None = None  # default: the launch preset's config-only checkpoint

    def steps(
        self,
        out: Path,
        variants: list[str] | None = None,
        flags: tuple[str, ...] | None = None,
        workloads: list[str] | None = None,
    ) -> list[Step]:
        """One bench run per variant (CHOICE, or the default ones); `flags` replaces the servers'
        flags and `workloads` the workloads (a stage's workloads= argument). With MTP, every setup
        serves with the variant's simulated acceptance (presets.simulated_acceptance)."""
        steps = []
        for v in variants or self.variants:
            setups = (
                [with_env(s, presets.simulated_acceptance(v)) for s in self.setups]
                if self.mtp
                else self.setups
            )
            builds = [s for s in setups if s in ("pristine", "patched")]
            configs = [a for s in setups if s not in builds for a in ("--config", s)]
            steps.append(
                harness(
                    "studies.bench",
                    "--variant",
                    v,
                    "--out",
                    str(out / self.out.format(variant=v)),
                    *(["--model", self.model.format(variant=v)] if self.model else []),
                    *(["--mtp"] if self.mtp else []),
                    "--builds",
                    *builds,
                    *configs,
                    "--workloads",
                    *(workloads or self.workloads),
                    "--",
                    *(self.flags if flags is None else flags),
                )
            )
        return steps
