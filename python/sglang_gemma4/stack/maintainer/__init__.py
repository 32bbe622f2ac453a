"""The maintainer's side of the stack: check the series (lint, verify), write patches (export:
refresh, new), move to a newer release (rebase, drift, port) and regenerate the generated tables.
Built on the user side (sglang_gemma4.stack: pin -> series -> work tree -> wheel -> bundle), which
imports nothing from here."""
