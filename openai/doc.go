// Package openai is a client for the OpenAI-compatible chat completions
// API served by vLLM and SGLang, built for regenerating answers (reasoning
// included) as training data.
//
// The client reports exactly what happened to each request: a Completion
// with the answer split into reasoning and content, finish reason, token
// usage and timings; or an error that Classify sorts into Transient (try
// again later), Permanent (this prompt will never succeed), Auth (the
// deployment is misconfigured; no prompt will succeed) or Canceled (the
// caller gave up).
//
// An error the server sends after it has accepted the request (vLLM's
// error event when generation fails mid-stream, which carries the code
// 400 whatever went wrong) is the server's failure, not the prompt's: it
// is Transient, and APIError.InStream tells it apart.
//
// A request is bounded by how long the server stays silent, not by how
// long the answer takes: Config.FirstTokenTimeout (30 minutes) until the
// first token, which may wait in the server's queue, then
// Config.IdleTimeout (5 minutes) between any two bytes. A long reasoning
// answer that keeps arriving runs for as long as it takes, unless
// Config.RequestTimeout sets a cap.
//
// A finish reason of "length" is returned as a successful Completion: the
// answer was truncated, and deciding whether that is usable is the
// caller's business.
package openai
