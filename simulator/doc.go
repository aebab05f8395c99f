// Package simulator is an OpenAI-compatible chat completion server that
// behaves like vLLM under load, without a GPU.
//
// It models what a client of a busy vLLM server sees: a fixed number of
// running sequences with a FIFO queue behind them (continuous batching),
// decode steps that slow down as the batch grows, chunked prefill that
// stalls decoding while new prompts are read, heavy-tailed answer lengths
// split into reasoning and content, response headers that arrive only with
// the first token, and vLLM's error bodies, /health, /v1/models and
// /metrics. Answer lengths and text are deterministic per prompt and seed,
// so tests can predict them (see Server.OutputTokens). Every answer and
// stream chunk says it is simulated: its system_fingerprint is
// schema.SimulatedFingerprint, so rehearsal data cannot pass for real.
//
// Like `vllm serve --api-key` it can require a bearer key on /v1
// (Config.APIKey), and through /admin/ a test can rotate that key or
// rename the served model while workers run, as an operator restarting
// vLLM would.
//
// Simulated time can run faster than wall time (Config.Speed), so hours of
// a real run can be replayed in minutes. The default calibration
// approximates Kimi-K2.5 INT4 on eight PCIe GPUs under vLLM with 200
// concurrent clients; the arithmetic is in docs/simulator.md.
//
// On request (Config.Faults) it also fails the way a long run does:
// injected 429, 500, 503 and context length errors, requests that hang
// or lose their connection mid-answer, engine errors mid-answer (vLLM's
// in-stream error event, then [DONE]), slow first bytes, and outages in
// which connections are refused or every request gets 503, on a
// schedule or through /admin/outage. Which requests are hit is
// deterministic per seed, prompt and attempt, so a retry can succeed.
//
// A Server is built with New, its engine runs in Run, and Handler serves
// HTTP; Serve does both on a listener.
package simulator
