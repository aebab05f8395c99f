package inspect

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// samples are one message of each wire kind, encoded as aerie encodes
// them.
func samples(t testing.TB) map[string][]byte {
	temp := 0.6
	enc := map[string][]byte{}
	var err error
	must := func(b []byte, e error) []byte {
		if e != nil {
			err = e
		}
		return b
	}
	msgs := []schema.Message{{Role: "user", Content: "hello"}}
	enc[schema.KindPrompt] = must(schema.EncodePrompt(&schema.Prompt{Run: "r", ID: "q1", Messages: msgs, Source: "p.jsonl:1"}))
	enc[schema.KindResult] = must(schema.EncodeResult(&schema.Result{Run: "r", ID: "q1", Messages: msgs, Model: "m",
		Params:    schema.Params{Temperature: &temp, ChatTemplateKwargs: json.RawMessage(`{"enable_thinking":true}`)},
		Reasoning: "think", Content: "answer", FinishReason: "stop", CompletionTokens: 10, Worker: "w", Attempts: 1,
		LatencyMs: 10, FinishedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}))
	enc[schema.KindDeadLetter] = must(schema.EncodeDeadLetter(&schema.DeadLetter{Run: "r", ID: "q2", Messages: msgs,
		Reason: schema.ReasonPermanent, Status: 400, Error: "too long", Worker: "w", Attempts: 1}))
	enc[schema.KindTurn] = must(schema.EncodeTurn(&schema.Turn{Run: "r", ID: "q3", Index: 0,
		Answer: schema.Message{Role: "assistant", Content: "first", FinishReason: "stop"}, Worker: "w"}))
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// want is a field each sample's JSON must hold.
var want = map[string]string{
	schema.KindPrompt:     `"source":"p.jsonl:1"`,
	schema.KindResult:     `"finish_reason":"stop"`,
	schema.KindDeadLetter: `"reason":"permanent"`,
	schema.KindTurn:       `"answer":{"role":"assistant","content":"first","finish_reason":"stop"}`,
}

func TestDecodeBodies(t *testing.T) {
	for kind, b := range samples(t) {
		// A bare body, as --translate pipes it, and the same with a newline
		// after it, as `nats sub --raw` prints it.
		for _, in := range [][]byte{b, append(b[:len(b):len(b)], '\n')} {
			d, err := Decode(in, "")
			if err != nil {
				t.Fatalf("%s: %v", kind, err)
			}
			if d.Kind != kind || !strings.Contains(string(d.JSON), want[kind]) {
				t.Errorf("%s decoded as %s: %s", kind, d.Kind, d.JSON)
			}
			if !json.Valid(d.JSON) {
				t.Errorf("%s: invalid JSON %s", kind, d.JSON)
			}
		}
	}
}

func TestDecodeResultFields(t *testing.T) {
	d, err := Decode(samples(t)[schema.KindResult], "")
	if err != nil {
		t.Fatal(err)
	}
	got := string(d.JSON)
	for _, w := range []string{
		`{"v":1,"run":"r","id":"q1",`, // wire order, wire names
		`"params":{"temperature":0.6,"chat_template_kwargs":{"enable_thinking":true}}`,
		`"finished_at":"2026-12-01T00:00:00Z"`,
	} {
		if !strings.Contains(got, w) {
			t.Errorf("result JSON lacks %s:\n%s", w, got)
		}
	}
	if strings.Contains(got, `"truncated"`) {
		t.Errorf("an empty omitempty field is shown: %s", got)
	}
}

// printed renders a message the way natscli v0.5.0 prints it.
func printed(form, subject string, header map[string]string, body []byte) []byte {
	var s strings.Builder
	switch form {
	case "stream get":
		fmt.Fprintf(&s, "Item: AERIE_RESULTS#5 received 2026-12-01 10:00:00 +0000 UTC (1s) on Subject %s\n\nHeaders:\n", subject)
		for k, v := range header {
			fmt.Fprintf(&s, "  %s: %s\n", k, v)
		}
		s.WriteString("\n")
	case "stream view":
		fmt.Fprintf(&s, "[5] Subject: %s Received: 2026-12-01T10:00:00Z\n\n", subject)
		for k, v := range header {
			fmt.Fprintf(&s, "  %s: %s\n", k, v)
		}
	case "sub":
		fmt.Fprintf(&s, "[#1] Received on %q\n", subject)
		for k, v := range header {
			fmt.Fprintf(&s, "%s: %s\n", k, v)
		}
		s.WriteString("\n")
	}
	s.Write(body)
	// outPutMSGBody: a newline unless the body ends in one, then a blank
	// line, and another when the body did not end in a newline.
	if strings.HasSuffix(string(body), "\n") {
		s.WriteString("\n")
	} else {
		s.WriteString("\n\n\n")
	}
	return []byte(s.String())
}

func TestDecodePrinted(t *testing.T) {
	for kind, b := range samples(t) {
		header := map[string]string{schema.HeaderSchema: schema.SchemaHeader(kind), schema.HeaderRun: "r"}
		for _, form := range []string{"stream get", "stream view", "sub"} {
			for _, body := range [][]byte{b, append(b[:len(b):len(b)], 0x0a)} {
				if len(body) > len(b) {
					// A body that really ends in byte 0x0a is no valid
					// message; tell it only by its header.
					continue
				}
				in := printed(form, "aerie.x.r.abc", header, body)
				d, err := Decode(in, "")
				if err != nil {
					t.Fatalf("%s printed by %s: %v\n%q", kind, form, err, in)
				}
				if d.Kind != kind || !strings.Contains(string(d.JSON), want[kind]) {
					t.Errorf("%s printed by %s decoded as %s: %s", kind, form, d.Kind, d.JSON)
				}
			}
		}
	}
}

func TestDecodeJSONForms(t *testing.T) {
	b := samples(t)[schema.KindDeadLetter]
	hdrs := "NATS/1.0\r\n" + schema.HeaderSchema + ": dead/1\r\n\r\n"
	stored := fmt.Sprintf(`{"subject":"aerie.dead.r.abc","seq":3,"hdrs":%q,"data":%q,"time":"2026-12-01T00:00:00Z"}`,
		base64.StdEncoding.EncodeToString([]byte(hdrs)), base64.StdEncoding.EncodeToString(b))
	dump := fmt.Sprintf(`{"Subject":"aerie.dead.r.abc","Reply":"","Header":{"Aerie-Schema":["dead/1"]},"Data":%q,"Sub":null}`+"\x00",
		base64.StdEncoding.EncodeToString(b))
	for name, in := range map[string]string{"stream get --json": stored, "sub --dump": dump} {
		d, err := Decode([]byte(in), "")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d.Kind != schema.KindDeadLetter || !strings.Contains(string(d.JSON), want[schema.KindDeadLetter]) {
			t.Errorf("%s: decoded as %s: %s", name, d.Kind, d.JSON)
		}
	}
}

func TestDecodeEvent(t *testing.T) {
	d, err := Decode([]byte("{\"run\": \"r\",\n \"phase\": \"steady\"}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != KindEvent || string(d.JSON) != `{"run":"r","phase":"steady"}` {
		t.Errorf("event: %s %s", d.Kind, d.JSON)
	}
}

func TestDecodeErrors(t *testing.T) {
	enc := samples(t)
	for _, tc := range []struct {
		name, kind string
		in         []byte
		want       string
	}{
		{"empty", "", nil, "empty"},
		{"text", "", []byte("hello"), "not a msgpack map"},
		{"bad JSON event", "", []byte(`{"run":`), "not valid JSON"},
		{"unknown kind flag", "manifest", enc[schema.KindPrompt], `kind "manifest"`},
		{"wrong kind flag", schema.KindResult, enc[schema.KindTurn], "result message"},
		{"cut short", "", enc[schema.KindResult][:20], "msgpack"},
		{"unknown keys", "", []byte{0x81, 0xa1, 'x', 0x01}, "keys x"},
		{"header names another kind", "", printed("sub", "s", map[string]string{schema.HeaderSchema: "result/1"}, enc[schema.KindPrompt]), "result message"},
		{"header from a newer aerie", "", printed("sub", "s", map[string]string{schema.HeaderSchema: "prompt/9"}, enc[schema.KindPrompt]), "version 9"},
		{"header of no kind", "", printed("sub", "s", map[string]string{schema.HeaderSchema: "lease/1"}, enc[schema.KindPrompt]), "names no kind"},
	} {
		d, err := Decode(tc.in, tc.kind)
		if err == nil {
			t.Errorf("%s: decoded as %s: %s", tc.name, d.Kind, d.JSON)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not say %q", tc.name, err, tc.want)
		}
	}
}
