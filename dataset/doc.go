// Package dataset owns aerie's input formats: how a prompts file is read,
// whatever its form, and the rules every reader of prompts and ids
// shares.
//
// It reads JSONL prompt lines (messages, SpecForge and ShareGPT
// conversations, a bare prompt, OpenAI Batch request lines) and Parquet
// files with the same columns, one record at a time (Open, Reader), and
// turns each record into the id and messages to queue, or the reason it
// is not a prompt (ParseLine, ParseLineWith). It holds the id rules
// (ParseID, ContentID, MaxIDBytes), so that an id means the same to the
// producer, reconcile, requeue and doctor. It holds the line rules too:
// how a line file is read with a bound on line length (LineReader) and
// how an output or ids-file line names its unit, id and sample
// (LineUnit), which the aggregator, requeue and the output readers
// (ReadCompletions, ReadFailed) all use.
//
// The producer, requeue (reconcile, ids files), doctor and chaos read
// prompts only through this package; none of them keeps a copy of these
// rules.
package dataset
