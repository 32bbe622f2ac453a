"""Serving a Gemma-4 variant: the launch presets (every server flag), the published shapes and the
checkpoints made from them, the launcher and its prebuild, one server of a build with its log, and
what that log says about the KV pools. Checks and studies build on this; it imports neither."""
