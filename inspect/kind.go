package inspect

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/aerie-dev/aerie/schema"
)

// KindEvent is a JSON event (or anything else in JSON): it passes through
// as it is.
const KindEvent = "event"

// Kinds lists what Decode reads, as --kind takes them.
var Kinds = []string{schema.KindPrompt, schema.KindResult, schema.KindDeadLetter, schema.KindTurn, KindEvent}

// wireKinds are the msgpack kinds in the order payload detection tries
// them, each with its Go type.
var wireKinds = []struct {
	kind string
	typ  reflect.Type
}{
	{schema.KindPrompt, reflect.TypeFor[schema.Prompt]()},
	{schema.KindResult, reflect.TypeFor[schema.Result]()},
	{schema.KindDeadLetter, reflect.TypeFor[schema.DeadLetter]()},
	{schema.KindTurn, reflect.TypeFor[schema.Turn]()},
}

// kindOfSubject tells a message's kind from the root of its subject;
// "" when the subject is not one of aerie's.
func kindOfSubject(subject string) string {
	for root, kind := range map[string]string{
		schema.PromptsRoot: schema.KindPrompt,
		schema.ResultsRoot: schema.KindResult,
		schema.DeadRoot:    schema.KindDeadLetter,
		schema.TurnsRoot:   schema.KindTurn,
		schema.EventsRoot:  KindEvent,
	} {
		if strings.HasPrefix(subject, root+".") {
			return kind
		}
	}
	return ""
}

// kindOfHeader tells the kind named by an Aerie-Schema header value
// ("result/1"); the version is checked when the payload is decoded.
func kindOfHeader(header string) (string, error) {
	k, _, _ := strings.Cut(header, "/")
	if !slices.Contains(Kinds, k) {
		return "", fmt.Errorf("header %s is %q, which names no kind this aerie reads (%s)", schema.HeaderSchema, header, strings.Join(Kinds, ", "))
	}
	return k, nil
}

// kindOfPayload tells which wire type a msgpack map is: the one whose
// fields include every key of the map and whose fields that are always
// written (no omitempty) are all there. keys come from wireKeys.
func kindOfPayload(keys []string) (string, error) {
	for _, w := range wireKinds {
		known, required := fieldNames(w.typ)
		if allIn(keys, known) && allIn(required, keys) {
			return w.kind, nil
		}
	}
	return "", fmt.Errorf("payload is a msgpack map with keys %s, which is no prompt, result, dead letter or turn of schema version %d: give --kind if you know what it is", strings.Join(keys, ", "), schema.Version)
}

// checkPayload reports a payload whose keys do not fit kind: a message
// of another kind, named so by a wrong header, subject or --kind.
func checkPayload(kind string, keys []string) error {
	for _, w := range wireKinds {
		if w.kind != kind {
			continue
		}
		known, required := fieldNames(w.typ)
		var extra, missing []string
		for _, k := range keys {
			if !slices.Contains(known, k) {
				extra = append(extra, k)
			}
		}
		for _, k := range required {
			if !slices.Contains(keys, k) {
				missing = append(missing, k)
			}
		}
		if len(extra) > 0 || len(missing) > 0 {
			return fmt.Errorf("%s message does not fit its kind (unknown fields: %s; missing fields: %s): is it another kind of message?",
				kind, orNone(extra), orNone(missing))
		}
	}
	return nil
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func allIn(xs, set []string) bool {
	for _, x := range xs {
		if !slices.Contains(set, x) {
			return false
		}
	}
	return true
}

// fieldNames lists a wire type's msgpack field names, and those written
// even when zero.
func fieldNames(t reflect.Type) (known, required []string) {
	for f := range fieldsOf(t) {
		known = append(known, f.name)
		if !f.omitEmpty {
			required = append(required, f.name)
		}
	}
	return known, required
}

// wireKeys checks that b is exactly one msgpack map with string keys,
// nothing after it, and returns its keys in order.
func wireKeys(b []byte) (keys []string, err error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("the message body is empty")
	}
	// The msgpack library panics on some malformed input; bad input must
	// end in an error.
	defer func() {
		if r := recover(); r != nil {
			keys, err = nil, fmt.Errorf("payload is not valid msgpack: %v", r)
		}
	}()
	r := bytes.NewReader(b)
	dec := msgpack.NewDecoder(r)
	var m map[string]msgpack.RawMessage
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("payload is not a msgpack map: %w", err)
	}
	if m == nil {
		return nil, fmt.Errorf("payload is msgpack nil, not a message")
	}
	if r.Len() > 0 {
		return nil, fmt.Errorf("payload has %d bytes after its msgpack map", r.Len())
	}
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}
