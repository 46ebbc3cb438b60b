"""`feedgpu convert text`: stored ids equal the reference tokenizer's, whatever the path taken."""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
from pathlib import Path

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from conftest import shard_examples
from tokenizers import Tokenizer

from feedgpu import DatasetError, UsageError, read_manifest
from feedgpu.converters.text.convert import TextOptions, convert_text
from feedgpu.converters.text.tokenizer import TextTokenizer


def source_text(src: Path, doc_id: str) -> str:
    return (src / doc_id).read_text(encoding="utf-8")


def test_trained_wordpiece_round_trip_equals_hf_on_every_document(
    tmp_path: Path, text_folder: Path
) -> None:
    out = tmp_path / "out"
    options = TextOptions(tokenizer="train:wordpiece:400", folder_labels=True)
    report = convert_text(str(text_folder), str(out), options, workers=2, quiet=True)
    manifest = read_manifest(str(out)).to_json()
    assert report.examples_by_split == {"train": 60, "test": 20}
    assert manifest["skipped"] == {"binary file": 1, "empty document": 1, "not UTF-8": 1}
    assert manifest["label_names"] == ["neg", "pos"]
    saved = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert (out / "vocab.txt").read_text().splitlines()[:5] == [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
    ]
    assert TextTokenizer(saved).identity == manifest["tokenizer"]["identity"]
    assert manifest["tokenizer"]["road"] == "compiled"
    assert manifest["tokenizer"]["mismatch_rate"] == 0.0
    odd = 0
    for ex in shard_examples(out):
        doc_id = ex["doc_id"][0].decode()
        text = source_text(text_folder, doc_id)
        assert ex["input_ids"] == saved.encode(text).ids, doc_id  # CLS ... SEP, exactly HF's
        assert ex["length"] == [len(ex["input_ids"])]
        assert manifest["label_names"][ex["label"][0]] == doc_id.split("/")[1]
        odd += any(w in text for w in ("ﬁne", "Ⅻ", "\x07", "x" * 150))
    assert odd > 0, "the corpus must exercise the documents routed to HF"
    stats = manifest["text"]
    assert stats["documents"] == 80
    assert stats["tokens"] == sum(len(ex["input_ids"]) for ex in shard_examples(out))
    assert 0 < stats["padding_waste_fixed"]["512"] < 1 and stats["length_counts"]


def tfds_documents(record: dict) -> tf.data.Dataset:
    """The README's recipe: a TFDS example (a block of documents, or one) -> one element a
    document."""
    rest = {k: tf.reshape(v, [-1]) for k, v in record.items() if k != "input_ids"}
    ids = tf.RaggedTensor.from_row_lengths(record["input_ids"], rest["length"])
    return tf.data.Dataset.from_tensor_slices({**rest, "input_ids": ids})


