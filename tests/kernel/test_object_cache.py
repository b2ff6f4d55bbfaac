"""The on-disk object cache of compile_module(cache=True): a second process (here: a
second call) loads the machine code instead of compiling; damaged files are deleted
and compiled again; the cache can be turned off, and an unusable directory only means
no caching."""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

from ember.backend.kernel.llvm import jit, object_cache

IR = """
define float @triple_plus(float %x, float %y) {
  %t = fmul float %x, 3.0
  %s = fadd float %t, %y
  ret float %s
}
"""


def _call(compiled: jit.Compiled, x: float, y: float) -> float:
    fn = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float, ctypes.c_float)(compiled.addresses["triple_plus"])
    return fn(x, y)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("EMBER_COMPILE_CACHE", raising=False)
    return tmp_path / "llvm"


def test_a_second_compile_loads_the_object(cache_dir):
    first = jit.compile_module(IR, ["triple_plus"], cache=True)
    files = list(cache_dir.glob("*.o"))
    assert len(files) == 1 and first.optimize_s > 0.0
    second = jit.compile_module(IR, ["triple_plus"], cache=True)
    assert second.optimize_s == 0.0  # loaded, not optimised
    assert _call(first, 2.0, 0.5) == _call(second, 2.0, 0.5) == 6.5
    assert list(cache_dir.glob("*.o")) == files


def test_options_and_ir_key_apart(cache_dir):
    jit.compile_module(IR, ["triple_plus"], cache=True)
    jit.compile_module(IR, ["triple_plus"], cache=True, codegen_opt=3)
    jit.compile_module(IR.replace("3.0", "4.0"), ["triple_plus"], cache=True)
    assert len(list(cache_dir.glob("*.o"))) == 3


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_a_damaged_file_is_compiled_again(cache_dir, damage):
    jit.compile_module(IR, ["triple_plus"], cache=True)
    (path,) = cache_dir.glob("*.o")
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        path.write_bytes(data[:-9] + bytes([data[-9] ^ 0xFF]) + data[-8:])
    else:
        path.write_bytes(b"")
    again = jit.compile_module(IR, ["triple_plus"], cache=True)
    assert again.optimize_s > 0.0  # compiled, not loaded
    assert _call(again, 1.0, 1.0) == 4.0
    assert path.read_bytes() == data  # written again, whole


def test_the_cache_can_be_turned_off(cache_dir, monkeypatch):
    monkeypatch.setenv("EMBER_COMPILE_CACHE", "0")
    compiled = jit.compile_module(IR, ["triple_plus"], cache=True)
    assert _call(compiled, 1.0, 0.0) == 3.0
    assert not cache_dir.exists()


def test_uncached_modules_are_not_written(cache_dir):
    jit.compile_module(IR, ["triple_plus"])
    assert not cache_dir.exists()


def test_an_unusable_directory_means_no_caching(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(blocker))
    compiled = jit.compile_module(IR, ["triple_plus"], cache=True)
    assert _call(compiled, 2.0, 2.0) == 8.0


def test_the_oldest_files_go_beyond_the_limit(cache_dir, monkeypatch):
    for n in range(3):
        before = set(cache_dir.glob("*.o")) if cache_dir.exists() else set()
        jit.compile_module(IR.replace("3.0", f"{n + 5}.0"), ["triple_plus"], cache=True)
        (new,) = set(cache_dir.glob("*.o")) - before
        os.utime(new, (n + 1.0, n + 1.0))  # distinct ages, oldest first
    size = next(cache_dir.glob("*.o")).stat().st_size
    monkeypatch.setattr(object_cache, "MAX_BYTES", 2 * size + size // 2)
    jit.compile_module(IR, ["triple_plus"], cache=True)  # a fourth file: the two oldest go
    ages = sorted(p.stat().st_mtime for p in cache_dir.glob("*.o"))
    assert len(ages) == 2 and ages[0] == 3.0


def test_flex_native_kernels_load_from_the_cache(cache_dir, rng):
    from ember.backend.flex import native

    fresh = native._build()
    assert fresh is not None and len(list(cache_dir.glob("*.o"))) == 1
    loaded = native._build()
    assert loaded is not None
    x = rng.standard_normal(1000).astype(np.float32)
    outs = []
    for kernels in (fresh, loaded):
        out = np.empty_like(x)
        kernels.gelu(x.ctypes.data, out.ctypes.data, x.size)
        outs.append(out)
    assert np.array_equal(outs[0], outs[1])
    assert np.allclose(outs[0], 0.5 * x * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2))), atol=1e-6)


