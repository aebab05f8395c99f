// Package export writes a run's answers as training data: for SpecForge,
// for speculators, as ShareGPT conversations, as OpenAI Batch lines, as
// plain text through the target's chat template, or as a Parquet
// dataset (Formats). Each format follows its consumer's own reading
// code, which the contract tests check rows against; the filters
// (Options.Drop), deduplication and the dataset card are the same for
// all of them.
//
// It reads a run's outputs through a Source: the files the aggregator
// wrote (Files), or the run's streams in NATS (Streams). It reads them
// with dataset's line rules and writes nothing but the export: a file
// written atomically (dataset.WriteFileAtomic), or a directory of
// Parquet shards. Readers of prompts do not compile its Jinja templates.
package export
