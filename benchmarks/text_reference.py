"""tensorflow-text's FastBertTokenizer for a feedgpu tokenizer's vocabulary: the benchmarks'
reference for tokenizing in TensorFlow (what a user could run on the fly), never a converter's
road. It comes with the test extra (`pip install -e ".[test]"`)."""

from __future__ import annotations

from typing import Any


def fast_bert(tokenizer: Any) -> Any:
    """A `FastBertTokenizer` (int64 ids) of a BERT WordPiece `TextTokenizer`: its vocabulary,
    continuing-piece prefix, longest word, unknown token and casing."""
    import tensorflow as tf
    import tensorflow_text as tf_text

    model = tokenizer.config["model"]
    return tf_text.FastBertTokenizer(
        vocab=tokenizer.tokens(),
        suffix_indicator=model.get("continuing_subword_prefix", "##"),
        max_bytes_per_word=model.get("max_input_chars_per_word", 100),
        token_out_type=tf.int64,
        unknown_token=model.get("unk_token", "[UNK]"),
        lower_case_nfd_strip_accents=tokenizer.lowercase,
    )
