"""What a text conversion is asked to do (`TextOptions`) and what it plans for each input
file (`TextSource`): a leaf the planner, the chunk stage and the batcher all read."""

from __future__ import annotations

from dataclasses import dataclass

from feedgpu.converters.listing import SourceFile
from feedgpu.converters.text.sources import MAX_DOCUMENT_MB, ReadOptions
from feedgpu.errors import UsageError


@dataclass(frozen=True)
class TextOptions:
    """Options that change the bytes written; all of them go into the manifest.

    Attributes:
        tokenizer: tokenizer.json, vocab.txt, or train:wordpiece|bpe:SIZE.
        lowercase: fold case and strip accents (vocab.txt, trained WordPiece); None decides
            (`TokenizerSpec.parse`: trained vocabularies keep case, a vocab.txt as its tokens).
        doc_per_line: each line of a .txt file is a document.
        text_field: JSON key of the text in .jsonl files.
        label_field: JSON key of the label in .jsonl files.
        folder_labels: label .txt documents by their class folder (SRC/[SPLIT/]CLASS/x.txt).
        encoding_errors: "skip" or "replace" for bytes that are not UTF-8.
        max_length: truncate each example to this many ids (special tokens included).
        stride: with max_length, split long documents into windows overlapping by this much.
        pack: concatenate documents into sequences of exactly this many ids.
        special: add the tokenizer's special tokens (CLS/SEP, BOS/EOS).
        pad_id: the id padding holds (None: the tokenizer's pad token, else its end-of-text
            token; see `TextTokenizer.choose_pad`).
        split: hash split of documents when the source has no split folders.
        seed: seeds the assignment of documents to shards.
        shard_size_mb: target shard size.
        num_shards: shards per split, overriding shard_size_mb.
        chunk_mb: input read per resumable unit.
        name: dataset name (TFDS-safe).
        index: write each shard's record index beside it (DALI, PyTorch tfrecord readers).
        docs_per_record: documents a record holds when each document is one example (not
            with stride or pack): N, or None ("auto": blocks of about 4k ids for short
            documents, one a record for longer ones; `blocks.choose_per_record`); 1 writes
            format 2's layout.
        encoding: of .txt files, any whose bytes for ASCII are ASCII's (cp1251, koi8-r,
            latin-1, shift_jis...); a JSON line is UTF-8 by definition.
        max_document_mb: a document (a line, or a .txt file read whole) over this is skipped
            unread ("document too large"), as image bombs are: HF's tokenizers hold ~75-130
            bytes a character of one text (2 MB of text: ~0.15-0.25 GB).
    """

    tokenizer: str
    lowercase: bool | None = None
    doc_per_line: bool = False
    text_field: str = "text"
    label_field: str | None = None
    folder_labels: bool = False
    encoding_errors: str = "skip"
    encoding: str = "utf-8"
    max_length: int | None = None
    stride: int | None = None
    pack: int | None = None
    special: bool = True
    pad_id: int | None = None
    split: str | None = None
    seed: int = 0
    shard_size_mb: float = 128
    num_shards: int | None = None
    chunk_mb: float = 32
    name: str | None = None
    index: bool = False
    docs_per_record: int | None = None
    max_document_mb: float = MAX_DOCUMENT_MB

    def __post_init__(self) -> None:
        if self.encoding_errors not in ("skip", "replace"):
            raise UsageError(f"--encoding-errors {self.encoding_errors!r}: choose skip or replace")
        try:  # ASCII's bytes as ASCII: newlines split lines, JSON and markup read as written
            ascii_bytes = b"\n {}<>[]az09".decode(self.encoding) == "\n {}<>[]az09"
        except UnicodeDecodeError:
            ascii_bytes = False
        except LookupError:
            raise UsageError(f"--encoding {self.encoding!r}: no such encoding") from None
        if not ascii_bytes:
            raise UsageError(
                f"--encoding {self.encoding}: its bytes for ASCII are not ASCII's (UTF-16 and "
                "UTF-32 are not taken); convert the files to UTF-8 first (iconv -t utf-8)"
            )
        if self.max_length is not None and self.max_length < 4:
            raise UsageError(f"--max-length {self.max_length}: must be at least 4")
        if self.stride is not None:
            if self.max_length is None:
                raise UsageError("--stride needs --max-length (the window size)")
            if not 0 <= self.stride < self.max_length // 2:
                raise UsageError(f"--stride {self.stride}: must be below half of --max-length")
        if self.pack is not None:
            if self.pack < 8:
                raise UsageError(f"--pack {self.pack}: must be at least 8")
            if self.max_length is not None:
                raise UsageError("--pack and --max-length exclude each other")
        for flag, value in (("--shard-size-mb", self.shard_size_mb), ("--chunk-mb", self.chunk_mb)):
            if value <= 0:
                raise UsageError(f"{flag} {value}: must be positive")
        if self.max_document_mb < 1:
            raise UsageError(f"--max-document-mb {self.max_document_mb}: must be at least 1")
        if self.num_shards is not None and self.num_shards < 1:
            raise UsageError(f"--num-shards {self.num_shards}: must be at least 1")
        if self.docs_per_record is not None and not 1 <= self.docs_per_record <= 65536:
            raise UsageError(
                f"--docs-per-record {self.docs_per_record}: use a number from 1 to 65536, or auto"
            )
        if self.docs_per_record not in (None, 1) and (self.pack or self.stride is not None):
            raise UsageError(
                "--docs-per-record: windows (--stride) and packed sequences (--pack) are one "
                "a record; leave it out"
            )

    def check_room(self, extra: int) -> None:
        """--max-length (and --stride) against the extra special ids the tokenizer adds to
        every example: no room left for a document's own ids, or windows that would not
        advance, is refused before anything is tokenized, not found by a tokenizer thread as
        a traceback (or, on the compiled path, taken for no truncation at all).

        Raises:
            UsageError: --max-length or --stride leaves no room.
        """
        if self.max_length is None or not self.special:
            return
        room = self.max_length - extra
        if room < 1:
            raise UsageError(
                f"--max-length {self.max_length}: the tokenizer adds {extra} special tokens to "
                f"each example, leaving no room for its text; use at least {extra + 1}, or "
                "--no-special"
            )
        if self.stride is not None and self.stride >= room:
            raise UsageError(
                f"--stride {self.stride}: windows of {room} ids (--max-length less the "
                f"tokenizer's {extra} special tokens) would not advance; use a stride below "
                f"{room}"
            )

    @property
    def blocks(self) -> bool:
        """Whether records hold blocks of documents (a list of lengths, ids concatenated)."""
        return self.pack is None and self.stride is None and self.docs_per_record != 1

    @property
    def read(self) -> ReadOptions:
        """How files become documents."""
        return ReadOptions(
            self.doc_per_line,
            self.text_field,
            self.label_field,
            self.encoding_errors,
            int(self.max_document_mb * (1 << 20)),
            self.encoding,
        )


@dataclass(frozen=True)
class TextSource:
    """A planned input file, or a part of one (a chunk of a big file): where its documents go.

    Attributes:
        span: the part, (first byte, end byte, number of its first line), its bytes whole
            lines; None for the whole file.
    """

    file: SourceFile
    split: str | None  # None: each document is hash-split
    label: str | None  # the class folder, when labelled by folder
    span: tuple[int, int, int] | None = None
