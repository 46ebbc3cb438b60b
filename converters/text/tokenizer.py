"""Tokenizers for conversion: load tokenizer.json or vocab.txt, or train one; never download.

HF `tokenizers` is the reference for every model, and tokenizes every text of one road: BPE,
unigram, any tokenizer the compiled step does not model. BERT WordPiece vocabularies take the
other road, feedgpu's compiled step (`plain_wordpiece`: ASCII from the bytes, other characters
by a table of HF's own answers, `char_table`), with HF for what it declines: a chunk holding a
character its table cannot hold, and a text that may hold an added token's text
(`added_tokens`). `road()` names the road a conversion takes and why.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import operator
import os
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from feedgpu.converters.text.added_tokens import AddedTokens
from feedgpu.converters.text.char_table import describer
from feedgpu.converters.text.native import NO_NATIVE_ENV, native_module
from feedgpu.converters.text.plain_wordpiece import LineIds, PlainWordPiece, flat_ids, splice_ids
from feedgpu.converters.text.tokenizer_spec import TokenizerSpec
from feedgpu.errors import UsageError
from feedgpu.format.pad_tokens import PAD_TOKENS, pad_token_id

logger = logging.getLogger(__name__)
SPECIAL_WORDPIECE = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
SPECIAL_BPE = ("<pad>", "<unk>", "<s>", "</s>")


# Why a package built without its compiled steps takes HF's road (`road`), and how to get them,
# said once a run.
NO_STEP = "this install has no compiled text step (built without a C compiler)"
NO_STEP_HELP = (
    "HF tokenizes every text, about 25x slower; reinstall feedgpu with gcc and the "
    "Python headers (python3-dev) present to get the compiled step"
)

# Tried in this order when a tokenizer has no pad token (GPT-2, Llama-style, BERT's [SEP]).
END_TOKENS = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "[SEP]")


class TextTokenizer:
    """A loaded tokenizer: HF reference, the compiled WordPiece step, identity, saving."""

    def __init__(self, hf: Any) -> None:
        # A tokenizer.json saved with --max-length truncates (`save`): ids are always whole
        # here, truncation is the records' (and the identity the same with or without it).
        hf.no_truncation()
        hf.no_padding()
        self.hf = hf
        config = json.loads(hf.to_str())
        self.config = config
        model = config["model"]
        self.is_wordpiece = model["type"] == "WordPiece"
        normalizer = config.get("normalizer") or {}
        self.lowercase = bool(normalizer.get("lowercase", False))
        self.unk_id = hf.token_to_id(model.get("unk_token") or "[UNK]")
        self.vocab_size = hf.get_vocab_size()
        self._plain: Any = None  # the compiled step; False: not to be had
        self._declined = ""  # why not, when a vocabulary is past its limits
        self._lock = threading.Lock()
        # The compiled step reproduces BERT normalisation + pre-tokenisation + WordPiece only.
        # The model's vocabulary in id order (tokens added beside it are not WordPiece's). The
        # compiled step numbers tokens by position: ids 0..n-1 without a gap (a vocab.txt with a
        # line twice has one: HF keeps the later id).
        vocab = model.get("vocab")  # WordPiece's and BPE's, as the config holds it: get_vocab
        if not isinstance(vocab, dict):  # makes the same dict again (~1.5 ms a start)
            vocab = hf.get_vocab(with_added_tokens=False)
        self._tokens, gapless = _in_id_order(vocab)
        self.fast_capable = (
            self.is_wordpiece
            and normalizer.get("type") == "BertNormalizer"
            and (config.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
            and normalizer.get("strip_accents") in (None, self.lowercase)
            and gapless
        )

    def __getstate__(self) -> dict[str, Any]:
        # The compiled step is rebuilt on demand, never pickled.
        return {**self.__dict__, "_plain": None, "_lock": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    @functools.cached_property
    def identity(self) -> str:
        """Content hash of the tokenizer: the same vocabulary and settings, the same hash."""
        text = json.dumps(self.config, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def special_ids(self) -> tuple[list[int], list[int]]:
        """Ids the tokenizer adds before and after a single sequence."""
        marker = self.hf.encode("", add_special_tokens=True).ids
        if not marker:
            return [], []
        probe = self.hf.encode("a", add_special_tokens=False).ids
        full = self.hf.encode("a", add_special_tokens=True).ids
        at = full.index(probe[0]) if probe and probe[0] in full else len(full)
        return full[:at], full[at + len(probe) :]

    def choose_pad(self, pad_id: int | None = None) -> tuple[int, str | None, str]:
        """The id padding holds, its token, and why it was chosen.

        The tokenizer's pad token when it has one; an explicit pad_id (--pad-id) wins. A
        tokenizer without one (GPT-2 style) pads with its end-of-text token, the usual choice
        there; padding is told apart by `attention_mask` (and `segment_ids` 0 when packed),
        never by its id, so any id is safe, and the choice is recorded in the manifest.

        Raises:
            UsageError: pad_id is not an id of this vocabulary.
        """
        if pad_id is not None:
            if not 0 <= pad_id < self.vocab_size:
                raise UsageError(
                    f"--pad-id {pad_id}: must be an id of the vocabulary (0-{self.vocab_size - 1})"
                )
            return pad_id, self.hf.id_to_token(pad_id), "--pad-id"
        found = pad_token_id(self.config, PAD_TOKENS)
        if found is not None:
            return found, self.hf.id_to_token(found), "the tokenizer's pad token"
        found = pad_token_id(self.config, END_TOKENS)
        if found is not None:
            token = self.hf.id_to_token(found)
            return found, token, f"no pad token: its end-of-text token {token} (masked out)"
        return 0, self.hf.id_to_token(0), "no pad or end-of-text token: id 0 (masked out)"

    def ids(self, texts: Sequence[str]) -> tuple[Any, Any]:
        """HF's ids of texts (no special tokens), concatenated (int64 numpy), and each text's
        count: by the compiled step where this tokenizer takes it, HF for what it declines;
        else HF's alone."""
        step = self.plain_step()
        if step is None:
            return flat_ids(self.encode_reference(texts))
        import numpy as np

        values, lengths, holes = step.ids(texts)
        if len(holes):  # chunks with a character the table cannot hold: HF's, in place
            chunks = [texts[t][start:end] for t, start, end, _ in holes.tolist()]
            more, sizes = flat_ids(self.encode_reference(chunks))
            values = np.insert(values, np.repeat(holes[:, 3], sizes), more)  # in order, stably
            lengths = lengths + np.bincount(holes[:, 0], sizes, len(texts)).astype(np.int64)
        typed = self.typed_added(texts)  # HF's whole
        if not typed:
            return values, lengths
        return splice_ids(values, lengths, typed, self.encode_reference([texts[i] for i in typed]))

    @functools.cached_property
    def _added(self) -> AddedTokens | None:
        normalizer = self.hf.normalizer
        return AddedTokens.of(self.config, normalizer.normalize_str if normalizer else None)

    def typed_added(self, texts: Sequence[str]) -> list[int]:
        """Which texts may hold an added token ("[SEP]" typed in a document), which HF matches
        before splitting and the compiled step does not: HF tokenizes them whole (`AddedTokens`)."""
        return self._added.find(texts) if self._added is not None else []

    def tokens(self) -> list[str]:
        """The model's vocabulary in id order (tokens added beside it are not WordPiece's)."""
        return list(self._tokens)

    def _wordpiece_settings(self) -> tuple[str, int]:
        """The WordPiece model's continuing-piece prefix and longest word (HF's defaults)."""
        model = self.config["model"]
        return model.get("continuing_subword_prefix", "##"), model.get(
            "max_input_chars_per_word", 100
        )

    def plain_step(self) -> PlainWordPiece | None:
        """The compiled step for plain texts, built once; None where it is not to be had (not
        built, FEEDGPU_NO_NATIVE, or a vocabulary without an unknown token)."""
        with self._lock:
            if self._plain is None:
                module = native_module("_wordpiece")
                self._plain = False
                if module is not None and self.fast_capable and self.unk_id is not None:
                    prefix, max_chars = self._wordpiece_settings()
                    vocab = (self.tokens(), prefix, self.unk_id, max_chars, self.lowercase)
                    try:
                        # fast_capable: accents are stripped exactly when text is lowercased
                        describe = describer(self.hf, strips_accents=self.lowercase)
                        self._plain = PlainWordPiece(module, *vocab, describe)
                    except (MemoryError, ValueError) as e:  # a vocabulary past its limits
                        self._declined = f"the compiled step cannot hold this vocabulary ({e})"
            return self._plain or None

    def line_ids(self, field: str) -> LineIds | None:
        """JSON lines parsed and tokenized at once, where the compiled step is built
        (`PlainWordPiece.lines_of`); texts that may hold an added token are left to `ids`."""
        step, added = self.plain_step(), self._added
        if step is None:
            return None
        if added is None:
            return step.lines_of(field)
        # Texts beyond ASCII stay with `ids` (HF's, whole) where an added token could hide in
        # them unseen by the byte search: one HF matches after normalising (an accented
        # spelling, a compatibility form).
        return step.lines_of(field, added.contents, beyond_ascii=not added.normalized)

    def road(self) -> tuple[str, str]:
        """The road this tokenizer's texts take, and why: ("compiled", what it declines) or
        ("hf", why not the compiled step)."""
        if not self.fast_capable:
            model = self.config["model"]["type"]
            return "hf", f"a {model} tokenizer: the compiled step models BERT WordPiece only"
        if self.plain_step() is not None:
            return "compiled", "BERT WordPiece; added tokens' texts and rare characters by HF"
        if native_module("_wordpiece", honour_env=False) is None:
            return "hf", NO_STEP
        if os.environ.get(NO_NATIVE_ENV, "") not in ("", "0"):
            return "hf", f"{NO_NATIVE_ENV} is set"
        return "hf", self._declined or "no unknown token in this vocabulary"

    def encode_reference(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids without special tokens, by HF (its own threads, in batches); without
        offsets where this HF can (`encode_batch_fast`, ~15% faster: nobody reads them)."""
        encode = getattr(self.hf, "encode_batch_fast", self.hf.encode_batch)
        return [e.ids for e in encode(list(texts), add_special_tokens=False)]

    def save(self, out_dir: str, max_length: int | None = None) -> list[str]:
        """Write tokenizer.json (and vocab.txt for WordPiece) beside the shards; with
        max_length (the stored documents truncated), truncating as they were, so its
        `encode(text).ids` are the stored ids."""
        from feedgpu import storage

        names = ["tokenizer.json"]
        config = self.hf.to_str()
        if max_length is not None:
            from tokenizers import Tokenizer

            truncating = Tokenizer.from_str(config)
            truncating.enable_truncation(max_length)
            config = truncating.to_str()
        storage.write_atomic(os.path.join(out_dir, "tokenizer.json"), config.encode())
        if self.is_wordpiece:
            vocab = self.tokens()
            storage.write_atomic(
                os.path.join(out_dir, "vocab.txt"), "".join(f"{t}\n" for t in vocab).encode()
            )
            names.append("vocab.txt")
        return names


def _in_id_order(vocab: dict[str, int]) -> tuple[list[str], bool]:
    """A vocabulary's tokens in id order, and whether its ids are 0..n-1 without a gap. HF
    writes WordPiece's in id order: checked, not sorted (0.5 ms of a start)."""
    ids = list(vocab.values())
    if ids == list(range(len(ids))):
        return list(vocab), True
    ordered = sorted(vocab.items(), key=operator.itemgetter(1))
    return [token for token, _ in ordered], [i for _, i in ordered] == list(range(len(ids)))


def _bert_post_processor(hf: Any) -> None:
    from tokenizers.processors import TemplateProcessing

    cls_id, sep_id = hf.token_to_id("[CLS]"), hf.token_to_id("[SEP]")
    if cls_id is not None and sep_id is not None:
        hf.post_processor = TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
        )


