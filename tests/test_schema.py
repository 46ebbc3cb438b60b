"""One schema per dataset: it encodes only examples that fit it, checks records made another
way, and gives the parse spec and the manifest's features from the same declaration."""

from __future__ import annotations

import numpy as np
import pytest

from feedgpu.format.records import encode_example
from feedgpu.format.schema import Feature, Schema

TEXT = Schema.of(
    [
        Feature("input_ids", "int64", (-1,)),
        Feature("length", "int64"),
        Feature("doc_id", "string", kind="text"),
        Feature("label", "int64", kind="class_label"),
    ]
)
GOOD = {"input_ids": np.array([2, 7, 3], np.int64), "length": 3, "doc_id": "a.txt", "label": 1}


def test_encode_gives_the_codec_s_bytes_for_an_example_that_fits() -> None:
    assert TEXT.encode(GOOD) == encode_example(GOOD)
    assert TEXT.encode({**GOOD, "input_ids": [2, 7, 3]}) == encode_example(GOOD)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"label": None}, "missing \\['label'\\]"),
        ({"window": 0}, "extra \\['window'\\]"),
        ({"length": "3"}, "length: str value, declared int64"),
        ({"length": [3]}, "length: a list, declared one value"),
        ({"input_ids": 5}, "input_ids: one value, declared a list"),
        ({"input_ids": np.array([1.5])}, "input_ids: array of float64"),
        ({"doc_id": 7}, "doc_id: int value, declared string"),
        ({"label": True}, "label: bool value"),
    ],
)
def test_encode_refuses_an_example_that_does_not_fit(change: dict, message: str) -> None:
    example = {**GOOD, **change}
    example = {k: v for k, v in example.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        TEXT.encode(example)


def test_check_record_reads_a_record_made_without_the_schema() -> None:
    TEXT.check_record(encode_example(GOOD))
    with pytest.raises(ValueError, match="features"):
        TEXT.check_record(encode_example({**GOOD, "window": 0}))
    with pytest.raises(ValueError, match="length: 2 values, declared one"):
        TEXT.check_record(encode_example({**GOOD, "length": [3, 4]}))


def test_records_of_documents_fit_the_text_schema() -> None:
    import io

    from feedgpu.converters.text.convert import TextOptions, text_features
    from feedgpu.converters.text.names import Names, route_key
    from feedgpu.converters.text.records import RecordMaker, Tokenized
    from feedgpu.format.records import read_records

    tokenized = Tokenized(
        np.array([7, 8, 9, 10], np.int64),
        np.array([1, 3], np.int64),
        Names.of(["a", "b"]),
        ["train"] * 2,
        np.array([0, 1], np.int64),
    )

    def made(per_record: int | None) -> list[bytes]:
        maker = RecordMaker({"train": 1}, route_key(0), [2], [3], None, None, per_record, 1)
        return list(read_records(io.BytesIO(maker.documents(tokenized).data)))

    for record in made(1):
        TEXT.check_record(record)
    unlabelled = Schema.of([f for f in TEXT.features if f.name != "label"])
    with pytest.raises(ValueError, match="features"):
        unlabelled.check_record(made(1)[0])
    # A block of both documents fits the block schema, which the converter declares; not
    # the schema of one document a record.
    blocks = Schema.of(text_features(TextOptions(tokenizer="vocab.txt"), labelled=True))
    assert blocks.blocks and not TEXT.blocks
    (block,) = made(None)
    blocks.check_record(block)
    with pytest.raises(ValueError, match="record's length: 2 values, declared one"):
        TEXT.check_record(block)


def test_parse_spec_and_manifest_features_come_from_the_same_declaration() -> None:
    import tensorflow as tf

    parsed = tf.io.parse_example(tf.constant([TEXT.encode(GOOD)]), TEXT.parse_spec())
    assert parsed["input_ids"].to_list() == [[2, 7, 3]]
    assert parsed["doc_id"].numpy().tolist() == [b"a.txt"]
    assert Schema.from_json(TEXT.to_json()) == TEXT
    tfds = TEXT.to_tfds(["neg", "pos"])["featuresDict"]["features"]
    assert list(tfds) == [f.name for f in TEXT.features]
    assert tfds["label"]["classLabel"] == {"numClasses": "2"}


def test_numpy_values_and_empty_lists_fit_their_declared_types() -> None:
    floats = Schema.of([Feature("score", "float32"), Feature("tags", "string", (-1,))])
    assert floats.encode({"score": 0.5, "tags": np.array(["a", "b"])}) == encode_example(
        {"score": 0.5, "tags": [b"a", b"b"]}
    )
    floats.encode({"score": 0.5, "tags": []})
    with pytest.raises(ValueError, match=r"score: numpy float32 scalar.*pass value\.item"):
        floats.encode({"score": np.float32(0.5), "tags": []})
    TEXT.encode({**GOOD, "input_ids": np.array([])})  # empty: its numpy dtype does not matter
    with pytest.raises(ValueError, match="score: int value, declared float32"):
        floats.encode({"score": 3, "tags": []})  # it would be written as an int
    with pytest.raises(ValueError, match="tags: int value, declared string"):
        floats.encode({"score": 0.5, "tags": ["a", 7]})
