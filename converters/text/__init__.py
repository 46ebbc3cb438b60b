"""Text corpora to pre-tokenized shards: options (`options`), the plan (`convert`), reading
(`sources`), tokenizers (`tokenizer`, `wordpiece_vocab`), the chunk stage (`chunks`, `batches`,
`pieces`, `examples`, `blocks`), the parity sample (`parity`) and re-tokenizing (`redo`)."""
