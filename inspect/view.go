package inspect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"iter"
	"reflect"
	"strings"
)

// field is one msgpack field of a wire type.
type field struct {
	name      string
	omitEmpty bool
	index     int
}

// fieldsOf yields t's fields that have a msgpack name, in declaration
// order, which is the order they are encoded in.
func fieldsOf(t reflect.Type) iter.Seq[field] {
	return func(yield func(field) bool) {
		for i := range t.NumField() {
			tag, ok := t.Field(i).Tag.Lookup("msgpack")
			if !ok || tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if !yield(field{name: name, omitEmpty: opts == "omitempty", index: i}) {
				return
			}
		}
	}
}

// wireJSON writes a decoded wire type (a pointer to a struct) as one JSON
// object with its msgpack field names, in wire order, leaving out empty
// omitempty fields as the encoder does. Nested types (messages, params,
// usage) carry JSON names equal to their msgpack ones.
func wireJSON(v any) ([]byte, error) {
	rv := reflect.ValueOf(v).Elem()
	var buf bytes.Buffer
	buf.WriteByte('{')
	first := true
	for f := range fieldsOf(rv.Type()) {
		fv := rv.Field(f.index)
		if f.omitEmpty && fv.IsZero() {
			continue
		}
		val, err := json.Marshal(fv.Interface())
		if raw, ok := fv.Interface().(json.RawMessage); ok && err != nil {
			// An object field that holds no valid JSON: show it as the
			// string it is rather than fail.
			val, err = json.Marshal(string(raw))
		}
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", f.name, err)
		}
		name, _ := json.Marshal(f.name)
		if !first {
			buf.WriteByte(',')
		}
		first = false
		buf.Write(name)
		buf.WriteByte(':')
		buf.Write(val)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
