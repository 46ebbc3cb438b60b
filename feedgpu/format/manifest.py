"""`Manifest`: the typed `feedgpu.json`, the one contract between a converter and its readers.

Only this module writes and reads the file. It records what readers need (features, splits,
shards, labels; for text the tokenizer, pad id, special tokens, pack length, exact length
counts) so that no reader re-derives any of it.

Format versions: 1 (before the pad id was recorded) is still read, its pad id recovered from the
`tokenizer.json` saved beside the shards by the rule its packer used; 3 has text records
holding blocks of documents (a dataset without them is written as 2); a newer version than this
feedgpu knows is refused with one line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from feedgpu import storage
from feedgpu.errors import DatasetError
from feedgpu.format.names import MANIFEST
from feedgpu.format.pad_tokens import legacy_pad_id
from feedgpu.format.schema import Feature, Schema

FORMAT_VERSION = 3  # text records may hold blocks of documents; without blocks: written as 2


@dataclass(frozen=True)
class ShardInfo:
    """One shard file of a split: its name in the dataset folder, examples, bytes, its record
    index if any (`feedgpu.format.index`), records if several examples a record (blocks)."""

    file: str
    num_examples: int
    num_bytes: int
    index: str | None = None
    records: int | None = None

    @property
    def num_records(self) -> int:
        """Records in the file: what TFDS counts, what `verify` and an index find."""
        return self.num_examples if self.records is None else self.records


@dataclass(frozen=True)
class SplitInfo:
    """A split's shards, in order."""

    shards: tuple[ShardInfo, ...]

    @property
    def num_examples(self) -> int:
        """Examples over every shard."""
        return sum(s.num_examples for s in self.shards)

    @property
    def num_bytes(self) -> int:
        """Bytes over every shard."""
        return sum(s.num_bytes for s in self.shards)


