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
// A finish reason of "length" is returned as a successful Completion: the
// answer was truncated, and deciding whether that is usable is the
// caller's business.
package openai
