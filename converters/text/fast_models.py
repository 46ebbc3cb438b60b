"""tensorflow-text's fast WordPiece and BERT normaliser models, built once and kept on disk.

`FastBertTokenizer`, given a vocabulary, builds both models (flatbuffers) each time it is made,
then copies each into a tensor through a Python list of its bytes. At the start of every
conversion, with the GIL held, that took about 0.5 s for an 8k or a 30k vocabulary and more for
bigger ones (benchmarks/RESULTS.md, "Issue 29, fourth session"). Here each model is built once,
kept in the user's cache folder under a key of everything it depends on (tensorflow-text's
version, the vocabulary, the settings), checked by a digest of key and bytes when read back,
and made into a tensor from numpy. Delete the folder to clear it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from feedgpu import storage

logger = logging.getLogger(__name__)
CACHE_ENV = "FEEDGPU_CACHE_DIR"


def cache_dir() -> str | None:
    """Where built models are kept: $FEEDGPU_CACHE_DIR (set but empty, or a URL: nowhere),
    else $XDG_CACHE_HOME/feedgpu, else ~/.cache/feedgpu. A local folder only: a model is read
    back at every conversion's start."""
    if CACHE_ENV in os.environ:
        folder = os.environ[CACHE_ENV]
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
        folder = os.path.join(base, "feedgpu")
    if not folder or "://" in folder:
        return None
    return os.path.abspath(os.path.expanduser(folder))


def fast_bert_tokenizer(
    vocab: Sequence[str], suffix: str, max_bytes: int, unknown: str, lowercase: bool
) -> Any:
    """tensorflow-text's `FastBertTokenizer` (int64 ids) from kept or freshly built models."""
    import numpy as np
    import tensorflow as tf
    import tensorflow_text as tf_text

    from feedgpu.tf_private import fast_model_builders

    try:
        build_wordpiece, build_normalizer = fast_model_builders()
    except (ImportError, AttributeError):  # tensorflow-text moved them: its own way, slower
        return tf_text.FastBertTokenizer(
            vocab=list(vocab),
            suffix_indicator=suffix,
            max_bytes_per_word=max_bytes,
            token_out_type=tf.int64,
            unknown_token=unknown,
            lower_case_nfd_strip_accents=lowercase,
        )
    version = tf_text.__version__
    # vocab, max_bytes_per_word, suffix_indicator, unknown_token, no_pretokenization and
    # support_detokenization (FastBertTokenizer's defaults for the last two)
    args = [list(vocab), max_bytes, suffix, unknown, False, False]
    wordpiece = _kept(["wordpiece", version, *args], lambda: build_wordpiece(*args))
    normalizer = _kept(["normalizer", version, lowercase], lambda: build_normalizer(lowercase))
    return tf_text.FastBertTokenizer(
        token_out_type=tf.int64,
        fast_wordpiece_model_buffer=tf.constant(np.frombuffer(wordpiece, np.uint8)),
        fast_bert_normalizer_model_buffer=tf.constant(np.frombuffer(normalizer, np.uint8)),
    )


def _kept(key: list[Any], build: Callable[[], bytes]) -> bytes:
    """The model the key names: read from the cache folder if kept there intact (its digest,
    of key and bytes, checks out), else built, and kept where the folder can be written."""
    folder = cache_dir()
    if folder is None:
        return bytes(build())
    named = json.dumps(key, ensure_ascii=False).encode()
    path = os.path.join(folder, "tensorflow-text", f"{key[0]}-{_digest(named).hex()[:32]}.fb")
    try:
        with open(path, "rb") as f:
            kept = f.read()
        if len(kept) > 32 and _digest(named, kept[32:]) == kept[:32]:
            return kept[32:]
        logger.debug("%s: damaged, built again", path)
    except OSError:
        pass
    body = bytes(build())
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        storage.write_atomic(path, _digest(named, body) + body)
    except OSError as e:  # a read-only home: built each time, as without a cache
        logger.debug("could not keep %s: %s", path, e)
    return body


def _digest(*parts: bytes) -> bytes:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


@dataclass(frozen=True)
class FastGraphs:
    """The tokenizer's graphs, traced (`fast_graphs`).

    Attributes:
        whole: (texts, known plain) -> (ids, counts, plain as far as RE2 can tell).
        plain: plain texts -> (ids, counts); None where tensorflow-text's step is out of reach.
    """

    whole: Any
    plain: Any

    def ids(
        self, texts: Sequence[str], plain: Sequence[bool] | None
    ) -> tuple[Any, Any, list[bool]]:
        """A batch's ids concatenated and each text's count (int64 numpy), one graph call; and
        which texts are cleared as plain. plain: texts known to be plain, if known."""
        import tensorflow as tf

        batch = tf.constant(list(texts), tf.string)
        if self.plain is not None and plain is not None and all(plain):
            values, lengths = self.plain(batch)
            return values.numpy(), lengths.numpy(), [True] * len(texts)
        known = tf.constant(plain if plain is not None else [False] * len(texts), tf.bool)
        values, lengths, cleared = self.whole(batch, known)
        return values.numpy(), lengths.numpy(), cleared.numpy().tolist()


def fast_graphs(fast: Any, lowercase: bool) -> FastGraphs:
    """The tokenizer's graphs for a FastBertTokenizer, traced.

    Batches of plain texts only (printable ASCII, tab, CR, LF) skip BERT's normaliser: for
    them it only lowercases (when the vocabulary is uncased) and turns tab, CR and LF into
    spaces, which WordPiece's own split treats alike. tf.strings.lower and the WordPiece step
    alone give the same ids faster (benchmarks/RESULTS.md, "plain marks"). The step is
    FastBertTokenizer's own (private: without it, every batch takes the whole tokenizer). A
    mixed batch takes the whole tokenizer too: splitting it and merging the ragged results
    back cost more than the normaliser. (Where feedgpu's compiled step is built, plain texts
    never reach these graphs: `plain_wordpiece`.)
    """
    import tensorflow as tf

    from feedgpu.converters.text.redo import cleared_in_graph
    from feedgpu.tf_private import fast_wordpiece_step

    words: Any = fast_wordpiece_step(fast)
    texts = tf.TensorSpec([None], tf.string)

    @tf.function(input_signature=[texts, tf.TensorSpec([None], tf.bool)], autograph=False)
    def tokenize(batch: Any, known: Any) -> tuple[Any, Any, Any]:
        ragged = fast.tokenize(batch)
        # Only the texts not known to be plain are scanned (RE2 costs a share of tokenizing);
        # the ones it clears are not checked in Python (`needs_reference`).
        unknown = tf.where(tf.logical_not(known))
        checked = cleared_in_graph(tf.gather_nd(batch, unknown), lowercase)
        plain = tf.tensor_scatter_nd_update(known, unknown, checked)
        return ragged.flat_values, ragged.row_lengths(), plain

    @tf.function(input_signature=[texts], autograph=False)
    def tokenize_plain(batch: Any) -> tuple[Any, Any]:
        ragged = words.tokenize(tf.strings.lower(batch) if lowercase else batch)
        return ragged.flat_values, ragged.row_lengths()

    # Traced here, once, under the caller's lock: traced lazily, the first calls from the
    # tokenizer threads, arriving together, each traced it again (TensorFlow's "5 out of the
    # last 5 calls ... triggered tf.function retracing" warning, and the time).
    tokenize.get_concrete_function()
    if words is None:
        return FastGraphs(tokenize, None)
    tokenize_plain.get_concrete_function()
    return FastGraphs(tokenize, tokenize_plain)
