package schema

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"
)

func TestRoundTrip(t *testing.T) {
	temp := 0.6
	r := &Result{
		Run: "r1", ID: "p-1", Messages: []Message{{Role: "user", Content: "hi"}},
		Model: "m", Params: Params{MaxTokens: 10, Temperature: &temp},
		Reasoning: "because", Content: "hello", FinishReason: "stop",
		PromptTokens: 3, CompletionTokens: 7, Worker: "w", Attempts: 2,
		TTFTMillis: 12, LatencyMs: 340, FinishedAt: time.Unix(1700000000, 0).UTC(),
	}
	b, err := EncodeResult(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeResult(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.V != Version || got.ID != "p-1" || got.Reasoning != "because" || *got.Params.Temperature != 0.6 || !got.FinishedAt.Equal(r.FinishedAt) {
		t.Fatalf("round trip changed the result: %+v", got)
	}

	p := &Prompt{Run: "r1", ID: "x", Messages: []Message{{Role: "user", Content: "q"}}}
	b, err = EncodePrompt(p)
	if err != nil {
		t.Fatal(err)
	}
	gp, err := DecodePrompt(b)
	if err != nil || gp.ID != "x" || len(gp.Messages) != 1 {
		t.Fatalf("prompt round trip: %+v, %v", gp, err)
	}

	d := &DeadLetter{Run: "r1", ID: "x", Reason: ReasonPermanent, Status: 400}
	b, err = EncodeDeadLetter(d)
	if err != nil {
		t.Fatal(err)
	}
	gd, err := DecodeDeadLetter(b)
	if err != nil || gd.Status != 400 || gd.Reason != ReasonPermanent {
		t.Fatalf("dead letter round trip: %+v, %v", gd, err)
	}
}

func TestUnknownVersionIsAnError(t *testing.T) {
	b, err := msgpack.Marshal(&Prompt{V: Version + 1, ID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = DecodePrompt(b)
	var ve *VersionError
	if !errors.As(err, &ve) || ve.Got != Version+1 {
		t.Fatalf("want VersionError for version %d, got %v", Version+1, err)
	}
	if !strings.Contains(err.Error(), "upgrade aerie") {
		t.Errorf("version error does not say what to do: %v", err)
	}
}

func TestGarbageIsAnError(t *testing.T) {
	for _, b := range [][]byte{nil, {0xc1}, []byte("not msgpack at all"), {0x81, 0xa1, 'v', 0xa3, 'x', 'y', 'z'}, {0xdc, 0xff, 0xff}} {
		_, err := DecodeResult(b)
		var de *DecodeError
		var ve *VersionError
		if !errors.As(err, &de) && !errors.As(err, &ve) {
			t.Errorf("DecodeResult(%q) = %v, want a DecodeError or VersionError", b, err)
		}
	}
}

func TestCheckSchemaHeader(t *testing.T) {
	for _, tc := range []struct {
		kind, header string
		ok           bool
	}{
		{KindPrompt, "", true},
		{KindPrompt, SchemaHeader(KindPrompt), true},
		{KindPrompt, SchemaHeader(KindResult), false},
		{KindPrompt, "prompt/99", false},
		{KindPrompt, "prompt/x", false},
		{KindPrompt, "prompt", false},
	} {
		err := CheckSchemaHeader(tc.kind, tc.header)
		if (err == nil) != tc.ok {
			t.Errorf("CheckSchemaHeader(%q, %q) = %v, want ok=%v", tc.kind, tc.header, err, tc.ok)
		}
	}
}

func TestSubjectsAreSafe(t *testing.T) {
	for _, id := range []string{"a.b", "*", ">", "with space", "", "ünïcode", strings.Repeat("x", 10000)} {
		tok := SubjectToken(id)
		if len(tok) != 32 || strings.ContainsAny(tok, ".*> \t") {
			t.Errorf("SubjectToken(%q) = %q is not a safe token", id, tok)
		}
	}
	if SubjectToken("a") == SubjectToken("b") {
		t.Error("different ids share a token")
	}
	if got := SafeToken("gpu-01.example.com"); got != "gpu-01-example-com" {
		t.Errorf("SafeToken = %q", got)
	}
	if err := ValidateRun("kimi-k25_25k"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"", "a.b", "a b", "a>", strings.Repeat("x", 65)} {
		if ValidateRun(bad) == nil {
			t.Errorf("ValidateRun(%q) accepted a bad name", bad)
		}
	}
}

func TestDeadLetterPromptSeq(t *testing.T) {
	for _, tc := range []struct {
		header nats.Header
		want   uint64
		ok     bool
	}{
		{nats.Header{HeaderPromptSeq: {"42"}}, 42, true},
		{nats.Header{HeaderPromptSeq: {"x"}}, 0, false},
		{nats.Header{HeaderMsgID: {DeadMsgID("r", "abc", 17, 3)}}, 17, true},
		{nats.Header{HeaderMsgID: {MsgID("r", Unit{ID: "p"})}}, 0, false}, // an older dead letter's id carries no sequence
		{nats.Header{}, 0, false},
	} {
		got, ok := DeadLetterPromptSeq(tc.header)
		if got != tc.want || ok != tc.ok {
			t.Errorf("DeadLetterPromptSeq(%v) = %d, %v; want %d, %v", tc.header, got, ok, tc.want, tc.ok)
		}
	}
}
