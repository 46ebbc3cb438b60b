"""Bytes on disk: `tf.train.Example` protobufs and TFRecord framing, without importing TensorFlow.

Converter workers only validate and copy bytes; importing TensorFlow there would cost each worker
seconds and hundreds of MB. Both formats are small and stable, so they are written here and
checked against TensorFlow's own parser and reader in the tests.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, Any, Protocol, Union, cast

import google_crc32c

FeatureValue = Union[  # noqa: UP007 - a runtime alias; X | Y needs 3.10 evaluation
    bytes, str, int, float, Sequence[int], Sequence[float], Sequence[bytes]
]
ParsedExample = dict[str, list[bytes] | list[int] | list[float]]

_KIND_BYTES, _KIND_FLOAT, _KIND_INT64 = 1, 2, 3
_U64 = 1 << 64


_ONE_BYTE = tuple(bytes((i,)) for i in range(128))


def _varint(value: int) -> bytes:
    if 0 <= value < 128:
        return _ONE_BYTE[value]
    if value < 0:
        value += _U64  # int64 two's complement, as protobuf does: 10 bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _header(number, len(payload)) + payload


def encode_varints(values: Sequence[int]) -> bytes:
    """Packed varints, the body of an `Int64List`; small ids take one or two bytes each.

    Long lists of non-negative ids (token ids) are encoded with numpy, not per value.
    """
    if len(values) > 16:
        import numpy as np

        array = np.asarray(values, dtype=np.int64)
        if array.size and array.min() >= 0:
            return _varints_numpy(array.astype(np.uint64))
    if hasattr(values, "tolist"):  # a short numpy array: bytes() of it would be raw memory
        values = values.tolist()
    if all(0 <= v < 0x80 for v in values):
        return bytes(values)
    return b"".join(_varint(v) for v in values)


def _varints_numpy(values: Any) -> bytes:
    """Varints of a uint64 array: a (n, width) byte table, then its used cells in row order."""
    import numpy as np

    width = max(1, (int(values.max()).bit_length() + 6) // 7)
    # Ids below 2**28 (every real vocabulary) fit 32-bit arithmetic: a quarter of the memory.
    kind = np.uint32 if width <= 4 else np.uint64
    values = values.astype(kind)
    sizes = np.ones(len(values), dtype=np.int8)
    for k in range(1, width):
        sizes += values >= kind(1 << (7 * k))
    table = np.empty((len(values), width), dtype=np.uint8)
    for k in range(width):
        group = (values >> kind(7 * k)) & kind(0x7F)
        more = (sizes > k + 1).astype(np.uint8) * np.uint8(0x80)  # continuation bit
        table[:, k] = group.astype(np.uint8) | more
    encoded: bytes = table[np.arange(width, dtype=np.int8) < sizes[:, None]].tobytes()
    return encoded


def _feature(value: FeatureValue) -> bytes:
    if isinstance(value, str):
        value = value.encode("utf-8")
    if isinstance(value, bytes):
        return _field(_KIND_BYTES, _field(1, value))
    if isinstance(value, bool):
        raise TypeError("bool is not a feature type; store it as int")
    if isinstance(value, int):
        return _field(_KIND_INT64, _field(1, _varint(value)))
    if isinstance(value, float):
        return _field(_KIND_FLOAT, _field(1, struct.pack("<f", value)))
    values = value if hasattr(value, "dtype") else list(value)  # numpy arrays stay arrays
    if len(values) and isinstance(values[0], (bytes, str)):
        body = b"".join(
            _field(1, v.encode() if isinstance(v, str) else cast(bytes, v)) for v in values
        )
        return _field(_KIND_BYTES, body)
    if len(values) and isinstance(values[0], float):
        packed = struct.pack(f"<{len(values)}f", *values)
        return _field(_KIND_FLOAT, _field(1, packed))
    packed_ints = encode_varints(value if hasattr(value, "dtype") else values)  # type: ignore[arg-type]
    return _field(_KIND_INT64, _field(1, packed_ints) if packed_ints else b"")


def _header(number: int, length: int) -> bytes:
    """A length-delimited field's tag and length. Called several times per example: one-byte
    tags and lengths (the usual case) skip _varint's calls."""
    tag = _ONE_BYTE[number << 3 | 2] if number < 16 else _varint(number << 3 | 2)
    return tag + (_ONE_BYTE[length] if length < 128 else _varint(length))


_KEYS: dict[str, bytes] = {}


