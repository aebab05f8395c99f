package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// Kinds of wire message, as named in HeaderSchema.
const (
	KindPrompt     = "prompt"
	KindResult     = "result"
	KindDeadLetter = "dead"
)

// SchemaHeader is the HeaderSchema value this build writes for kind.
func SchemaHeader(kind string) string { return kind + "/" + strconv.Itoa(Version) }

// VersionError reports a message written with a schema version this build
// does not read.
type VersionError struct {
	Kind string
	Got  int
	// Reads is the versions this build reads, when not Version alone.
	Reads string
}

func (e *VersionError) Error() string {
	reads := "version " + strconv.Itoa(Version)
	if e.Reads != "" {
		reads = "versions " + e.Reads
	}
	return fmt.Sprintf("%s message has schema version %d, this aerie (%s) reads %s: upgrade aerie on this host", e.Kind, e.Got, BuildVersion(), reads)
}

// DecodeError reports a payload that is not a valid message of its kind.
type DecodeError struct {
	Kind string
	Err  error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("%s message is not valid msgpack of schema version %d: %v", e.Kind, Version, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// versioned is implemented by every wire type.
type versioned interface{ version() int }

func (p *Prompt) version() int     { return p.V }
func (r *Result) version() int     { return r.V }
func (d *DeadLetter) version() int { return d.V }

// EncodePrompt marshals p, stamping the current schema version.
func EncodePrompt(p *Prompt) ([]byte, error) {
	p.V = Version
	return encode(KindPrompt, p)
}

// EncodeResult marshals r, stamping the current schema version.
func EncodeResult(r *Result) ([]byte, error) {
	r.V = Version
	return encode(KindResult, r)
}

// EncodeDeadLetter marshals d, stamping the current schema version.
func EncodeDeadLetter(d *DeadLetter) ([]byte, error) {
	d.V = Version
	return encode(KindDeadLetter, d)
}

func encode(kind string, v any) ([]byte, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", kind, err)
	}
	return b, nil
}

// DecodePrompt unmarshals a prompt message.
func DecodePrompt(b []byte) (*Prompt, error) {
	p := new(Prompt)
	return p, decode(KindPrompt, b, p)
}

// DecodeResult unmarshals a result message.
func DecodeResult(b []byte) (*Result, error) {
	r := new(Result)
	return r, decode(KindResult, b, r)
}

// DecodeDeadLetter unmarshals a dead-letter message.
func DecodeDeadLetter(b []byte) (*DeadLetter, error) {
	d := new(DeadLetter)
	return d, decode(KindDeadLetter, b, d)
}

func decode(kind string, b []byte, v versioned) (err error) {
	if len(b) == 0 {
		return &DecodeError{Kind: kind, Err: errors.New("empty payload")}
	}
	// The msgpack library panics on some malformed input (a nil where a
	// time.Time is expected, for one); a message from the wire must never
	// take a worker or the aggregator down.
	defer func() {
		if r := recover(); r != nil {
			err = &DecodeError{Kind: kind, Err: fmt.Errorf("malformed payload: %v", r)}
		}
	}()
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return &DecodeError{Kind: kind, Err: err}
	}
	if got := v.version(); got != Version {
		return &VersionError{Kind: kind, Got: got}
	}
	return nil
}

// CheckSchemaHeader validates a HeaderSchema value before decoding, so that
// a message of the wrong kind or version is reported as such rather than
// as garbage. An empty header is accepted: the payload's version decides.
func CheckSchemaHeader(kind, header string) error {
	if header == "" {
		return nil
	}
	k, v, ok := strings.Cut(header, "/")
	if !ok || k != kind {
		return &DecodeError{Kind: kind, Err: fmt.Errorf("header %s is %q, want %q", HeaderSchema, header, SchemaHeader(kind))}
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return &DecodeError{Kind: kind, Err: fmt.Errorf("header %s is %q: version is not a number", HeaderSchema, header)}
	}
	if n != Version {
		return &VersionError{Kind: kind, Got: n}
	}
	return nil
}

// EncodeManifest marshals a manifest as indented JSON, completing its
// Needs and stamping the lowest version that can say them: 1 when the
// run needs no feature, so that every aerie serves it, ManifestVersion
// otherwise.
func EncodeManifest(m *Manifest) ([]byte, error) {
	m.Needs = union(m.Needs, m.Uses())
	m.V = ManifestVersion1
	if len(m.Needs) > 0 {
		m.V = ManifestVersion
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode manifest of run %s: %w", m.Run, err)
	}
	return b, nil
}

// DecodeManifest unmarshals a manifest of version 1 or ManifestVersion
// and completes its Needs. It does not check them: a reader that lacks a
// feature says so itself (see Lacking), and tools that only show a run
// show it all the same.
func DecodeManifest(b []byte) (*Manifest, error) {
	m := new(Manifest)
	if err := json.Unmarshal(b, m); err != nil {
		return nil, &DecodeError{Kind: "manifest", Err: err}
	}
	if m.V != ManifestVersion1 && m.V != ManifestVersion {
		return nil, &VersionError{Kind: "manifest", Got: m.V, Reads: "1 and 2"}
	}
	m.Needs = union(m.Needs, m.Uses())
	// The manifest is stored indented, which indents its JSON objects too:
	// give them back in the canonical form every other copy has.
	for _, obj := range []*json.RawMessage{&m.Params.ChatTemplateKwargs, &m.Params.ExtraBody} {
		if len(*obj) > 0 {
			c, err := CanonicalObject(*obj)
			if err != nil {
				return nil, &DecodeError{Kind: "manifest", Err: fmt.Errorf("params: %w", err)}
			}
			*obj = c
		}
	}
	return m, nil
}
