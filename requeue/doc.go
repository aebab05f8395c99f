// Package requeue puts prompts of a run back to work: one at a time
// (Requeue), every dead letter chosen by reason or id (Replay), or every
// prompt of the input that is neither completed nor failed nor on its way
// (Reconcile).
//
// The unit of work is a prompt's sample (schema.Unit): with --samples, each
// sample of a prompt has its own subject, result, dead letter and failure
// count, and is requeued on its own, with its sample and the prompt's own
// parameters. Without --samples every prompt is one unit, sample 0.
//
// A prompt's subject on the prompts stream holds at most one message, ever
// (see provision): that is what makes producing idempotent, and it means
// a prompt the run's consumer has acknowledged or terminated is never
// delivered again. To deliver it again, its subject is emptied and the
// prompt published anew, so the consumer meets it at a new, higher
// sequence. Requeue does that in an order that survives a crash at any
// point:
//
//  1. purge the prompt's subject (up to the message seen, no further);
//  2. publish the prompt, expecting the subject to be empty, with a new
//     message id so that JetStream's de-duplication window does not take it
//     for the earlier copy;
//  3. purge the prompt's dead letter (again up to the one seen).
//
// Until step 3 the dead letter exists, so a replay run again finds the
// prompt; a rerun after step 2 recognises the copy it published (see
// Requeue) and only finishes step 3. At no point do two messages of one
// prompt wait on the stream.
//
// # Output files
//
// Nothing here writes the aggregator's files. failed.jsonl mirrors the
// dead letters: once a replayed prompt's dead letter is gone (step 3),
// the aggregator takes its line out of failed.jsonl and waits for its
// new outcome before it calls the run done. A replayed prompt that
// completes is then written to completions.jsonl; one that fails again
// gets a new dead letter, and a line with that latest failure.
package requeue