def test_docs_per_record_auto_stores_short_documents_in_blocks(tmp_path: Path) -> None:
    """auto decides by the first documents' mean length: short ones in blocks (format 3),
    long ones one a record (format 2's layout and version)."""
    from feedgpu.converters.text.records import SHORT_IDS

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "the", "dog", "ran", "far"]
    short = [" ".join(words[: 3 + i % 5]) for i in range(300)]
    (corpus / "short.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in short))
    long = corpus.parent / "long"
    long.mkdir()
    text = " ".join(words * (SHORT_IDS // len(words) + 2))  # over SHORT_IDS ids a document
    (long / "long.jsonl").write_text("".join(json.dumps({"text": text}) + "\n" for _ in range(30)))
    found = {}
    for name, src in (("short", corpus), ("long", long)):
        out = tmp_path / f"out-{name}"
        convert_text(str(src), str(out), TextOptions(tokenizer="train:wordpiece:100"), quiet=True)
        manifest = read_manifest(str(out))
        records = sum(s.num_records for s in manifest.split("train").shards)
        found[name] = (manifest.schema.blocks, manifest.format_version, records)
        # auto recorded only when it chose blocks: otherwise the bytes are as before it existed
        assert manifest.options.get("docs_per_record") == ("auto" if name == "short" else None)
    assert found["short"][:2] == (True, 3) and found["short"][2] < 300
    assert found["long"] == (False, 2, 30)
    # A document a record asked for is what auto chose (and what came before it): the same
    # bytes, so the same dataset, found complete rather than refused as other options.
    explicit = TextOptions(tokenizer="train:wordpiece:100", docs_per_record=1)
    assert convert_text(str(long), str(tmp_path / "out-long"), explicit, quiet=True).already_done
    with pytest.raises(UsageError, match="--docs-per-record: windows"):
        TextOptions(tokenizer="vocab.txt", pack=16, docs_per_record=4)


def test_auto_s_sample_stops_once_documents_are_known_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Long documents decide the layout after a few dozen (batches of 4, 8, 16...: their ids
    alone put the sample's mean over SHORT_IDS); short ones are counted in full."""
    from feedgpu.converters.listing import SourceFile
    from feedgpu.converters.text.convert import _mean_ids
    from feedgpu.converters.text.options import TextSource
    from feedgpu.converters.text.records import SAMPLE_DOCUMENTS, SHORT_IDS, choose_per_record
    from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer

    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "cat"]))
    options = TextOptions(tokenizer=str(tmp_path / "vocab.txt"))
    tok = load_tokenizer(TokenizerSpec.parse(options.tokenizer))
    seen: list[int] = []
    from feedgpu.converters.text import convert as text_convert

    real = text_convert._id_counts
    monkeypatch.setattr(
        text_convert, "_id_counts", lambda tok, texts: seen.append(len(texts)) or real(tok, texts)
    )
    for words, expected in ((2000, None), (30, 32.0)):
        path = tmp_path / f"{words}.jsonl"
        path.write_text((json.dumps({"text": "cat " * words}) + "\n") * 400)
        sources = [TextSource(SourceFile(path.name, str(path), 0, 0), None, None)]
        seen.clear()
        mean = _mean_ids(sources, options, tok)
        if expected is None:  # 2,002 ids a document: 17 decide (over 128 x 256 ids), in 4+8+16
            assert sum(seen) == 28 and mean == 2002 and choose_per_record(mean) == 1
            assert sum(seen) * 2002 > SHORT_IDS * SAMPLE_DOCUMENTS
        else:
            assert sum(seen) == SAMPLE_DOCUMENTS and mean == expected
            assert choose_per_record(mean) is None


def test_auto_s_sample_counts_hf_s_ids_and_a_finished_run_needs_no_tensorflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The layout's sample counts HF's ids (a word over 100 bytes but not 100 characters, 60
    ids in HF; "…" one id); and re-running a finished conversion decides it without
    importing TensorFlow."""
    import subprocess
    import sys

    from feedgpu.converters.listing import SourceFile
    from feedgpu.converters.text.convert import _mean_ids
    from feedgpu.converters.text.options import TextSource
    from feedgpu.converters.text.tokenizer import TokenizerSpec, load_tokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "cat", ".", "…", "ก", "##ก"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    texts = ["a cat", "ก" * 60, "a cat…", "cat " * 40] * 20
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    options = TextOptions(tokenizer=str(tmp_path / "vocab.txt"))
    tok = load_tokenizer(TokenizerSpec.parse(options.tokenizer))
    assert tok.fast_capable
    sources = [TextSource(SourceFile("a.jsonl", str(src / "a.jsonl"), 0, 0), None, None)]
    hf = [len(ids) + 2 for ids in tok.encode_reference(texts)]
    assert _mean_ids(sources, options, tok) == pytest.approx(sum(hf) / len(hf))
    out = tmp_path / "out"
    convert_text(str(src), str(out), options, quiet=True)
    again = (
        "import sys; from feedgpu import convert_text; from feedgpu.converters.text.convert "
        f"import TextOptions; done = convert_text({str(src)!r}, {str(out)!r}, "
        f"TextOptions(tokenizer={options.tokenizer!r}), quiet=True).already_done; "
        "print(done, 'tensorflow' in sys.modules)"
    )
    found = subprocess.run([sys.executable, "-c", again], capture_output=True, text=True)
    assert found.stdout.split() == ["True", "False"], found.stderr[-2000:]


def test_an_interrupted_run_of_another_layout_is_discarded_not_mixed(
    tmp_path: Path, monkeypatch
) -> None:
    """auto decides the layout anew on each run: what a run that decided otherwise left (an
    older feedgpu's rule) must not join this run's records, shards or chunks. The recorded
    options say which it chose (blocks record docs_per_record "auto"), so the run is another."""
    from feedgpu.converters.text import convert as text_convert
    from feedgpu.converters.text.pieces import PieceShardBody

    src = tmp_path / "src"
    src.mkdir()
    lines = [json.dumps({"text": f"a cat {i % 3}"}) for i in range(400)]
    (src / "a.jsonl").write_text("\n".join(lines) + "\n")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "cat", "0", "1"]) + "\n")
    options = TextOptions(tokenizer=str(vocab), num_shards=3)
    out = tmp_path / "out"
    real_prepared, assembled = PieceShardBody.prepared, []

    def one_shard_then_killed(self, task):  # a local run's shards are its files, renamed
        if assembled:
            raise KeyboardInterrupt  # as if killed after the first shard
        assembled.append(task.filename)
        return real_prepared(self, task)

    with monkeypatch.context() as patch:  # a run whose rule chose a document a record
        patch.setattr(text_convert, "choose_per_record", lambda mean: 1)
        patch.setattr(PieceShardBody, "prepared", one_shard_then_killed)
        with pytest.raises(KeyboardInterrupt):
            convert_text(str(src), str(out), options, quiet=True)
    assert (out / assembled[0]).exists()  # a finished shard of the other layout was left
    convert_text(str(src), str(out), options, quiet=True)  # auto: blocks
    clean = tmp_path / "clean"
    convert_text(str(src), str(clean), options, quiet=True)
    assert read_manifest(str(out)).schema.blocks
    names = sorted(p.name for p in clean.iterdir())
    assert names == sorted(p.name for p in out.iterdir())
    for name in names:
        assert (out / name).read_bytes() == (clean / name).read_bytes(), name


def test_tfds_reads_text_dataset(tmp_path: Path, text_folder: Path) -> None:
    """TFDS reads both layouts: blocks (an example a record, its features lists, the README's
    recipe gives documents) and one document a record (with (ids, label) pairs)."""
    out = tmp_path / "out"
    options = TextOptions(
        tokenizer="train:wordpiece:300", folder_labels=True, docs_per_record=3, num_shards=2
    )
    convert_text(str(text_folder), str(out), options, quiet=True)
    builder = tfds.builder_from_directory(str(out))
    assert builder.info.features["label"].feature.names == ["neg", "pos"]  # a Sequence
    blocks = list(builder.as_dataset(split="test"))
    assert sum(split.num_records for split in read_manifest(str(out)).split("test").shards) == 7
    assert len(blocks) == 7 and builder.info.splits["test"].num_examples == 7  # 20 documents
    docs = list(builder.as_dataset(split="test").flat_map(tfds_documents))
    by_id = {ex["doc_id"][0].decode(): ex for ex in shard_examples(out)}
    assert len(docs) == 20
    for doc in docs:
        mine = by_id[doc["doc_id"].numpy().decode()]
        assert doc["input_ids"].numpy().tolist() == mine["input_ids"]
        assert int(doc["label"]) == mine["label"][0]

    one = tmp_path / "one"
    convert_text(
        str(text_folder), str(one), dataclasses.replace(options, docs_per_record=1), quiet=True
    )
    builder = tfds.builder_from_directory(str(one))
    rows = list(builder.as_dataset(split="test"))
    assert len(rows) == 20
    assert rows[0]["input_ids"].shape.rank == 1 and int(rows[0]["input_ids"][0]) == 2  # [CLS]
    assert builder.info.features["label"].names == ["neg", "pos"]
    ids, labels = next(iter(builder.as_dataset(split="train", as_supervised=True)))
    assert ids.dtype.name == "int64" and labels.shape == ()
    docs = {  # the README's recipe, the same on this layout
        d["doc_id"].numpy().decode(): d["input_ids"].numpy().tolist()
        for d in builder.as_dataset(split="test").flat_map(tfds_documents)
    }
    mine = {ex["doc_id"][0].decode(): ex["input_ids"] for ex in shard_examples(one)}
    assert len(docs) == 20 and all(mine[doc_id] == ids for doc_id, ids in docs.items())


def test_jsonl_gzip_and_lines_with_every_document_accounted_for(
    tmp_path: Path, jsonl_corpus: Path
) -> None:
    out = tmp_path / "out"
    options = TextOptions(
        tokenizer="train:bpe:300",
        label_field="label",
        doc_per_line=True,
        split="train=0.8,validation=0.2",
    )
    report = convert_text(str(jsonl_corpus), str(out), options, quiet=True)
    manifest = read_manifest(str(out)).to_json()
    skipped = [json.loads(line) for line in (out / "skipped.jsonl").read_text().splitlines()]
    reasons = {(s["path"], s["reason"]) for s in skipped}
    assert ("part-0.jsonl:7", "malformed JSON") in reasons  # line 6 + the inserted bad-byte line
    assert ("part-0.jsonl:2", "not UTF-8") in reasons
    assert ("part-0.jsonl:11", "no text field") in reasons
    assert ("part-0.jsonl:14", "empty document") in reasons
    # notes.txt has no label: with --label-field, its two lines are skipped, counted
    assert ("notes.txt:1", "no label") in reasons and ("notes.txt:3", "no label") in reasons
    total_docs = 61 + 20 + 2
    assert manifest["text"]["documents"] + report.num_skipped == total_docs
    assert set(report.examples_by_split) == {"train", "validation"}
    saved = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert manifest["tokenizer"]["road"] == "hf" and manifest["tokenizer"]["model"] == "BPE"
    by_id = {ex["doc_id"][0].decode(): ex["input_ids"] for ex in shard_examples(out)}
    compared = 0
    for number, line in enumerate((jsonl_corpus / "part-0.jsonl").read_bytes().splitlines(), 1):
        key = f"part-0.jsonl:{number}"
        if key in by_id:
            assert by_id[key] == saved.encode(json.loads(line)["text"]).ids  # <s> ... </s>
            compared += 1
    # part-0 holds 61 lines, 4 of them skipped: every kept one was compared (none by chance)
    assert compared == 61 - 4, compared


def test_packing_conserves_every_token(tmp_path: Path, text_folder: Path) -> None:
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    base = dict(tokenizer="train:wordpiece:300", num_shards=2)
    convert_text(str(text_folder), str(plain), TextOptions(**base), quiet=True)
    convert_text(str(text_folder), str(packed), TextOptions(**base, pack=64), quiet=True)
    stored = [ex for ex in shard_examples(packed)]
    assert all(len(ex["input_ids"]) == len(ex["segment_ids"]) == 64 for ex in stored)
    real = sum(1 for ex in stored for s in ex["segment_ids"] if s > 0)
    assert real == sum(len(ex["input_ids"]) for ex in shard_examples(plain))
    for ex in stored:  # positions restart with each segment; padding is segment 0, id 0
        for i in range(1, 64):
            seg, prev = ex["segment_ids"][i], ex["segment_ids"][i - 1]
            if seg and seg == prev:
                assert ex["positions"][i] == ex["positions"][i - 1] + 1
            if not seg:
                assert ex["input_ids"][i] == 0
    assert read_manifest(str(packed)).to_json()["features"][0]["name"] == "input_ids"


def test_max_length_truncates_and_stride_windows_cover(tmp_path: Path, text_folder: Path) -> None:
    base = dict(tokenizer="train:wordpiece:300", folder_labels=True)
    cut, win = tmp_path / "cut", tmp_path / "win"
    convert_text(str(text_folder), str(cut), TextOptions(**base, max_length=32), quiet=True)
    convert_text(
        str(text_folder), str(win), TextOptions(**base, max_length=32, stride=8), quiet=True
    )
    saved = Tokenizer.from_file(str(win / "tokenizer.json"))  # windows: it never truncates
    truncating = Tokenizer.from_file(str(cut / "tokenizer.json"))
    cut_short = 0
    for ex in shard_examples(cut):
        text = source_text(text_folder, ex["doc_id"][0].decode())
        full = saved.encode(text).ids
        assert len(ex["input_ids"]) <= 32 and ex["input_ids"] == truncating.encode(text).ids
        assert ex["input_ids"] == (full if len(full) <= 32 else [*full[:31], full[-1]])
        cut_short += len(full) > 32
    assert cut_short  # some were truncated
    windows: dict[str, list] = {}
    for ex in shard_examples(win):
        windows.setdefault(ex["doc_id"][0].decode(), []).append(ex)
    for doc_id, parts in windows.items():
        parts.sort(key=lambda e: e["window"][0])
        content = saved.encode(source_text(text_folder, doc_id)).ids[1:-1]
        rebuilt = parts[0]["input_ids"][1:-1]
        for part in parts[1:]:
            rebuilt += part["input_ids"][1:-1][8:]  # each window repeats the last 8 ids
        assert rebuilt == content, doc_id


def test_deterministic_bytes_whatever_the_thread_count(tmp_path: Path, text_folder: Path) -> None:
    options = TextOptions(tokenizer="train:wordpiece:300", folder_labels=True, chunk_mb=0.005)
    convert_text(str(text_folder), str(tmp_path / "a"), options, workers=1, quiet=True)
    convert_text(str(text_folder), str(tmp_path / "b"), options, workers=2, quiet=True)
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_vocab_file_cased_and_uncased(tmp_path: Path) -> None:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "Hello", "world", "##s", "!"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("Hello worlds! HELLO")
    for lowercase, expected in ((True, [2, 5, 7, 8, 9, 5, 3]), (False, [2, 6, 7, 8, 9, 1, 3])):
        out = tmp_path / f"out{lowercase}"
        convert_text(
            str(src),
            str(out),
            TextOptions(tokenizer=str(tmp_path / "vocab.txt"), lowercase=lowercase),
            quiet=True,
        )
        assert shard_examples(out)[0]["input_ids"] == expected
        assert read_manifest(str(out)).to_json()["text"]["unknown_rate"] == (
            0.0 if lowercase else round(1 / 7, 6)
        )


def test_max_length_and_stride_leave_room_for_the_text(tmp_path: Path) -> None:
    """A tokenizer adding five special ids: --max-length 4 (or 5) leaves no room for a
    document's own ids and --stride 3 at --max-length 8 windows that would not advance; each
    is one clear line before anything is tokenized (not a traceback, nor, on the compiled
    path, examples left untruncated); --no-special and enough room convert."""
    from tokenizers.implementations import BertWordPieceTokenizer
    from tokenizers.processors import TemplateProcessing

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "alpha", "beta", "the", "of"]
    bert = BertWordPieceTokenizer({w: i for i, w in enumerate(vocab)}, lowercase=True)
    bert.post_processor = TemplateProcessing(
        single="[CLS] [MASK] [PAD] $A [SEP] [MASK]",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3), ("[MASK]", 4), ("[PAD]", 0)],
    )
    bert.save(str(tmp_path / "tokenizer.json"))
    src = tmp_path / "src"
    src.mkdir()
    lines = [json.dumps({"text": "alpha beta the of " * (i % 5 + 1)}) for i in range(50)]
    (src / "a.jsonl").write_text("\n".join(lines) + "\n")
    tok = str(tmp_path / "tokenizer.json")
    for max_length in (4, 5):
        with pytest.raises(UsageError, match=f"--max-length {max_length}: the tokenizer adds 5"):
            convert_text(
                str(src), str(tmp_path / "o"), TextOptions(tokenizer=tok, max_length=max_length)
            )
    with pytest.raises(UsageError, match="--stride 3: windows of 3 ids"):
        convert_text(
            str(src), str(tmp_path / "o"), TextOptions(tokenizer=tok, max_length=8, stride=3)
        )
    assert not list((tmp_path / "o").glob("*.tfrecord-*"))
    for options in (
        TextOptions(tokenizer=tok, max_length=4, special=False),
        TextOptions(tokenizer=tok, max_length=7),
    ):
        out = tmp_path / f"ok-{options.special}"
        convert_text(str(src), str(out), options, quiet=True)
        lengths = [len(ex["input_ids"]) for ex in shard_examples(out)]
        assert lengths and max(lengths) <= options.max_length


def test_strict_and_option_errors(tmp_path: Path, text_folder: Path, monkeypatch) -> None:
    from feedgpu import InputError
    from feedgpu.converters.text import convert as text_convert

    with pytest.raises(InputError, match=r"binary.txt: binary file.*\(stopped by --strict\)"):
        convert_text(
            str(text_folder),
            str(tmp_path / "o"),
            TextOptions(tokenizer="train:wordpiece:300"),
            strict=True,
            quiet=True,
        )
    with pytest.raises(UsageError, match="--stride needs --max-length"):
        TextOptions(tokenizer="x", stride=4)
    with pytest.raises(UsageError, match="train:wordpiece:SIZE"):
        convert_text(str(text_folder), str(tmp_path / "p"), TextOptions(tokenizer="train:sp:10"))
    out = tmp_path / "q"
    convert_text(
        str(text_folder), str(out), TextOptions(tokenizer="train:wordpiece:300"), quiet=True
    )
    trained: list[str] = []
    real = text_convert._tokenizer
    monkeypatch.setattr(text_convert, "_tokenizer", lambda *a: trained.append("x") or real(*a))
    with pytest.raises(DatasetError, match="max_length None -> 64"):
        convert_text(
            str(text_folder),
            str(out),
            TextOptions(tokenizer="train:wordpiece:300", max_length=64),
            quiet=True,
        )
    assert not trained  # refused before a tokenizer was trained
    again = convert_text(
        str(text_folder), str(out), TextOptions(tokenizer="train:wordpiece:300"), quiet=True
    )
    assert again.already_done and not trained  # the same dataset: complete, its tokenizer kept


def test_kill_minus_nine_then_resume_gives_identical_bytes(
    tmp_path: Path, text_folder: Path
) -> None:
    import signal
    import subprocess
    import sys
    import time

    vocab = tmp_path / "vocab"
    convert_text(
        str(text_folder), str(vocab), TextOptions(tokenizer="train:wordpiece:300"), quiet=True
    )
    args = [
        "convert",
        "text",
        str(text_folder),
        "OUT",
        "--tokenizer",
        str(vocab / "vocab.txt"),
        "--folder-labels",
        "--chunk-mb",
        "0.002",
        "--quiet",
    ]
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "feedgpu", *[str(killed) if a == "OUT" else a for a in args]]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    work = killed / ".feedgpu-work"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if work.exists() and any(p.name == "chunk-00002.json" for p in work.iterdir()):
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "feedgpu.json").exists(), "the run finished before it could be killed"
    done_before = {p.name for p in work.iterdir() if p.name.endswith(".json")} - {"plan.json"}
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    from feedgpu.cli import main

    assert main([str(tmp_path / "clean") if a == "OUT" else a for a in args]) == 0
    names = sorted(p.name for p in (tmp_path / "clean").iterdir())
    assert names == sorted(p.name for p in killed.iterdir())
    for name in names:
        assert (killed / name).read_bytes() == (tmp_path / "clean" / name).read_bytes(), name
    assert len(done_before) >= 2  # killed after some chunks were complete, before the end


def test_cli_convert_text_json_and_error_line(tmp_path: Path, text_folder: Path, capsys) -> None:
    from feedgpu.cli import main

    out = tmp_path / "out"
    code = main(
        [
            "convert",
            "text",
            str(text_folder),
            str(out),
            "--tokenizer",
            "train:wordpiece:300",
            "--json",
            "--split",
            "train=0.5,test=0.5",
        ]
    )
    assert code == 2  # split folders exist: --split is refused
    assert capsys.readouterr().err == (
        "feedgpu: error: the source already has train/validation/test folders; drop --split\n"
    )
    assert (
        main(
            [
                "convert",
                "text",
                str(text_folder),
                str(out),
                "--tokenizer",
                "train:wordpiece:300",
                "--json",
                "--max-length",
                "64",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["text"]["documents"] == 80 and summary["num_skipped"] == 3
    assert summary["num_inputs"] == 83  # every document: converted or skipped
    assert main(["verify", str(out), "--quiet"]) == 0


def _made(per_doc, doc_ids, labels, splits, max_length=None, per_record=1, before=(), after=()):
    """Records of documents (`RecordMaker.documents`, one shard): the Made and its records."""
    import io

    import numpy as np

    from feedgpu.converters.text.names import Names, route_key
    from feedgpu.converters.text.records import RecordMaker, Tokenized
    from feedgpu.format.records import read_records

    maker = RecordMaker(
        dict.fromkeys(sorted(set(splits)), 1), route_key(0), list(before), list(after),
        max_length, None, per_record, 1,
    )  # fmt: skip
    tokenized = Tokenized(
        np.asarray([i for ids in per_doc for i in ids], np.int64),
        np.asarray([len(ids) for ids in per_doc], np.int64),
        Names.of(doc_ids),
        splits,
        None if labels is None else np.asarray(labels, np.int64),
    )
    made = maker.documents(tokenized)
    return made, list(read_records(io.BytesIO(made.data)))


@pytest.mark.parametrize("no_native", ["0", "1"])
@pytest.mark.parametrize("max_length", [None, 6])
def test_records_of_documents_are_encode_example_bytes(max_length, no_native, monkeypatch) -> None:
    """Special tokens, truncation, labels and unknown counts: exactly what `encode_example`
    writes, by the compiled step and by the Python reference (FEEDGPU_NO_NATIVE)."""
    monkeypatch.setenv("FEEDGPU_NO_NATIVE", no_native)
    from feedgpu.format.records import encode_example

    per_doc = [[7, 1, 9], [], [1] * 40, [300, 2**20, 5, 1], [4, 2**40]]
    doc_ids = [f"file.jsonl:{i}" for i in range(len(per_doc))]
    labels = [0, 1, 2, 1, 0]
    made, found = _made(per_doc, doc_ids, labels, ["train"] * 5, max_length, 1, [101], [102, 103])
    expected = []
    for ids, doc_id, label in zip(per_doc, doc_ids, labels, strict=True):
        kept = ids if max_length is None else ids[: max_length - 3]
        full = [101, *kept, 102, 103]
        expected.append(
            encode_example(
                {"doc_id": doc_id, "input_ids": full, "length": len(full), "label": label}
            )
        )
    assert found == expected
    assert made.full.tolist() == [len(ids) + 3 for ids in per_doc]
    assert made.unknown.tolist() == [ids.count(1) for ids in per_doc]
    # No ids at all, and a record over 16 KiB (its lengths take three varint bytes).
    long = [2**20] * 6000
    _, rows = _made([[], long], ["e", "l"], None, ["t"] * 2)
    assert rows == [
        encode_example({"doc_id": "e", "input_ids": [], "length": 0}),
        encode_example({"doc_id": "l", "input_ids": long, "length": 6000}),
    ]


@pytest.mark.parametrize("per_record", [2, None])
def test_blocks_are_encode_example_bytes(per_record, monkeypatch) -> None:
    """Blocks of consecutive documents of one split: the same bytes encode_example gives for
    lists of lengths, doc ids and labels; split apart again by block_documents."""
    from feedgpu.converters.text import records
    from feedgpu.format.records import block_documents, decode_example, encode_example

    monkeypatch.setattr(records, "RECORD_IDS", 8)  # auto: documents starting within 8 ids
    per_doc = [[7, 1, 9], [5], [1] * 10, [300, 2**20, 8, 8, 8], [4], [6, 6], [2**40]]
    splits = ["train", "test", "train", "train", "test", "train", "train"]
    labels = [0, 1, 2, 1, 0, 2, 1]
    doc_ids = [f"f.jsonl:{i}" for i in range(len(per_doc))]
    made, found = _made(per_doc, doc_ids, labels, splits, None, per_record, [101], [102])
    # Records hold one split's documents ("test" sorts first, and is shard 0 of two: one a
    # split), consecutive, in batch order; auto, with the special tokens: test 3 3 (from 0,
    # 3); train 5 12 7 4 3 (from 0, 5, 17, 24, 28), in windows 0 0 2 3 3 of 8 ids.
    order = [1, 4, 0, 2, 3, 5, 6]
    sizes = [2, 2, 2, 1] if per_record == 2 else [2, 2, 1, 2]
    expected, start = [], 0
    for size in sizes:
        docs = order[start : start + size]
        start += size
        expected.append(
            encode_example(
                {
                    "doc_id": [doc_ids[i] for i in docs],
                    "input_ids": [t for i in docs for t in [101, *per_doc[i], 102]],
                    "label": [labels[i] for i in docs],
                    "length": [len(per_doc[i]) + 2 for i in docs],
                }
            )
        )
    assert found == expected
    assert made.full.tolist() == [len(ids) + 2 for ids in per_doc]
    assert made.unknown.tolist() == [ids.count(1) for ids in per_doc]
    documents = [d for r in found for d in block_documents(decode_example(r))]
    assert [d["doc_id"][0].decode() for d in documents] == [doc_ids[i] for i in order]
    assert [d["input_ids"] for d in documents] == [[101, *per_doc[i], 102] for i in order]


def test_a_failed_parity_check_leaves_every_document_to_hf(tmp_path: Path, monkeypatch) -> None:
    """The parity sample runs before the chunks: when it finds the compiled road wrong, HF
    tokenizes every document and the manifest says why."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s", "!"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    src = tmp_path / "src"
    src.mkdir()
    lines = [json.dumps({"text": "hello worlds! " * (i % 7 + 1)}) for i in range(1500)]
    (src / "a.jsonl").write_text("\n".join(lines) + "\n")
    real_ids = TextTokenizer.ids

    def wrong_ids(self, texts):  # a compiled road that disagrees with HF
        values, lengths = real_ids(self, texts)
        return (values + 1) % len(vocab), lengths

    monkeypatch.setattr(TextTokenizer, "ids", wrong_ids)
    out = tmp_path / "out"
    convert_text(str(src), str(out), TextOptions(tokenizer=str(tmp_path / "vocab.txt")), quiet=True)
    manifest = read_manifest(str(out)).to_json()
    assert manifest["tokenizer"]["road"] == "hf"
    assert manifest["tokenizer"]["mismatch_rate"] == 1.0
    hf = Tokenizer.from_file(str(out / "tokenizer.json"))
    found = shard_examples(out)
    assert len(found) == 1500 and manifest["text"]["documents"] == 1500
    for ex in found:
        line = int(ex["doc_id"][0].decode().rsplit(":", 1)[1])
        assert ex["input_ids"] == hf.encode(json.loads(lines[line - 1])["text"]).ids


def test_json_lines_edge_cases_read_as_the_standard_library_reads_them(tmp_path: Path) -> None:
    """orjson parses the usual line; whatever it refuses takes Python's json, so documents and
    skip reasons are what the standard library alone gives."""
    from feedgpu.convert.plan import Skip
    from feedgpu.converters.listing import SourceFile
    from feedgpu.converters.text.sources import Document, ReadOptions, iter_documents

    lines = [
        b'{"text": "plain", "label": "a"}',
        b'{"text": "nan", "x": NaN, "label": "b"}',  # Python's json only
        b"null",
        b'{"text": "big", "n": 123456789012345678901234567890, "label": "a"}',  # a float to orjson
        b'{"text": "\\ud800 lone", "label": "b"}',  # json only, and no UTF-8 holds it
        b'{"text": "first", "text": "second", "label": "a"}',
        b'{"text": "caf\xc3\xa9", "label": 3.0}',
        b'{"text": "bad \xff byte", "label": "a"}',
        b"{bad",
    ]
    (tmp_path / "a.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    source = SourceFile("a.jsonl", str(tmp_path / "a.jsonl"), 0, 0)
    found = list(iter_documents(source, ReadOptions(label_field="label")))
    assert found[:2] == [Document("a.jsonl:1", "plain", "a"), Document("a.jsonl:2", "nan", "b")]
    assert isinstance(found[2], Skip) and found[2].reason == "malformed JSON"
    assert found[3] == Document("a.jsonl:4", "big", "a")
    assert isinstance(found[4], Skip) and (found[4].path, found[4].reason) == (
        "a.jsonl:5",
        "not UTF-8",
    )
    assert found[5:7] == [
        Document("a.jsonl:6", "second", "a"),
        Document("a.jsonl:7", "café", "3.0", label_number=True),
    ]
    assert [(s.path, s.reason) for s in found[7:]] == [
        ("a.jsonl:8", "not UTF-8"),
        ("a.jsonl:9", "malformed JSON"),
    ]
    replaced = list(
        iter_documents(source, ReadOptions(label_field="label", encoding_errors="replace"))
    )
    assert replaced[4] == Document("a.jsonl:5", "\ufffd lone", "b")
    (tmp_path / "b.jsonl").write_bytes(b'{"text": "x", "label": "\\udc00"}\n')  # in a label too
    labelled = SourceFile("b.jsonl", str(tmp_path / "b.jsonl"), 0, 0)
    (skip,) = iter_documents(labelled, ReadOptions(label_field="label"))
    assert isinstance(skip, Skip) and skip.reason == "not UTF-8"
    (doc,) = iter_documents(labelled, ReadOptions(label_field="label", encoding_errors="replace"))
    assert doc == Document("b.jsonl:1", "x", "\ufffd")


def test_blocks_of_json_lines_are_the_same_documents_as_line_by_line(
    tmp_path: Path, monkeypatch
) -> None:
    """JSON lines read as blocks of bytes: every document, id and skip is what the
    line-by-line reader gives, whatever unusual lines a block holds."""
    import random

    from feedgpu.converters.listing import SourceFile
    from feedgpu.converters.text import raw_lines
    from feedgpu.converters.text import sources as text_sources

    rng = random.Random(3)
    unusual = [b"", b"   ", b"null", b"[1, 2]", b'{"text": ""}', b'{"text": "  "}', b"{bad"]
    unusual += [b'{"other": "x"}', b'{"text": 5}', b'{"text": "bad \xff"}']
    unusual += [b'{"text": "caf\xc3\xa9"}', b'{"text": "esc\\u0001"}', b'{"text": "x\x7fdel"}']
    lines = []
    for i in range(300):
        usual = json.dumps({"text": f"doc {i} " + "word " * rng.randint(0, 5)}).encode()
        lines.append(rng.choice(unusual) if rng.random() < 0.05 else usual)
    (tmp_path / "a.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    source = SourceFile("a.jsonl", str(tmp_path / "a.jsonl"), 0, 0)
    options = text_sources.ReadOptions()
    monkeypatch.setattr(raw_lines, "BLOCK_LINES", 16)  # many blocks, some unusual
    expected = list(text_sources.iter_documents(source, options))
    found, blocks = [], 0
    for raw in text_sources.iter_blocks(source, options):
        assert isinstance(raw, text_sources.RawLines)
        blocks += 1
        found += text_sources.parse_lines(raw, 0, len(raw), options)
    assert found == expected
    assert blocks == -(-300 // 16)


def test_blocks_of_long_lines_stay_within_their_byte_budget(monkeypatch, tmp_path: Path) -> None:
    """A block holds a few long lines, not thousands: reading stays streamed for books too,
    from a local file and from a stream (a remote file's); a line longer than a read waits
    for its end, and the last needs no newline."""
    from feedgpu.converters.listing import SourceFile
    from feedgpu.converters.text import raw_lines
    from feedgpu.converters.text import sources as text_sources
    from feedgpu.converters.text.raw_lines import RawLines
    from feedgpu.converters.text.sources import ReadOptions

    monkeypatch.setattr(raw_lines, "BLOCK_BYTES", 5000)
    monkeypatch.setattr(raw_lines, "BLOCK_LINES", 1000)
    local = tmp_path / "book.jsonl"
    lines = [b"x" * 999 + b"\n"] * 100 + [b"short\n"] * 3000 + [b"y" * 12000 + b"\n", b"end"]
    local.write_bytes(b"".join(lines))
    read = list(
        text_sources._raw_lines(
            SourceFile("book.jsonl", str(local), 0, 0), ReadOptions(max_bytes=1 << 30)
        )
    )
    assert [line for block in read for line in block.lines()] == lines
    assert [block.number for block in read] == list(
        itertools.accumulate([len(block) for block in read[:-1]], initial=1)
    )
    assert max(map(len, read)) <= 1000
    for block in read:  # one line over at most, but for the line longer than a read
        size = int(block.ends[-1] - block.ends[0])
        assert size <= 5000 + 1000 or (len(block) == 1 and size == 12001), size
    lines = [b"%04d" % i + b"x" * 996 + b"\n" for i in range(100)] + [b"short\n"] * 3000
    stream = io.BytesIO(b"".join(lines))  # not a plain file: part lines joined to the next read
    blocks = [RawLines("s", 0, data, ends) for data, ends in raw_lines.read_blocks(stream)]
    assert [line for block in blocks for line in block.lines()] == lines
    assert all(int(b.ends[-1] - b.ends[0]) <= 5000 + 1000 for b in blocks)


@pytest.mark.parametrize("errors", ["skip", "replace"])
def test_lines_only_pythons_json_reads_are_skipped_or_replaced(tmp_path: Path, errors: str) -> None:
    """What only Python's json parser takes (orjson refuses it) never raises: nesting past
    Python's recursion limit is malformed JSON; a lone surrogate escape ("\\ud800"), text no
    UTF-8 can hold, is "not UTF-8" (or U+FFFD with --encoding-errors replace), as bytes that
    are not UTF-8 are."""
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b"]))
    src = tmp_path / "src"
    src.mkdir()
    deep = '{"text": "a", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    lines = ['{"text": "a b"}', deep, '{"text": "a \\ud800 b"}', '{"text": "b \\ud83d\\ude00"}']
    (src / "a.jsonl").write_text("\n".join(lines) + "\n")
    options = TextOptions(tokenizer=str(tmp_path / "vocab.txt"), encoding_errors=errors)
    report = convert_text(str(src), str(tmp_path / "out"), options, quiet=True, allow_skips=True)
    expected = {"malformed JSON": 1} | ({"not UTF-8": 1} if errors == "skip" else {})
    assert report.skipped_by_reason == expected
    assert report.num_examples == (2 if errors == "skip" else 3)


def test_files_whose_names_are_not_utf8_are_skipped_with_their_reason(tmp_path: Path) -> None:
    """A file or folder whose name is not UTF-8 (Linux allows any bytes) is skipped, named
    with U+FFFD where its bytes were, not a UnicodeEncodeError when planning (its name goes
    into ids, labels and the manifest); the rest converts."""
    import os

    from feedgpu.converters.listing import walk_source

    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"]))
    src = tmp_path / "src"
    (src / "ok").mkdir(parents=True)
    (src / "ok" / "a.jsonl").write_text('{"text": "a a"}\n')
    os.mkdir(os.path.join(os.fsencode(src), b"class\xff"))
    for name in (b"bad\xfe.jsonl", b"class\xff/c.jsonl"):
        with open(os.path.join(os.fsencode(src), name), "w") as f:
            f.write('{"text": "a"}\n')
    files, skips = walk_source(str(src), lambda name: name.endswith(".jsonl"), "not text")
    assert [f.rel for f in files] == ["ok/a.jsonl"]
    assert sorted((s.path, s.reason) for s in skips) == [
        ("bad\ufffd.jsonl", "name not UTF-8"),
        ("class\ufffd", "name not UTF-8"),
    ]
    options = TextOptions(tokenizer=str(tmp_path / "vocab.txt"))
    report = convert_text(str(src), str(tmp_path / "out"), options, quiet=True, allow_skips=True)
    assert report.num_examples == 1 and report.skipped_by_reason == {"name not UTF-8": 2}


@pytest.mark.parametrize(
    "layout",
    [
        {},  # auto: short documents in blocks
        {"docs_per_record": 1},
        {"docs_per_record": 3, "label_field": "y"},
        {"max_length": 9},
        {"max_length": 12, "stride": 3, "label_field": "y"},
        {"pack": 16},
        {"split": "train=0.7,validation=0.3", "docs_per_record": 1, "label_field": "y"},
    ],
)
def test_every_record_written_fits_the_schema_and_its_reference_bytes(
    tmp_path: Path, layout: dict
) -> None:
    """The schema is the writer's contract: every record of every shard, in each layout,
    fits the manifest's features, holds consistent blocks (one length, name and label a
    document, its ids their sum), and is byte for byte what the Python reference encoder
    (`format.records.encode_example`) writes for the values it holds; the manifest counts
    each shard's examples as it holds them."""
    import random

    from feedgpu.format.records import decode_example, encode_example, read_records
    from feedgpu.format.schema import Schema

    rng = random.Random(len(str(layout)))
    words = ["the", "cat", "sat", "naïve", "東京", "[1913", "Webster]", "<b>x</b>", "ok", "a"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words[:5], "[", "]", "<", ">", "/"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    src = tmp_path / "src"
    src.mkdir()
    lines = [
        json.dumps({"text": " ".join(rng.choices(words, k=rng.randint(1, 30))), "y": i % 3})
        for i in range(600)
    ]
    (src / "a.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    options = TextOptions(tokenizer=str(tmp_path / "vocab.txt"), num_shards=3, **layout)
    convert_text(str(src), str(out), options, quiet=True)
    manifest = json.loads((out / "feedgpu.json").read_text())
    schema = Schema.from_json(manifest["features"])
    counted = {
        s["file"]: s["num_examples"]
        for split in manifest["splits"].values()
        for s in split["shards"]
    }
    records = 0
    for shard in sorted(out.glob("*.tfrecord-*")):
        examples = 0
        with open(shard, "rb") as f:
            for record in read_records(f):
                schema.check_record(record)
                values = decode_example(record)
                assert encode_example(values) == record
                if schema.blocks:
                    lengths = values["length"]
                    assert len(values["doc_id"]) == len(lengths) >= 1
                    assert sum(lengths) == len(values["input_ids"])  # type: ignore[arg-type]
                    assert len(values.get("label", lengths)) == len(lengths)
                records += 1
                examples += len(values["length"]) if schema.blocks else 1
        assert counted[shard.name] == examples  # the manifest counts what each shard holds
    assert records >= 3


def test_a_gzipped_corpus_splits_as_the_plain_one(tmp_path: Path) -> None:
    """Which split a document lands in depends on its file and line, not on compression."""
    import gzip

    lines = "".join(json.dumps({"text": f"word {i} and more"}) + "\n" for i in range(300))
    for name, data in (("plain", lines.encode()), ("gz", gzip.compress(lines.encode()))):
        (tmp_path / name).mkdir()
        (tmp_path / name / ("a.jsonl" if name == "plain" else "a.jsonl.gz")).write_bytes(data)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "word", "and", "more"]))
    options = TextOptions(tokenizer=str(vocab), split="train=0.5,validation=0.5", num_shards=1)
    from feedgpu import block_documents
    from feedgpu.format.records import decode_example, read_records

    found = {}
    for name in ("plain", "gz"):
        out = tmp_path / f"out-{name}"
        convert_text(str(tmp_path / name), str(out), options, quiet=True)
        manifest = read_manifest(str(out))
        found[name] = {}
        for split in ("train", "validation"):
            ids = []
            for shard in manifest.split(split).shards:
                with open(out / shard.file, "rb") as f:
                    for record in read_records(f):
                        for doc in block_documents(decode_example(record)):
                            ids.append(doc["doc_id"][0].decode().replace(".gz", ""))
            found[name][split] = sorted(ids)
    assert found["plain"] == found["gz"] and all(found["plain"].values())


def test_a_stray_number_among_text_labels_is_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello"]))
    options = TextOptions(tokenizer=str(vocab), label_field="lang")
    cases = (("mixed", ["en", "de", 7, "en"]), ("numbers", [0, 1, 1, 0]), ("both", ["en", "7", 7]))
    for name, labels in cases:
        (tmp_path / name).mkdir()
        rows = [json.dumps({"text": "hello", "lang": label}) for label in labels]
        (tmp_path / name / "a.jsonl").write_text("\n".join(rows) + "\n")
        caplog.clear()
        with caplog.at_level("WARNING"):
            convert_text(str(tmp_path / name), str(tmp_path / f"o-{name}"), options, quiet=True)
        said = [r.getMessage() for r in caplog.records if "--label-field" in r.getMessage()]
        names = read_manifest(str(tmp_path / f"o-{name}")).label_names
        if name != "numbers":  # "7" then 7: the same class, the number still said
            assert len(said) == 1 and "1 documents hold a number" in said[0]
            assert "a.jsonl:3" in said[0] and "'7'" in said[0] and "7" in names
        else:
            assert not said and sorted(names) == ["0", "1"]  # class ids as numbers: as meant


def test_the_saved_tokenizer_truncates_as_the_stored_examples(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    texts = [" ".join(["hello world"] * (i % 9 + 1)) for i in range(40)]
    (src / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world"]))
    options = TextOptions(tokenizer=str(vocab), max_length=7, docs_per_record=1)
    convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
    saved = Tokenizer.from_file(str(tmp_path / "out" / "tokenizer.json"))
    stored = {ex["doc_id"][0].decode(): ex["input_ids"] for ex in shard_examples(tmp_path / "out")}
    assert len(stored) == 40 and max(map(len, stored.values())) == 7
    for i, text in enumerate(texts, 1):
        assert stored[f"a.jsonl:{i}"] == saved.encode(text).ids
    plain = convert_text(str(src), str(tmp_path / "whole"), TextOptions(tokenizer=str(vocab)))
    whole = Tokenizer.from_file(str(tmp_path / "whole" / "tokenizer.json"))
    assert plain.num_examples == 40 and len(whole.encode(texts[8]).ids) == 20  # untruncated
    again = TextOptions(tokenizer=str(tmp_path / "out" / "tokenizer.json"), docs_per_record=1)
    convert_text(str(src), str(tmp_path / "again"), again, quiet=True)  # the saved file reused
    lengths = [len(ex["input_ids"]) for ex in shard_examples(tmp_path / "again")]
    assert max(lengths) == 20  # its truncation is not the records'
    identities = {read_manifest(str(tmp_path / n)).tokenizer.identity for n in ("out", "again")}
    assert (
        len(identities) == 1
        and read_manifest(str(tmp_path / "again")).tokenizer.parity["road"] == "compiled"
    )


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz", "b.txt"])
def test_a_document_over_the_size_limit_is_skipped_unread(tmp_path: Path, name: str) -> None:
    """A line (or a .txt file read whole) over --max-document-mb is a counted skip at its own
    line; the documents around it keep theirs; --strict stops on it."""
    import gzip

    from feedgpu import InputError

    big = "word " * 450_000  # 2.2 MB of text, over a 1 MB limit
    texts = ["first doc", big, "third doc", big + "again", "fifth doc"]
    src = tmp_path / "src"
    src.mkdir()
    if name.endswith(".txt"):
        (src / name).write_text("\n".join(texts))  # the last line without a newline
    else:
        data = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
        (src / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "word", "doc", "first"]))
    options = TextOptions(
        tokenizer=str(vocab), doc_per_line=True, max_document_mb=1, docs_per_record=1
    )
    report = convert_text(str(src), str(tmp_path / "out"), options, quiet=True)
    lines = (tmp_path / "out" / "skipped.jsonl").read_text().splitlines()
    skipped = [json.loads(line) for line in lines]
    too_large = sorted(s["path"] for s in skipped if s["reason"] == "document too large")
    assert too_large == [f"{name}:2", f"{name}:4"] and report.num_skipped == 2
    kept = sorted(ex["doc_id"][0].decode() for ex in shard_examples(tmp_path / "out"))
    assert kept == [f"{name}:1", f"{name}:3", f"{name}:5"]
    if name.endswith(".txt"):  # a document a file, read whole: at most the limit is read
        whole = tmp_path / "whole"
        whole.mkdir()
        (whole / "big.txt").write_text(big)
        (whole / "small.txt").write_text("first doc")
        files = dataclasses.replace(options, doc_per_line=False)
        report = convert_text(str(whole), str(tmp_path / "out-whole"), files, quiet=True)
        assert report.num_examples == 1 and report.skipped_by_reason == {"document too large": 1}
    with pytest.raises(InputError, match="document too large"):
        convert_text(str(src), str(tmp_path / "strict"), options, quiet=True, strict=True)
    with pytest.raises(UsageError, match=r"--max-document-mb 0\.5: must be at least 1"):
        TextOptions(tokenizer=str(vocab), max_document_mb=0.5)


@pytest.mark.parametrize("read_size", [700, 1000, 3000])  # a limit is never below a read
def test_read_blocks_never_holds_a_line_over_the_limit(
    tmp_path: Path, monkeypatch, read_size: int
) -> None:
    """In a long line's place its size; every other line whole, from a plain file (part lines
    read again), a gzip file and a stream (part lines joined), whatever the reads' sizes."""
    import gzip

    from feedgpu.converters.text import raw_lines

    monkeypatch.setattr(raw_lines, "BLOCK_BYTES", read_size)
    lines = [b"short\n", b"x" * 5000 + b"\n", b"mid " * 50 + b"\n", b"y" * 3001 + b"\n", b"end"]
    (tmp_path / "a").write_bytes(b"".join(lines))
    (tmp_path / "a.gz").write_bytes(gzip.compress(b"".join(lines)))

    def streams():
        with open(tmp_path / "a", "rb") as plain:
            yield plain
        with gzip.open(tmp_path / "a.gz", "rb") as gzipped:
            yield gzipped
        yield io.BytesIO(b"".join(lines))

    for stream in streams():
        found: list[object] = []
        for block in raw_lines.read_blocks(stream, 3000):
            if isinstance(block, int):
                found.append(block)
                continue
            data, ends = block
            assert len(data) <= 2 * read_size  # never a long line's bytes
            found += [data[a:b] for a, b in itertools.pairwise(ends.tolist())]
        assert found == [lines[0], 5001, lines[2], 3002, lines[4]], stream


def test_legacy_encodings_are_read_and_replacements_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """KOI8-R text: skipped as not UTF-8 (skipped.jsonl written, the advice names --encoding),
    read exactly with --encoding koi8-r, and with --encoding-errors replace its replaced bytes
    counted in the manifest and said."""
    from feedgpu import InputError

    russian = ["Мой ёжик спит", "Привет мир", "Мой мир"]
    src = tmp_path / "src"
    src.mkdir()
    (src / "ru.txt").write_bytes("\n".join(russian).encode("koi8-r") + b"\n")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "мои", "мир", "ежик"]))
    options = TextOptions(tokenizer=str(vocab), doc_per_line=True, docs_per_record=1)
    with pytest.raises(InputError, match="--encoding NAME"):
        convert_text(str(src), str(tmp_path / "utf8"), options, quiet=True)
    skipped = (tmp_path / "utf8" / "skipped.jsonl").read_text()
    assert skipped.count('"not UTF-8"') == 3
    koi8 = dataclasses.replace(options, encoding="koi8-r")
    convert_text(str(src), str(tmp_path / "koi8"), koi8, quiet=True)
    saved = Tokenizer.from_file(str(tmp_path / "koi8" / "tokenizer.json"))
    found = {ex["doc_id"][0].decode(): ex["input_ids"] for ex in shard_examples(tmp_path / "koi8")}
    assert [found[f"ru.txt:{i}"] for i in (1, 2, 3)] == [saved.encode(t).ids for t in russian]
    assert read_manifest(str(tmp_path / "koi8")).text.replaced_bytes == 0
    replace = dataclasses.replace(options, encoding_errors="replace")
    with caplog.at_level("WARNING"):
        convert_text(str(src), str(tmp_path / "replaced"), replace, quiet=True)
    text = read_manifest(str(tmp_path / "replaced")).text
    letters = sum(len(t.replace(" ", "")) for t in russian)  # one byte each in KOI8-R
    assert text.replaced_bytes == letters
    assert "likely in another encoding" in caplog.text
    with pytest.raises(UsageError, match="UTF-16"):
        TextOptions(tokenizer="x", encoding="utf-16")
    assert TextOptions(tokenizer="x", encoding="utf-8-sig").read.encoding == "utf-8-sig"
    with pytest.raises(UsageError, match="no such encoding"):
        TextOptions(tokenizer="x", encoding="klingon")


def test_one_50_mb_line_stays_under_a_memory_cap(tmp_path: Path) -> None:
    """A 50 MB line on HF's road (a BPE tokenizer.json) took 11.6 GB: now it is a counted skip
    and the conversion's process peaks far under 1 GiB, its neighbours converted."""
    import subprocess
    import sys

    from tokenizers.implementations import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["alpha beta gamma delta small doc one two"] * 50, vocab_size=300)
    bpe.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "src").mkdir()
    words = "alpha beta gamma delta " * (50_000_000 // 23)
    (tmp_path / "src" / "a.txt").write_text(f"small doc one\n{words}\nsmall doc two\n")
    code = (
        "import sys; from feedgpu.converters.text.convert import convert_text, "
        "TextOptions; r = convert_text(sys.argv[1], sys.argv[2], TextOptions(tokenizer="
        "sys.argv[3], doc_per_line=True), quiet=True); print(r.num_examples, "
        "r.skipped_by_reason); print(next(l.split()[1] for l in open('/proc/self/status') "
        "if l.startswith('VmHWM')))"
    )  # its own peak: VmHWM starts anew at exec, ru_maxrss keeps the forking parent's
    args = [str(tmp_path / "src"), str(tmp_path / "out"), str(tmp_path / "tokenizer.json")]
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    summary, peak_kb = done.stdout.split("\n")[:2]
    assert summary == "2 {'document too large': 1}"
    assert int(peak_kb) < 512 * 1024  # its own peak (KB): under 0.5 GB
