"""Counter-based random numbers: Philox4x32-10 (Salmon et al., 2011) in a kernel.

Thread ``t`` of a draw encrypts the 128-bit counter ``offset + t`` under the 64-bit
key ``seed`` into four 32-bit words, which become four values: uniform floats from
the top 24 bits, normals by Box-Muller from pairs, Bernoulli draws by comparing a
uniform with ``p``. Each draw advances the offset past the counters it used, so the
same seed gives bit-identical tensors on every run of the same device, and the
generator state is just ``(seed, offset)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.backend.cube import wgsl
from ember.backend.cube.buffer import CubeTensor
from ember.backend.cube.cache import KernelSource
from ember.backend.cube.dtypes import Storage, scalar_word
from ember.backend.distribution import Distribution
from ember.errors import ValueRangeError

if TYPE_CHECKING:
    from ember.backend.cube.backend import CubeBackend

M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10

PHILOX_WGSL = f"""
fn mulhilo(a: u32, b: u32) -> vec2<u32> {{
    let al = a & 0xffffu; let ah = a >> 16u;
    let bl = b & 0xffffu; let bh = b >> 16u;
    let ll = al * bl; let hl = ah * bl; let lh = al * bh; let hh = ah * bh;
    let cross = (ll >> 16u) + (hl & 0xffffu) + lh;
    return vec2<u32>(hh + (hl >> 16u) + (cross >> 16u), a * b);
}}

fn philox(counter: vec4<u32>, key: vec2<u32>) -> vec4<u32> {{
    var c = counter;
    var k = key;
    for (var r = 0u; r < {ROUNDS}u; r++) {{
        let p0 = mulhilo({M0}u, c.x);
        let p1 = mulhilo({M1}u, c.z);
        c = vec4<u32>(p1.x ^ c.y ^ k.x, p1.y, p0.x ^ c.w ^ k.y, p0.y);
        k = k + vec2<u32>({W0}u, {W1}u);
    }}
    return c;
}}
"""

_KINDS = {"uniform": 0, "normal": 1, "bernoulli": 2}


class Philox:
    """The generator state of a cube device: a 64-bit key and a 64-bit counter offset."""

    def __init__(self, seed: int | None = None) -> None:
        if seed is None:
            import secrets

            seed = secrets.randbits(64)
        self.seed = int(seed) & 0xFFFF_FFFF_FFFF_FFFF
        self.offset = 0

    def state(self) -> dict[str, int | str]:
        return {"algorithm": "philox4x32-10", "seed": self.seed, "offset": self.offset}

    @classmethod
    def from_state(cls, state) -> Philox:
        if not isinstance(state, dict) or state.get("algorithm") != "philox4x32-10":
            raise ValueRangeError(
                f"ember: set_rng_state: expected a state from a cube device's rng_state(), got {state!r:.80}"
            )
        rng = cls(int(state["seed"]))
        rng.offset = int(state["offset"]) & 0xFFFF_FFFF_FFFF_FFFF
        return rng

    def take(self, blocks: int) -> int:
        """Reserve ``blocks`` counters; returns the first."""
        first = self.offset
        self.offset = (self.offset + blocks) & 0xFFFF_FFFF_FFFF_FFFF
        return first


def _source(out: Storage) -> KernelSource:
    body = "\n".join([
        "    let n = info[0];",
        "    if (gi * 4u >= n) { return; }",
        "    let lo = info[1] + gi;",
        "    let hi = info[2] + select(0u, 1u, lo < gi);",
        "    let w = philox(vec4<u32>(lo, hi, 0u, 0u), vec2<u32>(info[3], info[4]));",
        "    let kind = info[5];",
        "    let a = bitcast<f32>(info[6]); let b = bitcast<f32>(info[7]);",
        "    let u = vec4<f32>(w >> vec4<u32>(8u)) * (1.0 / 16777216.0);",
        "    var v: vec4<f32>;",
        "    if (kind == 0u) {",
        "        v = a + u * (b - a);",
        "        v = select(v, vec4<f32>(a), v >= vec4<f32>(b) & vec4<bool>(b > a));",
        "    } else if (kind == 1u) {",
        "        let u1 = vec2<f32>((vec2<u32>(w.x, w.z) >> vec2<u32>(8u)) + vec2<u32>(1u)) * (1.0 / 16777216.0);",
        "        let r = sqrt(-2.0 * log(u1));",
        "        let t = 6.283185307179586 * vec2<f32>(u.y, u.w);",
        "        v = a + b * vec4<f32>(r.x * cos(t.x), r.x * sin(t.x), r.y * cos(t.y), r.y * sin(t.y));",
        "    } else {",
        "        v = select(vec4<f32>(0.0), vec4<f32>(1.0), u < vec4<f32>(a));",
        "    }",
        "    for (var j = 0u; j < 4u; j++) {",
        "        let i = gi * 4u + j;",
        "        if (i < n) {",
        f"            out0[i] = {wgsl.store(out, wgsl.convert('v[j]', 'f32', out.compute))};",
        "        }",
        "    }",
    ])
    code = PHILOX_WGSL + wgsl.main_linear(body)
    source = "\n".join([wgsl.bindings([], [out]), wgsl.helpers_for(code + out.store), code])
    return KernelSource("random_philox", source, 0, 1)


def sample(backend: CubeBackend, shape: tuple[int, ...], distribution: Distribution, storage: Storage) -> CubeTensor:
    out = backend.empty(shape, storage)
    n = out.size
    if n == 0:
        return out
    blocks = -(-n // 4)
    rng = backend.rng
    first = rng.take(blocks)
    kernel = backend.cache.get(("random", storage), lambda: _source(storage))
    info = [
        n, first & 0xFFFF_FFFF, first >> 32, rng.seed & 0xFFFF_FFFF, rng.seed >> 32,
        _KINDS[distribution.kind], scalar_word(distribution.a, "f32"), scalar_word(distribution.b, "f32"),
    ]
    backend.runtime.launch(kernel, [out.buffer], info, -(-blocks // wgsl.WORKGROUP))
    return out
