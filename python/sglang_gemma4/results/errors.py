class ResultsError(Exception):
    """A result folder or result.json out of form (the CLI reports it as a message)."""
