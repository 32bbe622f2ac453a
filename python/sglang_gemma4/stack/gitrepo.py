"""A thin wrapper over the git command line."""

import os
import subprocess
from pathlib import Path

from sglang_gemma4.stack.errors import StackError

# Fixed identity and dates make the commits of a given base and series reproducible.
TOOL_IDENTITY = ("sglang-gemma4", "sglang-gemma4@localhost")
FIXED_DATE = "2000-01-01T00:00:00+0000"


class Git:
    def __init__(self, repo: Path, index_file: Path | None = None):
        self.repo = repo
        self.index_file = index_file

    def _env(self, extra: dict | None) -> dict:
        env = dict(os.environ)
        for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
            env.pop(key, None)
        if self.index_file:
            env["GIT_INDEX_FILE"] = str(self.index_file)
        env.update(extra or {})
        return env

    def run(
        self, *args: str, check: bool = True, env: dict | None = None, input: str | None = None
    ) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            ["git", "-C", str(self.repo), *args],
            capture_output=True,
            text=True,
            env=self._env(env),
            input=input,
        )
        if check and proc.returncode != 0:
            raise StackError(f"git {' '.join(args)} failed in {self.repo}:\n{proc.stderr.strip()}")
        return proc

    def out(self, *args: str, **kwargs) -> str:
        return self.run(*args, **kwargs).stdout.strip()

    def commit_env(self, author: str | None = None) -> dict:
        name, email = TOOL_IDENTITY
        env = {
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
            "GIT_COMMITTER_DATE": FIXED_DATE,
            "GIT_AUTHOR_DATE": FIXED_DATE,
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
        }
        if author and "<" in author:
            env["GIT_AUTHOR_NAME"] = author.split("<", 1)[0].strip()
            env["GIT_AUTHOR_EMAIL"] = author.split("<", 1)[1].rstrip(">").strip()
        return env

    def commit_tree(
        self, tree: str, parent: str | None, message: str, author: str | None = None
    ) -> str:
        args = ["commit-tree", tree] + (["-p", parent] if parent else [])
        return self.out(*args, env=self.commit_env(author), input=message)

    def dirty_paths(self) -> list[str]:
        return self.out("status", "--porcelain", "--untracked-files=all").splitlines()

    def diff(self, *revs: str) -> str:
        """A patch in the series' format (a/ b/ prefixes, full blob ids for --3way, no renames)
        between two commits, or ("--cached", commit) for the index against a commit."""
        return self.run(
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-renames",
            "--full-index",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            *revs,
        ).stdout
