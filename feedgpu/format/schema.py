"""One schema per dataset, built from its features: it encodes an example (checking names,
types and shapes), checks a record made another way (text's in-graph encoder), gives readers
their parse spec, and describes the features for the manifest and for TFDS, so these can never
disagree. No TensorFlow but in `parse_spec`."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from feedgpu.format.records import FeatureValue, decode_example, encode_example

_TFDS = "tensorflow_datasets.core.features."


@dataclass(frozen=True)
class Feature:
    """One field of every example.

    Attributes:
        name: key in the `tf.train.Example`.
        dtype: "string" (bytes), "int64" or "float32".
        shape: () for one value per example, (-1,) for a variable-length list.
        kind: the TFDS connector: "image", "class_label", "text" or "tensor".
        encoding: for images, "jpeg" or "png" when every image has it, else None.
    """

    name: str
    dtype: str
    shape: tuple[int, ...] = ()
    kind: str = "tensor"
    encoding: str | None = None

    def to_tfds(self, label_names: Sequence[str]) -> dict[str, Any]:
        """This feature as a `features.json` entry, as TFDS 4.9 writes it: a list is a
        Sequence of its values' feature (a block's doc ids, lengths, labels)."""
        prefix = _TFDS
        if self.kind == "image":
            image: dict[str, Any] = {"dtype": "uint8", "shape": {"dimensions": ["-1", "-1", "3"]}}
            if self.encoding:
                image["encodingFormat"] = self.encoding
            return {"image": image, "pythonClassName": prefix + "image_feature.Image"}
        one: dict[str, Any]
        if self.kind == "class_label":
            one = {
                "classLabel": {"numClasses": str(len(label_names))},
                "pythonClassName": prefix + "class_label_feature.ClassLabel",
            }
        elif self.kind == "text":
            one = {"pythonClassName": prefix + "text_feature.Text", "text": {}}
        else:
            dtype = {"string": "string", "int64": "int64", "float32": "float32"}[self.dtype]
            one = {
                "pythonClassName": prefix + "scalar.Scalar",
                "tensor": {"dtype": dtype, "encoding": "none", "shape": {}},
            }
        if not self.shape:
            return one
        return {
            "pythonClassName": prefix + "sequence_feature.Sequence",
            "sequence": {"feature": one, "length": "-1"},
        }


@dataclass(frozen=True)
class Schema:
    """The features every example of a dataset holds, in declaration order."""

    features: tuple[Feature, ...]

    @classmethod
    def of(cls, features: Sequence[Feature]) -> Schema:
        return cls(tuple(features))

    @functools.cached_property
    def names(self) -> frozenset[str]:
        """The features' names (checked per example: built once)."""
        return frozenset(f.name for f in self.features)

    @property
    def blocks(self) -> bool:
        """Whether a record holds a block of documents: text whose `length` is a list (one
        per document, their ids concatenated in `input_ids`); else a record is an example."""
        return any(f.name == "length" and f.shape for f in self.features)

    def encode(self, example: Mapping[str, FeatureValue]) -> bytes:
        """The example serialised, after checking it holds exactly these features.

        Raises:
            ValueError: a feature missing, undeclared, or of another type or shape (a bug in
                the converter that built it, not in its input).
        """
        self.check(example)
        return encode_example(example)

    def check(self, example: Mapping[str, Any]) -> None:
        """Raise ValueError unless `example` holds exactly these features, each of its type
        and shape (decoded records hold lists for every feature: `listed`)."""
        declared = self.names
        if example.keys() != declared:
            missing, extra = sorted(declared - set(example)), sorted(set(example) - declared)
            raise ValueError(f"example does not fit its schema: missing {missing}, extra {extra}")
        for f in self.features:
            _check_value(f, example[f.name])

    def check_record(self, record: bytes) -> None:
        """Raise ValueError unless a serialised example (made without `encode`) fits."""
        decoded = decode_example(record)
        declared = self.names
        if decoded.keys() != declared:
            raise ValueError(
                f"record does not fit its schema: features {sorted(decoded)}, "
                f"declared {sorted(declared)}"
            )
        for f in self.features:
            values = decoded[f.name]
            if not f.shape and len(values) != 1:
                raise ValueError(f"record's {f.name}: {len(values)} values, declared one")
            if values:  # a decoded list's values are of one type, its wire format's
                _check_scalar(f, values[0])

    def parse_spec(self) -> dict[str, Any]:
        """`tf.io.parse_example`'s spec: ragged lists, fixed scalars."""
        import tensorflow as tf

        spec = {}
        for f in self.features:
            dtype = {"string": tf.string, "int64": tf.int64, "float32": tf.float32}[f.dtype]
            spec[f.name] = (
                tf.io.RaggedFeature(dtype, row_splits_dtype=tf.int64)
                if f.shape
                else tf.io.FixedLenFeature([], dtype)
            )
        return spec

    def to_json(self) -> list[dict[str, Any]]:
        """The manifest's `features`."""
        return [{**asdict(f), "shape": list(f.shape)} for f in self.features]

    @classmethod
    def from_json(cls, data: Sequence[Mapping[str, Any]]) -> Schema:
        """Inverse of to_json."""
        return cls(
            tuple(
                Feature(f["name"], f["dtype"], tuple(f["shape"]), f["kind"], f.get("encoding"))
                for f in data
            )
        )

    def to_tfds(self, label_names: Sequence[str]) -> dict[str, Any]:
        """TFDS's `features.json`: a FeaturesDict of every feature."""
        return {
            "featuresDict": {"features": {f.name: f.to_tfds(label_names) for f in self.features}},
            "pythonClassName": _TFDS + "features_dict.FeaturesDict",
        }


_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (bytes, str),
    "int64": (int,),
    "float32": (float,),  # an int would be written as an Int64List
}
# numpy's kinds of each declared type: a numpy scalar or array of these encodes as declared.
_NUMPY_KINDS = {"int64": "iu", "float32": "f", "string": "SUO"}


def _check_scalar(feature: Feature, value: Any, in_list: bool = False) -> None:
    if hasattr(value, "dtype") and not isinstance(value, (float, bytes, str)):
        if in_list and value.dtype.kind in _NUMPY_KINDS[feature.dtype]:
            return  # inside a list the codec takes numpy's numbers too
        raise ValueError(  # alone, the codec writes Python values only
            f"feature {feature.name}: numpy {value.dtype} scalar, declared {feature.dtype}: "
            "pass value.item()"
        )
    if isinstance(value, bool) or not isinstance(value, _PYTHON_TYPES[feature.dtype]):
        raise ValueError(
            f"feature {feature.name}: {type(value).__name__} value, declared {feature.dtype}"
        )


def _check_value(feature: Feature, value: Any) -> None:
    if not feature.shape:
        if isinstance(value, (list, tuple)) or int(getattr(value, "ndim", 0)):
            raise ValueError(f"feature {feature.name}: a list, declared one value")
        _check_scalar(feature, value)
        return
    if hasattr(value, "dtype"):  # a numpy array: its element type decides (empty: any)
        wanted = _NUMPY_KINDS[feature.dtype]
        if value.ndim != 1 or (value.size and value.dtype.kind not in wanted):
            raise ValueError(
                f"feature {feature.name}: array of {value.dtype} with {value.ndim} dimension(s), "
                f"declared a list of {feature.dtype}"
            )
        return
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"feature {feature.name}: one value, declared a list")
    if value:  # first and last: a whole check would cost a packed example its encoding's time
        _check_scalar(feature, value[0], in_list=True)
        _check_scalar(feature, value[-1], in_list=True)
