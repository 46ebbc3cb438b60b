"""Documents' names ("file:line" of a JSONL file, a .txt file's path) as one blob, and the
shards they route to: each name's SipHash-2-4 under a key from the conversion's seed
(TensorFlow's `to_hash_bucket_strong`'s values, so datasets converted before keep their
shards), by the compiled step where built, else by `siphash`, the Python reference."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from feedgpu.converters.text.native import native_module


@dataclass(frozen=True)
class Names:
    """Documents' names as UTF-8 in one blob, each one's start and size (int64 numpy)."""

    blob: bytes
    starts: Any
    sizes: Any

    def __len__(self) -> int:
        return len(self.sizes)

    @classmethod
    def of(cls, names: Sequence[str]) -> Names:
        import numpy as np

        encoded = [name.encode() for name in names]
        sizes = np.fromiter(map(len, encoded), np.int64, len(encoded))
        return cls(b"".join(encoded), np.cumsum(sizes) - sizes, sizes)

    @classmethod
    def numbered(cls, prefix: str, numbers: Any) -> Names:
        """prefix and each number (int64 numpy): a JSONL file's "name:line"."""
        import numpy as np

        step = native_module("_records")
        if step is None:
            return cls.of([f"{prefix}{n}" for n in numbers.tolist()])
        blob, sizes = step.numbered(prefix.encode(), np.ascontiguousarray(numbers, np.int64))
        sizes = np.frombuffer(sizes, np.int64)
        return cls(blob, np.cumsum(sizes) - sizes, sizes)

    @classmethod
    def join(cls, parts: Sequence[Names]) -> Names:
        import numpy as np

        if len(parts) == 1:
            return parts[0]
        shift = np.cumsum([0, *(len(p.blob) for p in parts[:-1])])
        return cls(
            b"".join(p.blob for p in parts),
            np.concatenate([p.starts + s for p, s in zip(parts, shift, strict=True)]),
            np.concatenate([p.sizes for p in parts]),
        )

    def strings(self) -> list[str]:
        return [
            self.blob[a : a + n].decode()
            for a, n in zip(self.starts.tolist(), self.sizes.tolist(), strict=True)
        ]

    def taken(self, index: Any) -> Names:
        """The names at index (int64 numpy), in its order, repeats allowed."""
        return Names(self.blob, self.starts[index], self.sizes[index])


def route_key(seed: int) -> list[int]:
    """The SipHash key `route` uses for a conversion's seed: two 63-bit numbers."""
    digest = hashlib.sha256(f"feedgpu-route\0{seed}".encode()).digest()
    return [int.from_bytes(digest[i : i + 8], "big") >> 1 for i in (0, 8)]


def route(names: Names, key: list[int]) -> Any:
    """Each name's 62-bit keyed hash (uint64 numpy), which picks its document's shard."""
    import numpy as np

    step = native_module("_records")
    if step is not None:
        hashed = step.route(names.blob, names.starts, names.sizes, key[0], key[1], 1 << 62)
        return np.frombuffer(hashed, np.uint64)
    return np.array(
        [
            siphash(key[0], key[1], names.blob[a : a + n]) % (1 << 62)
            for a, n in zip(names.starts.tolist(), names.sizes.tolist(), strict=True)
        ],
        np.uint64,
    )


_MASK = (1 << 64) - 1


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _MASK


def siphash(k0: int, k1: int, data: bytes) -> int:
    """SipHash-2-4 of data under the key (k0, k1): the reference algorithm, the compiled
    step's `feedgpu_siphash`."""
    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D, k0 ^ 0x6C7967656E657261]
    v.append(k1 ^ 0x7465646279746573)

    def rounds(n: int) -> None:
        for _ in range(n):
            v[0] = (v[0] + v[1]) & _MASK
            v[1] = _rotl(v[1], 13) ^ v[0]
            v[0] = _rotl(v[0], 32)
            v[2] = (v[2] + v[3]) & _MASK
            v[3] = _rotl(v[3], 16) ^ v[2]
            v[0] = (v[0] + v[3]) & _MASK
            v[3] = _rotl(v[3], 21) ^ v[0]
            v[2] = (v[2] + v[1]) & _MASK
            v[1] = _rotl(v[1], 17) ^ v[2]
            v[2] = _rotl(v[2], 32)

    tail = len(data) % 8
    words = [int.from_bytes(data[i : i + 8], "little") for i in range(0, len(data) - tail, 8)]
    words.append(int.from_bytes(data[len(data) - tail :], "little") | (len(data) & 0xFF) << 56)
    for m in words:
        v[3] ^= m
        rounds(2)
        v[0] ^= m
    v[2] ^= 0xFF
    rounds(4)
    return v[0] ^ v[1] ^ v[2] ^ v[3]
