"""Text corpora to pre-tokenized shards: options (`options`), the plan (`convert`), reading
(`sources`), tokenizers (`tokenizer`), the chunk stage (`chunks`, `batches`, `records`,
`pieces`) and the parity sample (`parity`); docs/architecture.md has the map."""
