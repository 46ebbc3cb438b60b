"""Our Example and TFRecord bytes against TensorFlow's own."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import tensorflow as tf

from feedgpu.format.records import (
    RecordError,
    decode_example,
    encode_example,
    frame_record,
    read_records,
)

FEATURES = {
    "image": b"\x00\xffbytes",
    "label": 3,
    "path": "ünï/cödé.jpg",
    "ids": [0, 1, 127, 128, 300, 2**40, -1, -(2**63)],
    "empty": [],
    "score": 0.5,
    "scores": [1.5, -2.25],
    "names": [b"a", b"bc"],
}


def test_encode_example_equals_tensorflow_message() -> None:
    def tf_feature(v: object) -> tf.train.Feature:
        if isinstance(v, (bytes, str)):
            v = [v.encode() if isinstance(v, str) else v]
        if isinstance(v, int):
            v = [v]
        if isinstance(v, float):
            v = [v]
        assert isinstance(v, list)
        if v and isinstance(v[0], bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=v))
        if v and isinstance(v[0], float):
            return tf.train.Feature(float_list=tf.train.FloatList(value=v))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=v))

    expected = tf.train.Example(
        features=tf.train.Features(feature={k: tf_feature(v) for k, v in FEATURES.items()})
    )
    ours = encode_example(FEATURES)
    assert tf.train.Example.FromString(ours) == expected
    # Field by field, the bytes are protobuf's own (map order aside: upb sorts "scores" first).
    for name, value in FEATURES.items():
        single = tf.train.Example(features=tf.train.Features(feature={name: tf_feature(value)}))
        assert encode_example({name: value}) == single.SerializeToString()


def test_decode_example_round_trips() -> None:
    parsed = decode_example(encode_example(FEATURES))
    assert parsed["ids"] == FEATURES["ids"]
    assert parsed["path"] == [FEATURES["path"].encode()]  # type: ignore[union-attr]
    assert parsed["scores"] == [1.5, -2.25]
    assert parsed["empty"] == []
    assert parsed["label"] == [3]


def test_packed_ids_decode_as_tensorflow_parses_them() -> None:
    # Every varint width (1 to 10 bytes) in one packed list, as a text record's ids are.
    ids = [0, 1, 127, 128, 2**14, 2**21, 2**28, 2**35, 2**42, 2**49, 2**56, 2**63 - 1, -1, -5]
    ids = ids * 300
    record = encode_example({"input_ids": ids})
    parsed = tf.io.parse_single_example(record, {"input_ids": tf.io.VarLenFeature(tf.int64)})
    assert decode_example(record)["input_ids"] == ids == parsed["input_ids"].values.numpy().tolist()


@pytest.mark.parametrize(
    "body", [b"\x80", b"\x01\xff", b"\xff" * 10 + b"\x01", b"\xff" * 9 + b"\x02"]
)
def test_damaged_packed_ids_are_refused(body: bytes) -> None:
    ints = b"\x0a" + bytes([len(body)]) + body  # Int64List{value: packed}
    feature = b"\x1a" + bytes([len(ints)]) + ints  # Feature{int64_list}
    entry = b"\x0a\x01a\x12" + bytes([len(feature)]) + feature
    features = b"\x0a" + bytes([len(entry)]) + entry
    with pytest.raises(ValueError, match="varint"):
        decode_example(b"\x0a" + bytes([len(features)]) + features)


def test_framed_records_read_by_tensorflow(tmp_path) -> None:
    path = tmp_path / "x.tfrecord"
    payloads = [b"", b"a", b"x" * 100_000]
    path.write_bytes(b"".join(frame_record(p) for p in payloads))
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(path))] == payloads
    with open(path, "rb") as f:
        assert list(read_records(f)) == payloads


def test_read_records_reads_tensorflow_output_and_locates_damage(tmp_path) -> None:
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for i in range(5):
            w.write(f"record {i}".encode())
    data = bytearray(Path(path).read_bytes())
    assert len(list(read_records(io.BytesIO(bytes(data))))) == 5
    data[-6] ^= 0x01  # inside the last record's payload
    with pytest.raises(RecordError, match=r"record 4 .*data CRC mismatch"):
        list(read_records(io.BytesIO(bytes(data))))
    with pytest.raises(RecordError, match=r"record 4 .*truncated"):
        list(read_records(io.BytesIO(bytes(data[:-3]))))


def test_long_id_lists_take_the_numpy_path_with_protobuf_bytes() -> None:
    for ids in ([5, 300, 2**21, 127, 128] * 5, list(range(0, 40000, 997)), [2**40] * 17):
        expected = tf.train.Example(
            features=tf.train.Features(
                feature={"ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids))}
            )
        )
        assert encode_example({"ids": ids}) == expected.SerializeToString()
