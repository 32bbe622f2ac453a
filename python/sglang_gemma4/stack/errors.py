class StackError(Exception):
    """A failure the CLI reports as a clear message and a non-zero exit status."""
