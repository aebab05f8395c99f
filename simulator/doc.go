// Package simulator is an OpenAI-compatible chat completion server that
// behaves like vLLM under load, without a GPU.
//
// It models what a client of a busy vLLM server sees: a fixed number of
// running sequences with a FIFO queue behind them (continuous batching),
// decode steps that slow down as the batch grows, chunked prefill that
// stalls decoding while new prompts are read, a KV cache that holds
// requests back and preempts the latest admitted when it runs out (as
// vLLM's V1 scheduler does), heavy-tailed answer lengths
// split into reasoning and content, response headers that arrive only with
// the first token, and vLLM's error bodies, /health, /v1/models and
// /metrics. Every answer and stream chunk says it is simulated: its
// system_fingerprint is schema.SimulatedFingerprint, so rehearsal data
// cannot pass for real.
//
// # Sampling and determinism
//
// The sampling fields of a request are checked as vLLM checks them (400
// naming the field: temperature >= 0, top_p in (0, 1], top_k -1, 0 or at
// least 1, min_p in [0, 1], presence_penalty and frequency_penalty in
// [-2, 2], repetition_penalty > 0, seed an integer, stop a string or a
// list of strings, reasoning_effort low, medium, high or minimal,
// chat_template_kwargs an object); fields it does not know are ignored,
// as vLLM ignores them. An answer (its length, split and text) is a pure
// function of
//
//   - the messages: roles, contents and the reasoning_content (or
//     reasoning) of earlier assistant turns, which is also rendered into
//     the prompt;
//   - the fields that change sampling: temperature, top_p, top_k, min_p,
//     the three penalties, reasoning_effort, chat_template_kwargs and
//     seed, each only when given;
//   - Config.Seed.
//
// A request without a seed and with a temperature above 0 is sampled
// afresh every time, like a real sampler: a random number joins the
// inputs. With a seed, or with temperature 0 or none given, it is
// deterministic: the same context and seed always get the same answer,
// streamed or not, and seeds s, s+1, s+2 get different ones (even at
// temperature 0, where a real model would answer greedily). A request
// without any sampling field gets the answer it got before they were
// read, which Server.OutputTokens predicts.
//
// The fields act on the answer like this. reasoning_effort scales the
// reasoning part's length: minimal 0.25, low 0.5, medium 1, high 1.5
// (the content keeps its length). chat_template_kwargs with
// "enable_thinking" or "thinking" false removes the reasoning: every
// token is content. stop ends the content (never the reasoning) just
// before the first stop string to complete, with finish_reason "stop";
// the tokens up to the one completing the stop string count as
// generated (usage and token ids), their held-back text is not sent, and
// the answer is otherwise the one without stop (stop is not a sampling
// input). max_tokens then cuts what is left (finish_reason "length";
// a stop string completing beyond it never matched). With
// return_token_ids true the response has prompt_token_ids (one id per
// prompt token, from the rendered prompt) at the top level and
// choices[0].token_ids (one id per generated token, a fixed id per word)
// in the whole answer; a stream sends prompt_token_ids on its first
// chunk and each chunk's token ids in its choices[0].token_ids, so the
// ids always number usage.completion_tokens.
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