@dataclass(frozen=True)
class TokenizerInfo:
    """Which tokenizer made a text dataset's ids, and the ids readers need from it.

    Attributes:
        identity: hash of the tokenizer (not of --max-length's truncation in the saved file).
        spec: the --tokenizer argument given.
        model: the HF model type ("WordPiece", "BPE", ...).
        vocab_size: ids are below this.
        lowercase: whether text was lower-cased (None: the tokenizer.json decides).
        files: the tokenizer files saved beside the shards.
        special_ids: ids added before and after each document's own.
        pad_id: the id padding holds, in packed sequences and in the pipeline's batches.
        pad_token: the token pad_id stands for (None when the id has no token).
        pad_choice: why pad_id: the tokenizer's pad token, --pad-id, or a stated fallback.
        parity: the fast-path check (the road taken and why, sample size, mismatches).
        vocab_size_asked: a trained vocabulary's size asked (`train:wordpiece:16000`; fewer
            pieces seen twice give a smaller one), else None.
    """

    identity: str
    spec: str
    model: str
    vocab_size: int
    lowercase: bool | None
    files: tuple[str, ...]
    special_ids: tuple[tuple[int, ...], tuple[int, ...]]
    pad_id: int
    pad_token: str | None
    pad_choice: str
    parity: Mapping[str, Any] = field(default_factory=dict)
    vocab_size_asked: int | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON form: the parity fields sit beside the others, as written since version 1."""
        asked = {} if self.vocab_size_asked is None else {"vocab_size_asked": self.vocab_size_asked}
        return {
            **asked,
            **self.parity,
            "identity": self.identity,
            "spec": self.spec,
            "model": self.model,
            "vocab_size": self.vocab_size,
            "lowercase": self.lowercase,
            "files": list(self.files),
            "special_ids": [list(ids) for ids in self.special_ids],
            "pad_id": self.pad_id,
            "pad_token": self.pad_token,
            "pad_choice": self.pad_choice,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], legacy_pad_id: int = 0) -> TokenizerInfo:
        """Inverse of to_json; a version-1 entry (no pad id) takes legacy_pad_id."""
        known = {"identity", "spec", "model", "vocab_size", "lowercase", "files", "special_ids"}
        known |= {"pad_id", "pad_token", "pad_choice", "vocab_size_asked"}
        before, after = data.get("special_ids") or [[], []]
        return cls(
            identity=data["identity"],
            spec=data.get("spec", ""),
            model=data.get("model", ""),
            vocab_size=int(data["vocab_size"]),
            lowercase=data.get("lowercase"),
            files=tuple(data.get("files", ())),
            special_ids=(tuple(before), tuple(after)),
            pad_id=int(data.get("pad_id", legacy_pad_id)),
            pad_token=data.get("pad_token"),
            pad_choice=data.get("pad_choice", "format 1: the packer's rule ([PAD], <pad>, else 0)"),
            parity={k: v for k, v in data.items() if k not in known},
            vocab_size_asked=data.get("vocab_size_asked"),
        )


@dataclass(frozen=True)
class TextStatistics:
    """What is stored, per example: documents, ids, unknown rate, padding waste at fixed lengths
    and exact length counts (what bucket boundaries are chosen from).

    Attributes:
        documents: documents converted.
        tokens: ids stored over every example (special tokens included).
        unknown_rate: share of ids that are the unknown token.
        padding_waste_fixed: fixed length -> share of padding when every example is padded to it.
        length_counts: (length, examples) pairs, ascending, of the stored examples.
        replaced_bytes: bytes replaced by U+FFFD (--encoding-errors replace); JSON: if any.
    """

    documents: int
    tokens: int
    unknown_rate: float
    padding_waste_fixed: Mapping[str, float]
    length_counts: tuple[tuple[int, int], ...]
    replaced_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "documents": self.documents,
            "tokens": self.tokens,
            "unknown_rate": self.unknown_rate,
            "padding_waste_fixed": dict(self.padding_waste_fixed),
            "length_counts": [list(pair) for pair in self.length_counts],
            **({"replaced_bytes": self.replaced_bytes} if self.replaced_bytes else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TextStatistics:
        """Inverse of to_json."""
        return cls(
            documents=int(data["documents"]),
            tokens=int(data["tokens"]),
            unknown_rate=float(data["unknown_rate"]),
            padding_waste_fixed=dict(data.get("padding_waste_fixed", {})),
            length_counts=tuple((int(n), int(c)) for n, c in data.get("length_counts", [])),
            replaced_bytes=int(data.get("replaced_bytes", 0)),
        )


@dataclass(frozen=True)
class Manifest:
    """A converted dataset, as its converter recorded it in `feedgpu.json`.

    Attributes:
        name: the dataset name (TFDS-safe), also the shard file prefix.
        converter: "images" or "text".
        source: the input, as given.
        options: the options that changed the bytes (compared on re-runs).
        inputs_fingerprint: hash of the input listing (paths, sizes, mtimes).
        fingerprint: identity of the output: options plus inputs.
        features: the example fields.
        label_names: class names, index = label.
        splits: split name -> its shards, in split order.
        statistics: per-statistic summaries (image sizes, document lengths).
        skipped: skip counts by reason.
        num_skipped: inputs skipped.
        versions: library versions that wrote it.
        tokenizer: for text, the tokenizer and the ids readers need.
        text: for text, statistics of what is stored.
        format_version: this layout's version.
    """

    name: str
    converter: str
    source: str
    options: Mapping[str, Any]
    inputs_fingerprint: str
    fingerprint: str
    features: tuple[Feature, ...]
    label_names: tuple[str, ...]
    splits: Mapping[str, SplitInfo]
    statistics: Mapping[str, Any] = field(default_factory=dict)
    skipped: Mapping[str, int] = field(default_factory=dict)
    num_skipped: int = 0
    versions: Mapping[str, str] = field(default_factory=dict)
    tokenizer: TokenizerInfo | None = None
    text: TextStatistics | None = None
    format_version: int = FORMAT_VERSION

    @property
    def kind(self) -> str:
        """ "text" for token ids, else "image"."""
        return "text" if any(f.name == "input_ids" for f in self.features) else "image"

    @property
    def schema(self) -> Schema:
        """The features as one object: it encodes, checks and parses examples."""
        return Schema(self.features)

    @property
    def labelled(self) -> bool:
        """Whether examples carry a class label."""
        return any(f.kind == "class_label" for f in self.features)

    @property
    def pack_length(self) -> int | None:
        """The length of packed sequences, when text was packed."""
        pack = self.options.get("pack")
        return int(pack) if pack else None

    @property
    def pad_id(self) -> int:
        """The id padding holds (0 for datasets without a tokenizer)."""
        return self.tokenizer.pad_id if self.tokenizer else 0

    @property
    def num_examples(self) -> int:
        """Examples over every split."""
        return sum(s.num_examples for s in self.splits.values())

    def split(self, name: str, data_dir: str = "") -> SplitInfo:
        """One split's shards.

        Raises:
            DatasetError: no such split (the message lists the ones there are).
        """
        if name not in self.splits:
            where = data_dir or self.name
            raise DatasetError(f"{where} has no split {name!r} (it has {', '.join(self.splits)})")
        return self.splits[name]

    def to_json(self) -> dict[str, Any]:
        """The `feedgpu.json` document."""
        out: dict[str, Any] = {
            "format_version": self.format_version,
            "name": self.name,
            "converter": self.converter,
            "source": self.source,
            "options": dict(self.options),
            "inputs_fingerprint": self.inputs_fingerprint,
            "fingerprint": self.fingerprint,
            "features": Schema(self.features).to_json(),
            "label_names": list(self.label_names),
            "splits": {
                name: {
                    "num_examples": split.num_examples,
                    "num_bytes": split.num_bytes,
                    "shards": [
                        {
                            "file": s.file,
                            "num_examples": s.num_examples,
                            "num_bytes": s.num_bytes,
                            **({"index": s.index} if s.index else {}),
                            **({"num_records": s.records} if s.records is not None else {}),
                        }
                        for s in split.shards
                    ],
                }
                for name, split in self.splits.items()
            },
            "statistics": dict(self.statistics),
            "skipped": dict(self.skipped),
            "num_skipped": self.num_skipped,
            "versions": dict(self.versions),
        }
        if self.tokenizer is not None:
            out["tokenizer"] = self.tokenizer.to_json()
        if self.text is not None:
            out["text"] = self.text.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], legacy_pad_id: int = 0) -> Manifest:
        """Inverse of to_json.

        Raises:
            DatasetError: a newer format, or fields missing or of the wrong type.
        """
        version = data.get("format_version", 1)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise DatasetError(
                f"written by a newer feedgpu (manifest format {version}, this one reads up to "
                f"{FORMAT_VERSION}); upgrade feedgpu"
            )
        try:
            tokenizer = data.get("tokenizer")
            text = data.get("text")
            return cls(
                name=data["name"],
                converter=data["converter"],
                source=data.get("source", ""),
                options=dict(data.get("options", {})),
                inputs_fingerprint=data.get("inputs_fingerprint", ""),
                fingerprint=data.get("fingerprint", ""),
                features=Schema.from_json(data["features"]).features,
                label_names=tuple(data.get("label_names", ())),
                splits={
                    name: SplitInfo(
                        tuple(
                            ShardInfo(
                                s["file"],
                                int(s["num_examples"]),
                                int(s["num_bytes"]),
                                s.get("index"),
                                s.get("num_records"),
                            )
                            for s in split["shards"]
                        )
                    )
                    for name, split in data["splits"].items()
                },
                statistics=dict(data.get("statistics", {})),
                skipped=dict(data.get("skipped", {})),
                num_skipped=int(data.get("num_skipped", 0)),
                versions=dict(data.get("versions", {})),
                tokenizer=TokenizerInfo.from_json(tokenizer, legacy_pad_id) if tokenizer else None,
                text=TextStatistics.from_json(text) if text else None,
                format_version=max(version, 2),  # format 1 is read as 2 (its pad id set)
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise DatasetError(f"damaged manifest: {type(e).__name__} {e}") from e

    def write(self, out_dir: str) -> None:
        """Write `feedgpu.json` atomically and durably: it is what says "complete"."""
        storage.write_json(storage.join(out_dir, MANIFEST), self.to_json(), durable=True)


def read_manifest(out_dir: str) -> Manifest:
    """The manifest of a converted dataset.

    Raises:
        DatasetError: no manifest, one that is not valid JSON, or one this feedgpu cannot read.
    """
    path = storage.join(out_dir, MANIFEST)
    if not storage.exists(path):
        raise DatasetError(f"{out_dir} is not a feedgpu dataset (no {MANIFEST}); convert it first")
    try:
        data = json.loads(storage.read_bytes(path))
    except (ValueError, UnicodeDecodeError) as e:
        raise DatasetError(f"{path} is not valid JSON ({e}); re-run the conversion") from e
    if not isinstance(data, dict):
        raise DatasetError(f"{path} is not a feedgpu manifest; re-run the conversion")
    legacy_pad = 0
    if data.get("format_version", 1) == 1 and data.get("tokenizer"):
        legacy_pad = legacy_pad_id(out_dir)
    try:
        return Manifest.from_json(data, legacy_pad)
    except DatasetError as e:
        raise DatasetError(f"{path}: {e}; re-run feedgpu convert") from e
