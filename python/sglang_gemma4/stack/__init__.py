"""The patch stack. This package holds what a user's commands need: pin -> series -> work tree ->
wheel -> bundle (fetch, apply, build, status, bundle); maintainer/ holds the maintainer's (lint,
refresh, new, rebase, drift, ports, verify-tests).

Runs on any machine with git and Python; imports nothing from the GPU half (the CLI joins the
two), and of the results package only what sglang_gemma4.results names as public."""