def load_tokenizer(spec: TokenizerSpec, training_texts: Iterable[str] = ()) -> TextTokenizer:
    """Load or train the tokenizer a spec names (training_texts: the documents to train on).

    Raises:
        UsageError: unreadable or invalid tokenizer files.
    """
    from tokenizers import Tokenizer
    from tokenizers.implementations import BertWordPieceTokenizer, ByteLevelBPETokenizer

    try:
        if spec.kind == "file":
            return TextTokenizer(Tokenizer.from_file(str(spec.path)))
        if spec.kind == "vocab":
            bert = BertWordPieceTokenizer(str(spec.path), lowercase=spec.lowercase)
            # The Tokenizer it wraps, where it is to be had: the same one from_str(to_str())
            # makes, without the ~4 ms of that round trip (an 8k vocabulary) on the start of
            # every conversion.
            hf = getattr(bert, "_tokenizer", None)
            if not isinstance(hf, Tokenizer):
                hf = Tokenizer.from_str(bert.to_str())
            _bert_post_processor(hf)
            return TextTokenizer(hf)
    except Exception as e:  # tokenizers raises plain Exception subclasses for bad files
        raise UsageError(f"--tokenizer {spec.path}: cannot load ({e})") from e
    empty = UsageError("cannot train a tokenizer: the train split has no documents")
    if spec.model == "wordpiece":
        # Streamed (the corpus is never held in memory) when training_texts can be read again,
        # as the converter's can; a one-shot iterator is kept in a list for the two passes.
        again = iter(training_texts) is not training_texts
        from feedgpu.converters.text.wordpiece_vocab import learn_wordpiece

        vocab = learn_wordpiece(
            training_texts if again else list(training_texts),
            spec.vocab_size,
            spec.lowercase,
            SPECIAL_WORDPIECE,
        )
        if len(vocab) <= len(SPECIAL_WORDPIECE):
            raise empty
        bert = BertWordPieceTokenizer({t: i for i, t in enumerate(vocab)}, lowercase=spec.lowercase)
        hf = Tokenizer.from_str(bert.to_str())
        _bert_post_processor(hf)
    else:
        from tokenizers.processors import TemplateProcessing

        stream = iter(training_texts)
        first = next(stream, None)
        if first is None:
            raise empty
        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(
            itertools.chain([first], stream),
            vocab_size=spec.vocab_size,
            min_frequency=2,
            special_tokens=list(SPECIAL_BPE),
        )
        hf = Tokenizer.from_str(bpe.to_str())
        hf.post_processor = TemplateProcessing(
            single="<s> $A </s>",
            special_tokens=[("<s>", hf.token_to_id("<s>")), ("</s>", hf.token_to_id("</s>"))],
        )
    return TextTokenizer(hf)
