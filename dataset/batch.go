package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aerie-dev/aerie/schema"
)

// BatchURL is the only endpoint an OpenAI Batch input line may name:
// aerie regenerates chat completions.
const BatchURL = "/v1/chat/completions"

// batchFields are the fields of an OpenAI Batch request line (the shape
// `vllm run-batch` reads too).
type batchFields struct {
	CustomID json.RawMessage `json:"custom_id"`
	Method   json.RawMessage `json:"method"`
	URL      json.RawMessage `json:"url"`
	Body     json.RawMessage `json:"body"`
	// LengthHint is the line's own length_hint, beside custom_id.
	LengthHint json.RawMessage `json:"length_hint"`
}

// batchMarker is looked for before a line is decoded as a Batch request,
// so that other lines pay no second decoding.
var batchMarker = []byte(`"custom_id"`)

// asBatch decodes line as an OpenAI Batch request line; ok is false when
// it is not one (no custom_id and body both given).
func asBatch(line []byte) (f batchFields, ok bool) {
	if !bytes.Contains(line, batchMarker) {
		return f, false
	}
	if json.Unmarshal(line, &f) != nil {
		return f, false
	}
	return f, present(f.CustomID) && present(f.Body)
}

// parseBatch reads an OpenAI Batch request line:
//
//	{"custom_id": "request-1", "method": "POST", "url": "/v1/chat/completions",
//	 "body": {"model": "...", "messages": [...], "max_completion_tokens": 1000}}
//
// custom_id is the id (by ParseID's rule); body.messages are read as a
// line's messages; every other body key but model is a request parameter
// of this prompt (schema.ParamsFromJSON: max_completion_tokens is
// max_tokens; stream and n other than 1 are refused). The method must be
// POST (or absent) and the url BatchURL; body.model, when given and when
// opts.Model is set, must be the run's model.
func parseBatch(f batchFields, opts ParseOptions) (Line, error) {
	if present(f.Method) {
		var m string
		if json.Unmarshal(f.Method, &m) != nil || m != "POST" {
			return Line{}, fmt.Errorf("method is %s: an OpenAI Batch line must be a POST to %s", describe(f.Method), BatchURL)
		}
	}
	var url string
	if !present(f.URL) {
		return Line{}, fmt.Errorf("no url: an OpenAI Batch line must name the endpoint, %q", BatchURL)
	}
	if json.Unmarshal(f.URL, &url) != nil || url != BatchURL {
		return Line{}, fmt.Errorf("url is %s: aerie regenerates chat completions, so the url must be %q", describe(f.URL), BatchURL)
	}
	id, err := ParseID(f.CustomID)
	if err != nil {
		return Line{}, fmt.Errorf("custom_id: %w", err)
	}
	if f.Body[0] != '{' {
		return Line{}, fmt.Errorf("body must be an object with model and messages, found %s", kindOf(f.Body))
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(f.Body, &body); err != nil {
		return Line{}, fmt.Errorf("body: %v", err)
	}
	if raw, ok := body["model"]; ok && present(raw) && opts.Model != "" {
		var model string
		if json.Unmarshal(raw, &model) != nil || model != opts.Model {
			return Line{}, fmt.Errorf("body.model is %s but the run's model is %q: produce this file into a run of that model, or change the lines' model", describe(raw), opts.Model)
		}
	}
	rawMsgs := body["messages"]
	if !present(rawMsgs) {
		return Line{}, errors.New("body has no messages")
	}
	msgs, answer, err := parseTurns(rawMsgs, "body.messages", opts.Turns == schema.TurnsAll)
	if err != nil {
		return Line{}, err
	}
	hint, err := lengthHint(f.LengthHint, answer)
	if err != nil {
		return Line{}, err
	}
	delete(body, "model")
	delete(body, "messages")
	var params *schema.Params
	if len(body) > 0 {
		rest, err := json.Marshal(body)
		if err != nil {
			return Line{}, fmt.Errorf("body: %v", err)
		}
		p, err := schema.ParamsFromJSON(rest)
		if err != nil {
			return Line{}, fmt.Errorf("body: %w", err)
		}
		if !p.IsZero() {
			params = &p
		}
	}
	return Line{ID: id, Messages: msgs, Params: params, LengthHint: hint}, nil
}