def encode_example(features: Mapping[str, FeatureValue]) -> bytes:
    """Serialise a `tf.train.Example`; keys are sorted so equal inputs give equal bytes.

    A single bytes value (an encoded image) is copied once, into the result, not once per
    level of protobuf nesting.
    """
    parts: list[bytes] = []
    for name in sorted(features):
        value = features[name]
        key = _KEYS.get(name)
        if key is None:  # feature names repeat in every example: encoded once
            key = _KEYS[name] = _field(1, name.encode("utf-8"))
        if isinstance(value, bytes) and len(value) > 1024:
            inner = _header(1, len(value))  # BytesList.value
            kind = _header(_KIND_BYTES, len(inner) + len(value))
            feature_len = len(kind) + len(inner) + len(value)
            entry_head = key + _header(2, feature_len) + kind + inner
            parts += [_header(1, len(entry_head) + len(value)), entry_head, value]
        else:
            entry = key + _field(2, _feature(value))
            parts += [_header(1, len(entry)), entry]
    body_len = sum(len(p) for p in parts)
    return b"".join([_header(1, body_len), *parts])


def _read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def message_fields(data: bytes | memoryview) -> Iterator[tuple[int, int, bytes | int]]:
    """(field number, wire type, payload) for each field of a protobuf message."""
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 2:
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated field")
            yield number, wire, bytes(data[pos : pos + length])
            pos += length
        elif wire == 0:
            value, pos = _read_varint(data, pos)
            yield number, wire, value
        elif wire == 5:
            yield number, wire, bytes(data[pos : pos + 4])
            pos += 4
        elif wire == 1:
            yield number, wire, bytes(data[pos : pos + 8])
            pos += 8
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _decode_list(kind: int, body: bytes) -> list[bytes] | list[int] | list[float]:
    if kind == _KIND_BYTES:
        return [v for _, _, v in message_fields(body) if isinstance(v, bytes)]
    if kind == _KIND_FLOAT:
        floats: list[float] = []
        for _, wire, v in message_fields(body):
            raw = v if isinstance(v, bytes) else b""
            floats.extend(struct.unpack(f"<{len(raw) // 4}f", raw) if wire == 2 else [])
            if wire == 5:
                floats.extend(struct.unpack("<f", raw))
        return floats
    ints: list[int] = []
    for _, wire, v in message_fields(body):
        if wire == 0 and isinstance(v, int):
            ints.append(v)
        elif isinstance(v, bytes):
            ints += _packed_varints(v)
    return [i - _U64 if i >= 1 << 63 else i for i in ints]


def _packed_varints(data: bytes) -> list[int]:
    """A packed list's varints (unsigned), all at once: a text record holds thousands, which
    `_read_varint` took milliseconds to read one by one."""
    return cast(list[int], packed_varints(data).tolist())


def packed_varints(data: bytes) -> Any:
    """Packed varints' values, uint64 numpy.

    Raises:
        ValueError: the last is cut short, or one is past 64 bits.
    """
    import numpy as np

    raw = np.frombuffer(data, np.uint8)
    ends = np.flatnonzero(raw < 0x80)  # each varint's last byte
    if len(raw) and (not len(ends) or ends[-1] != len(raw) - 1):
        raise ValueError("truncated varint")
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
    widths = ends - starts + 1
    if len(widths) and (widths.max() > 10 or (raw[ends[widths == 10]] > 1).any()):
        raise ValueError("varint too long")  # over 64 bits
    low = (raw & 0x7F).astype(np.uint64)
    values = np.zeros(len(ends), np.uint64)
    for k in range(int(widths.max()) if len(widths) else 0):
        longer = widths > k
        values[longer] |= low[starts[longer] + k] << np.uint64(7 * k)
    return values


def decode_example(data: bytes) -> ParsedExample:
    """Parse a serialised `tf.train.Example` into name -> list of values.

    Raises:
        ValueError: the bytes are not a well-formed Example.
    """
    out: ParsedExample = {}
    for _, _, features in message_fields(data):
        if not isinstance(features, bytes):
            raise ValueError("Example.features is not a message")
        for _, _, entry in message_fields(features):
            name, value = "", b""
            for number, _, part in message_fields(entry if isinstance(entry, bytes) else b""):
                if number == 1 and isinstance(part, bytes):
                    name = part.decode("utf-8")
                elif number == 2 and isinstance(part, bytes):
                    value = part
            kinds = list(message_fields(value))
            if not kinds:
                out[name] = []
                continue
            kind, _, body = kinds[0]
            out[name] = _decode_list(kind, body if isinstance(body, bytes) else b"")
    return out


