package openai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"
)

// chunkSeeds are event data as servers send them, and the odd shapes
// the fast decoder must either decode as encoding/json does or decline.
var chunkSeeds = []string{
	// vLLM 0.11+: reasoning, continuous usage, token ids.
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":10,"total_tokens":10,"completion_tokens":0},"prompt_token_ids":[1,2,3]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning":"Let me think"},"logprobs":null,"finish_reason":null,"token_ids":[42]}],"usage":{"prompt_tokens":10,"total_tokens":11,"completion_tokens":1}}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" answer"},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":[7,8]}],"usage":{"prompt_tokens":10,"total_tokens":13,"completion_tokens":3,"prompt_tokens_details":null}}`,
	// SGLang: reasoning_content.
	`{"id":"2","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":"hmm","tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`,
	// A usage-only chunk at the end.
	`{"id":"x","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":4,"total_tokens":14}}`,
	// Errors in the stream, in both shapes, and as text.
	`{"error":{"message":"engine died","type":"InternalServerError","param":null,"code":500}}`,
	`{"object":"error","message":"bad","type":"BadRequestError","param":"x","code":400}`,
	`{"error":"plain text"}`,
	// Escapes, unicode, invalid UTF-8.
	`{"id":"a","choices":[{"index":0,"delta":{"content":"line\nnext \"q\" \u00e9 \ud83d\ude00 \ud800 tab\t"}}]}`,
	"{\"choices\":[{\"delta\":{\"content\":\"bad \xff utf8\"}}]}",
	`{"choices":[{"delta":{"content":"ünïcødé 日本"}}]}`,
	// Several chunks in one event, with and without new lines.
	"{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n{\"choices\":[{\"delta\":{\"content\":\"b\"}}]}",
	`{"choices":[{"delta":{"content":"a"}}]}{"choices":[{"delta":{"content":"b"}}]}`,
	"{\"choices\":[]}\n{\"choices\":[]} x",
	// Keys in other case, escaped keys, repeated keys.
	`{"ID":"upper","Choices":[{"Delta":{"Content":"c"}}]}`,
	`{"choices":[{"delta":{"ſontent":"long s","reaſoning":"x"}}]}`,
	`{"\u0069d":"escaped key"}`,
	`{"choices":[{"delta":{"content":"a"},"delta":{"reasoning":"b"}}]}`,
	`{"id":"a","id":"b"}`,
	// Types encoding/json refuses or treats specially.
	`{"choices":[{"index":1.0}]}`,
	`{"choices":[{"index":"0"}]}`,
	`{"choices":[{"index":-0,"finish_reason":null,"token_ids":null}]}`,
	`{"choices":[{"index":99999999999999999999}]}`,
	`{"choices":[{"index":1e2}]}`,
	`{"choices":[null]}`,
	`{"choices":null,"usage":null,"prompt_token_ids":[]}`,
	`{"choices":[{"token_ids":[1,null,3]}]}`,
	`{"choices":[{"token_ids":[]}]}`,
	`{"choices":[{"delta":null}]}`,
	`{"choices":[{"delta":"text"}]}`,
	`{"choices":{}}`,
	`{"usage":{"prompt_tokens":null,"completion_tokens":5}}`,
	`{"model":null,"id":true}`,
	// Not objects, or broken.
	`null`,
	`[]`,
	`"text"`,
	`42`,
	`{"id":"a"`,
	`{"id":"a",}`,
	`{"choices":[{"index":0,}]}`,
	`{"x":01}`,
	`{"x":-}`,
	`{"x":1.}`,
	`{"x":[1,2,{"y":[true,false,null,"s",-1.5e+3]}]}`,
	"{\"x\":\"ctl\x01\"}",
	`{"x":"bad \q escape"}`,
	`{"x":"\u12"}`,
	`{"x":tru}`,
	`{} `,
	``,
	` `,
}

// TestChunkDecoderMatchesEncodingJSON: wherever the fast decoder
// accepts a chunk, encoding/json decodes it to the same value, and
// wherever encoding/json refuses one, the fast decoder declines it.
func TestChunkDecoderMatchesEncodingJSON(t *testing.T) {
	for _, seed := range chunkSeeds {
		checkChunk(t, []byte(seed))
	}
}

