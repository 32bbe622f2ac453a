"""The PEP 440 local version that names a series: 0.5.17+gemma4.g<hash of pin, series, patches>."""

import hashlib

from sglang_gemma4.stack.patchfile import PatchFile
from sglang_gemma4.stack.pin import Pin


def series_hash(pin: Pin, patches: list[PatchFile]) -> str:
    digest = hashlib.sha256()
    for wheel in sorted(pin.wheels, key=lambda w: w.file):
        digest.update(f"{wheel.file} {wheel.sha256}\n".encode())
    for patch in patches:
        digest.update(f"{patch.name} {patch.sha256}\n".encode())
    # "g" keeps the segment alphanumeric: an all-digit hash would be normalised as a number.
    return "g" + digest.hexdigest()[:10]


def local_version(pin: Pin, patches: list[PatchFile]) -> str:
    return f"{pin.version}+gemma4.{series_hash(pin, patches)}"
