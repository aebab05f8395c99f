// Package engine knows the LLM servers aerie runs against: vLLM, SGLang,
// TensorRT-LLM (trtllm-serve) and llama.cpp (llama-server). They all
// speak OpenAI's chat API, and differ exactly where aerie's features
// live: where reasoning and token ids come back, which way request
// priority runs, whether a request may ask for several answers, which
// metrics tell how loaded the server is, and which request fields are
// refused.
//
// Each engine is one Profile, a table of plain values (profiles.go),
// written from that engine's protocol source. Detect tells which engine
// serves a URL from what the server shows of itself; Profile.Plan says,
// for each feature a run asks for, what will happen on that engine, and
// which features it must refuse before anything is queued.
package engine
