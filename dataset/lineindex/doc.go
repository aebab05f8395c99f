// Package lineindex keeps an index beside completions.jsonl, so that a
// restarted aggregator and the end-of-run report need not read every
// answer again. At a million answers of 10 KB that read is 10 GB; the
// index is about 60 bytes a line.
//
// For every line the index holds a Summary: where the line is, the
// CRC-32C of its bytes, its unit, and the numbers the throughput
// estimate and the report read of it. It is appended in frames, each
// with its length and checksum, after the lines it describes are
// written and fsynced; it is not fsynced itself. So after a crash it
// may lag the file, or end in a torn frame, never run ahead of it, and
// a reader takes the index for the prefix it covers and reads the rest
// of the file line by line.
//
// Check decides whether an index may be trusted, without reading the
// lines it covers: every frame's checksum, lines that follow one
// another from the file's first byte, a covered prefix no longer than
// the file, the file's modification time when the index covers all of
// it, and the bytes of a random sample of the lines and of the last one
// against their checksums. An index that fails any of these disagrees
// with its file: the reader says so and reads the whole file, as it
// would without an index, and the aggregator writes a new one.
//
// The file is derived data: deleting it costs one full read of
// completions.jsonl at the next start, nothing else.
package lineindex
