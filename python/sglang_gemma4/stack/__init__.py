"""The patch stack: pin -> series -> work tree -> wheel -> bundle, and rebase onto a newer release.

Runs on any machine with git and Python; imports nothing from the GPU half (the CLI joins the
two)."""