def block_documents(example: ParsedExample) -> list[ParsedExample]:
    """A decoded text record's documents, each as a record of one document would decode.

    A record of format 3 may hold a block of documents: `length`, `doc_id` and `label` one
    value per document, `input_ids` their ids concatenated. A record of one document (format 2)
    comes back as it is. What a reader outside TensorFlow (PyTorch, DALI) does with a block.

    Raises:
        ValueError: the lengths do not add up to the ids (a damaged or foreign record).
    """
    lengths = [int(n) for n in example.get("length", ())]  # ints: an Int64List
    ids = example.get("input_ids", [])
    if lengths and sum(lengths) != len(ids):  # one document's length is its ids' count too
        raise ValueError(f"a block's lengths add up to {sum(lengths)}, its ids are {len(ids)}")
    if len(lengths) <= 1:
        return [example]
    each = [k for k in ("length", "doc_id", "label") if k in example]
    documents, start = [], 0
    for i, n in enumerate(lengths):
        document: ParsedExample = {k: example[k][i : i + 1] for k in each}
        document["input_ids"] = ids[start : start + n]
        documents.append(document)
        start += n
    return documents


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC32C of data (of a length header, or of a record's data)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


_pack_u32 = struct.Struct("<I").pack
_HEADS: dict[int, bytes] = {}  # by record length: lengths repeat, their CRCs need not be redone


def _head(length: int) -> bytes:
    """What goes before a record's data: its length and the length's masked CRC32C."""
    head = _HEADS.get(length)
    if head is None:
        packed = struct.pack("<Q", length)
        head = packed + _pack_u32(masked_crc(packed))
        if len(_HEADS) < 1 << 16:
            _HEADS[length] = head
    return head


def _framing(data: bytes) -> tuple[bytes, bytes]:
    """What goes before one record's data and after it (the data's masked CRC32C): the TFRecord
    format."""
    return _head(len(data)), _pack_u32(masked_crc(data))


class Writable(Protocol):
    """Anything records can be appended to: a binary file, a `tf.io.gfile` file."""

    def write(self, data: bytes, /) -> int: ...


def write_record(stream: Writable, data: bytes) -> int:
    """Append one TFRecord to stream, without copying data; returns the bytes written."""
    head, tail = _framing(data)
    stream.write(head)
    stream.write(data)
    stream.write(tail)
    return len(data) + 16


def frame_records(records: Sequence[bytes]) -> bytes:
    """Many TFRecords as one bytes object: one write instead of three per record."""
    parts: list[bytes] = []
    for data in records:
        head, tail = _framing(data)
        parts += (head, data, tail)
    return b"".join(parts)


def frame_record(data: bytes) -> bytes:
    """One TFRecord as bytes (for building files in memory)."""
    return frame_records([data])


class RecordError(ValueError):
    """A TFRecord file is damaged at a given record."""

    def __init__(self, index: int, offset: int, reason: str) -> None:
        super().__init__(f"record {index} (byte offset {offset}): {reason}")
        self.index, self.offset, self.reason = index, offset, reason


def read_records(
    stream: IO[bytes], on_damage: Callable[[RecordError], None] | None = None
) -> Iterator[bytes]:
    """Yield each record's data, checking both CRCs.

    Args:
        on_damage: if given, a record whose data fails its CRC is reported to it and skipped
            (its intact length header says where the next record starts); damage to a length
            header or a truncation is reported and ends the file, which cannot be resynced.

    Raises:
        RecordError: without on_damage, at the first damaged or truncated record.
    """
    index = offset = 0
    while True:
        header = stream.read(12)
        if not header:
            return
        problem, data = None, b""
        if len(header) < 12:
            problem = RecordError(index, offset, "truncated length header")
        else:
            (length,) = struct.unpack("<Q", header[:8])
            body = (
                stream.read(length + 4)
                if struct.unpack("<I", header[8:])[0] == masked_crc(header[:8])
                else b""
            )
            if not body:
                problem = RecordError(index, offset, "length CRC mismatch")
            elif len(body) < length + 4:
                problem = RecordError(index, offset, "truncated record")
            else:
                data = body[:length]
                if struct.unpack("<I", body[length:])[0] != masked_crc(data):
                    damaged = RecordError(index, offset, "data CRC mismatch")
                    if on_damage is None:
                        raise damaged
                    on_damage(damaged)
                    data = b""
                    index += 1
                    offset += 12 + length + 4
                    continue
        if problem is not None:
            if on_damage is None:
                raise problem
            on_damage(problem)
            return
        yield data
        index += 1
        offset += 12 + length + 4
