"""fetch: only files whose sha256 matches the pin reach the cache; mismatches name both hashes."""

import shutil
import zipfile

import pytest

from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.fetch import fetch_wheel, sha256_of


def test_cached_wheel_is_verified(checkout):
    pin = checkout.pin
    wheel = pin.wheel()
    path = fetch_wheel(pin, wheel, checkout.layout.cache_dir, log=lambda *_: None)
    assert sha256_of(path) == wheel.sha256


def test_tampered_cache_is_refused(checkout):
    pin = checkout.pin
    wheel = pin.wheel()
    cached = checkout.layout.cache_dir / wheel.file
    data = bytearray(cached.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cached.write_bytes(bytes(data))
    with pytest.raises(StackError) as err:
        fetch_wheel(pin, wheel, checkout.layout.cache_dir)
    message = str(err.value)
    assert wheel.file in message and wheel.sha256 in message and sha256_of(cached) in message


def test_tampered_cache_fails_apply_from_the_cli(checkout, two_patches):
    wheel = checkout.pin.wheel()
    cached = checkout.layout.cache_dir / wheel.file
    cached.write_bytes(cached.read_bytes()[:-10])
    proc = checkout.tool("apply")
    assert proc.returncode == 1
    assert "sha256 mismatch" in proc.stderr and wheel.file in proc.stderr
    assert not checkout.layout.work_dir.exists()


def test_bad_download_leaves_nothing(checkout, tmp_path, monkeypatch):
    """pip "downloads" a valid wheel with the pinned name but other bytes (a local find-links)."""
    pin = checkout.pin
    wheel = pin.wheel()
    index = tmp_path / "index"
    index.mkdir()
    shutil.copy(checkout.layout.cache_dir / wheel.file, index / wheel.file)
    with zipfile.ZipFile(index / wheel.file, "a") as zf:
        zf.comment = b"not the pinned bytes"
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    cache = tmp_path / "empty-cache"
    with pytest.raises(StackError) as err:
        fetch_wheel(pin, wheel, cache, log=lambda *_: None)
    assert wheel.sha256 in str(err.value) and sha256_of(index / wheel.file) in str(err.value)
    assert list(cache.iterdir()) == []
