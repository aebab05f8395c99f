package inspect

import (
	"encoding/json"
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

// FuzzDecodeAny feeds arbitrary input to Decode, bare and as the nats CLI
// prints a message: it must return valid JSON or an error, never panic,
// and a wire message it accepts must decode again as the kind it named.
func FuzzDecodeAny(f *testing.F) {
	for kind, b := range samples(f) {
		header := map[string]string{schema.HeaderSchema: schema.SchemaHeader(kind)}
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(printed("stream get", "aerie.results.r.abc", header, b))
		f.Add(printed("sub", "aerie.dead.r.abc", nil, b))
	}
	f.Add([]byte(`{"run":"r","phase":"steady"}`))
	f.Add([]byte(`{"subject":"aerie.prompts.r.a","data":"gqF2AQ=="}`))
	f.Add([]byte("[1] Subject: aerie.turns.r.a.0 Received: now\n\n  Aerie-Schema: turn/1\n\x80\n\n\n"))
	f.Add([]byte{})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff}) // a map claiming 4 billion entries

	f.Fuzz(func(t *testing.T, in []byte) {
		d, err := Decode(in, "")
		if err != nil {
			if d != nil || err.Error() == "" {
				t.Fatalf("error %q with a result %v", err, d)
			}
			return
		}
		if !json.Valid(d.JSON) {
			t.Fatalf("%s: invalid JSON %q", d.Kind, d.JSON)
		}
		if d.Kind == KindEvent {
			return
		}
		again, err := Decode(in, d.Kind)
		if err != nil || again.Kind != d.Kind || string(again.JSON) != string(d.JSON) {
			t.Fatalf("decoded as %s, but not again with --kind %s: %v", d.Kind, d.Kind, err)
		}
	})
}
