package schema

import (
	"errors"
	"testing"
	"time"
)

// FuzzDecode feeds arbitrary bytes to every decoder: each must return a
// value or a *DecodeError / *VersionError, never panic, and a value it
// accepts must survive a round trip.
func FuzzDecode(f *testing.F) {
	temp := 0.7
	for _, v := range []any{
		&Prompt{Run: "r", ID: "p", Messages: []Message{{Role: "user", Content: "q"}}, Source: "f:1"},
		&Result{Run: "r", ID: "p", Messages: []Message{{Role: "user", Content: "q"}}, Params: Params{MaxTokens: 9, Temperature: &temp},
			Reasoning: "r", Content: "c", FinishReason: "stop", CompletionTokens: 5, FinishedAt: time.Unix(1, 0)},
		&DeadLetter{Run: "r", ID: "p", Reason: ReasonPermanent, Status: 400, Error: "e", Body: "{}"},
	} {
		var b []byte
		var err error
		switch x := v.(type) {
		case *Prompt:
			b, err = EncodePrompt(x)
		case *Result:
			b, err = EncodeResult(x)
		case *DeadLetter:
			b, err = EncodeDeadLetter(x)
		}
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{})
	f.Add([]byte("garbage"))
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff}) // a map claiming 4 billion entries
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}) // an array claiming as many

	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(err error) {
			var de *DecodeError
			var ve *VersionError
			if err != nil && !errors.As(err, &de) && !errors.As(err, &ve) {
				t.Fatalf("error of unexpected type %T: %v", err, err)
			}
		}
		p, err := DecodePrompt(b)
		check(err)
		if err == nil {
			b2, err := EncodePrompt(p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := DecodePrompt(b2); err != nil {
				t.Fatalf("re-encoded prompt does not decode: %v", err)
			}
		}
		_, err = DecodeResult(b)
		check(err)
		_, err = DecodeDeadLetter(b)
		check(err)
		_, err = DecodeManifest(b)
		check(err)
	})
}