class _Text:
    """IR text made on demand, counting how often it was asked for."""

    def __init__(self, text: str = IR):
        self.text, self.calls = text, 0

    def __call__(self) -> str:
        self.calls += 1
        return self.text


def test_a_recipe_hit_loads_without_making_the_ir(cache_dir):
    text = _Text()
    first = jit.compile_module(text, ["triple_plus"], cache=True, recipe=("triple_plus", 3))
    assert text.calls == 1 and first.optimize_s > 0.0
    second = jit.compile_module(text, ["triple_plus"], cache=True, recipe=("triple_plus", 3))
    assert text.calls == 1 and second.optimize_s == 0.0  # loaded: the text was never made
    assert _call(first, 2.0, 0.5) == _call(second, 2.0, 0.5) == 6.5
    assert len(list(cache_dir.glob("*.o"))) == 1  # kept under the recipe's key alone
    other = jit.compile_module(_Text(IR.replace("3.0", "4.0")), ["triple_plus"], cache=True, recipe=("triple_plus", 4))
    assert _call(other, 2.0, 0.5) == 8.5 and len(list(cache_dir.glob("*.o"))) == 2


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_recipe_entry_is_compiled_again(cache_dir, damage):
    jit.compile_module(_Text(), ["triple_plus"], cache=True, recipe=("triple_plus",))
    (path,) = cache_dir.glob("*.o")
    data = path.read_bytes()
    path.write_bytes(
        data[: len(data) // 2] if damage == "truncate" else data[:-9] + bytes([data[-9] ^ 0xFF]) + data[-8:]
    )
    text = _Text()
    again = jit.compile_module(text, ["triple_plus"], cache=True, recipe=("triple_plus",))
    assert text.calls == 1 and again.optimize_s > 0.0  # detected, made and compiled again
    assert _call(again, 1.0, 1.0) == 4.0
    assert path.read_bytes() == data  # the same machine code, written again whole


def test_a_recipe_key_changes_with_ember_source(cache_dir, monkeypatch):
    jit.compile_module(_Text(), ["triple_plus"], cache=True, recipe=("triple_plus",))
    monkeypatch.setattr(object_cache, "_SOURCE", ["another emitter"])
    text = _Text()
    jit.compile_module(text, ["triple_plus"], cache=True, recipe=("triple_plus",))
    assert text.calls == 1 and len(list(cache_dir.glob("*.o"))) == 2


def test_source_digest_covers_the_kernel_layer():
    from pathlib import Path

    digest = object_cache.source_digest()
    assert len(digest) == 64 and object_cache.source_digest() == digest
    backend = Path(object_cache.__file__).resolve().parents[2]
    assert (backend / "kernel" / "llvm" / "columns.py").is_file() and (backend / "flex" / "native_pool.py").is_file()
    assert object_cache.SOURCE_FOLDERS == ("kernel", "flex")


def test_a_recipe_naming_an_address_keys_by_the_ir(cache_dir):
    recipe = ("triple_plus", object())  # its repr names an address: not the same in another process
    text = _Text()
    jit.compile_module(text, ["triple_plus"], cache=True, recipe=recipe)
    assert text.calls == 1
    again = jit.compile_module(IR, ["triple_plus"], cache=True)  # the IR's own key: found
    assert again.optimize_s == 0.0 and len(list(cache_dir.glob("*.o"))) == 1


def test_flex_kernels_load_by_recipe_with_the_same_bits(cache_dir, rng, monkeypatch):
    from ember.backend.flex import native_pool
    from ember.backend.kernel.llvm import pooling

    monkeypatch.setattr(native_pool, "_STATE", {})
    x = rng.standard_normal((4, 8, 32, 32)).astype(np.float32)
    args = ((2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), (16, 16), True)
    fresh = native_pool.max_pool(x, *args)
    assert fresh is not None and len(list(cache_dir.glob("*.o"))) == 1
    emitted = []
    original = pooling.max_pool_rows
    monkeypatch.setattr(pooling, "max_pool_rows", lambda *a: emitted.append(1) or original(*a))
    monkeypatch.setattr(native_pool, "_STATE", {})  # as a new process
    loaded = native_pool.max_pool(x, *args)
    assert loaded is not None and not emitted  # loaded from the cache, no IR made
    oracle = x.reshape(4, 8, 16, 2, 16, 2).max(axis=(3, 5))
    for values, indices in (fresh, loaded):
        assert np.array_equal(values, oracle)
        picked = np.take_along_axis(x.reshape(4, 8, -1), indices.reshape(4, 8, -1), axis=2)
        assert np.array_equal(picked.reshape(values.shape), values)  # each index names its maximum
    assert np.array_equal(fresh[1], loaded[1])
