"""The random seed of this test run, for tests that also draw fresh cases each run: test/conftest.py
draws it once per run (or takes SGLANG_GEMMA4_TEST_SEED from the environment, to repeat a run) and
leaves it in the environment, so pytest-xdist's workers, which inherit it, agree on the test ids
that name it."""

import os
import random

VAR = "SGLANG_GEMMA4_TEST_SEED"


def ensure() -> None:
    os.environ.setdefault(VAR, str(random.SystemRandom().randrange(2**32)))


def session_seed() -> int:
    ensure()
    return int(os.environ[VAR])