// TestStreamEventMatchesEncodingJSON: a stream's state after each event
// (text, ids, usage, counts, token ids, errors) is the same whether the
// event is decoded with the fast decoder or wholly with encoding/json.
func TestStreamEventMatchesEncodingJSON(t *testing.T) {
	for _, seed := range chunkSeeds {
		checkEvent(t, []byte(seed))
	}
	// A whole stream, event by event.
	var fast, slow streamState
	for _, seed := range chunkSeeds[:5] {
		errFast := fast.event([]byte(seed))
		errSlow := slow.decodeEvent([]byte(seed), []byte(seed))
		if errFast != nil || errSlow != nil {
			t.Fatalf("%s: %v, %v", seed, errFast, errSlow)
		}
	}
	sameState(t, "whole stream", &fast, &slow)
	if fast.usage.CompletionTokens != 4 || fast.finishReason != "stop" || len(fast.tokenIDs) != 3 {
		t.Errorf("whole stream decoded as %+v", fast.completion())
	}
}

func FuzzChunkDecoder(f *testing.F) {
	for _, seed := range chunkSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkChunk(t, data)
		checkEvent(t, data)
	})
}

// checkChunk compares the fast decoder with json.Decoder on the first
// value of data.
func checkChunk(t *testing.T, data []byte) {
	t.Helper()
	data = bytes.TrimLeft(data, " \t\r\n")
	var want streamChunk
	dec := json.NewDecoder(bytes.NewReader(data))
	errStd := dec.Decode(&want)
	var d chunkDecoder
	var got streamChunk
	n, ok := d.decode(data, &got)
	if !ok {
		return // encoding/json decides
	}
	if errStd != nil {
		t.Fatalf("%q: fast decoder accepted what encoding/json refuses (%v): %+v", data, errStd, got)
	}
	if int64(n) != dec.InputOffset() {
		t.Errorf("%q: fast decoder took %d bytes, encoding/json %d", data, n, dec.InputOffset())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%q:\nfast %#v\njson %#v", data, got, want)
	}
}

// checkEvent compares a stream's state and error after the event data
// decoded by streamState.event with those after decoding it all with
// encoding/json.
func checkEvent(t *testing.T, data []byte) {
	t.Helper()
	var fast, slow streamState
	fast.secrets, slow.secrets = []string{"sk-secret"}, []string{"sk-secret"}
	errFast := fast.event(data)
	errSlow := slow.decodeEvent(data, data)
	if errText(errFast) != errText(errSlow) {
		t.Errorf("%q: error %v, encoding/json's %v", data, errFast, errSlow)
	}
	var a1, a2 *APIError
	if errors.As(errFast, &a1) != errors.As(errSlow, &a2) || (a1 != nil && *a1 != *a2) {
		t.Errorf("%q: API error %+v, encoding/json's %+v", data, a1, a2)
	}
	sameState(t, string(data), &fast, &slow)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func sameState(t *testing.T, what string, a, b *streamState) {
	t.Helper()
	ca, cb := a.completion(), b.completion()
	if !reflect.DeepEqual(ca, cb) || a.counted != b.counted || a.chunks != b.chunks {
		t.Errorf("%q: state\nfast %#v (counted %d)\njson %#v (counted %d)", what, ca, a.counted, cb, b.counted)
	}
}

// BenchmarkStreamEvent decodes a typical stream, chunk by chunk, with the
// fast decoder (fast) and with encoding/json alone (json), side by side.
func BenchmarkStreamEvent(b *testing.B) {
	events := benchStream()
	for _, mode := range []string{"json", "fast"} {
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s := streamState{begin: time.Now()}
				for _, e := range events {
					var err error
					if mode == "fast" {
						err = s.event(e)
					} else {
						err = s.decodeEvent(e, e)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkSSEReader reads a typical stream's bytes into events, as a
// reader of each stream does: with a reader from the pool (pooled) and
// with a fresh one holding a 32 KiB buffer, as every stream once had
// (fresh32k), side by side.
func BenchmarkSSEReader(b *testing.B) {
	body := benchStreamBody()
	for _, mode := range []string{"fresh32k", "pooled"} {
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var r *sseReader
				if mode == "pooled" {
					r = newSSEReader(bytes.NewReader(body))
				} else {
					r = &sseReader{r: bufio.NewReaderSize(bytes.NewReader(body), 32<<10)}
				}
				for {
					_, done, err := r.next()
					if done || errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				if mode == "pooled" {
					r.release()
				}
			}
		})
	}
}
