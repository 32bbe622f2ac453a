"""Checks: each starts (or is pointed at) a server and passes or fails: parity against transformers,
malformed and generated hostile requests, crash repros, access, the OpenAI client suite, MTP greedy
equality, smoke. They use serve/ and nothing of studies/ or kernels/."""
