package schema

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// wireTags returns "Type.name" for every tagged field of every struct type
// declared in this package's non-test files, found by parsing them, so
// that a type or field added anywhere in the package is seen.
func wireTags(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, fl := range st.Fields.List {
				if fl.Tag == nil {
					continue
				}
				if name := wireName(reflect.StructTag(strings.Trim(fl.Tag.Value, "`"))); name != "" {
					out = append(out, ts.Name.Name+"."+name)
				}
			}
			return true
		})
	}
	slices.Sort(out)
	return out
}

// wireName is a field's name on the wire: its msgpack name, else its
// JSON name; "" for neither (or "-").
func wireName(tag reflect.StructTag) string {
	for _, key := range []string{"msgpack", "json"} {
		if v, ok := tag.Lookup(key); ok {
			name, _, _ := strings.Cut(v, ",")
			if name != "" && name != "-" {
				return name
			}
		}
	}
	return ""
}

// TestWireFieldsAreClassified is the rule that a wire field is never
// added unnoticed: each one is part of its type from the start, tied to
// a feature this build implements, or noted as one old readers may
// ignore, with why.
func TestWireFieldsAreClassified(t *testing.T) {
	tags := wireTags(t)
	if len(tags) < 100 {
		t.Fatalf("found %d wire fields: the parse missed the package's types", len(tags))
	}
	for _, name := range tags {
		rule, ok := wireFields[name]
		if !ok {
			t.Errorf("wire field %s is in no list: add it to wireFields with the feature a reader needs to handle it (a new one in features.go if none fits, in Uses too), or ignorable(why an older reader may ignore it)", name)
			continue
		}
		kinds := 0
		for _, set := range []bool{rule.base, rule.feature != "", rule.ignore != ""} {
			if set {
				kinds++
			}
		}
		if kinds != 1 {
			t.Errorf("wireFields[%q] must be exactly one of base, needs(feature) and ignorable(why)", name)
		}
		if f := rule.feature; f != "" && f != "task-*" && !Implements(f) {
			t.Errorf("wire field %s needs feature %q, which this build does not implement", name, f)
		}
	}
	for name := range wireFields {
		if !slices.Contains(tags, name) {
			t.Errorf("wireFields lists %s, which is no wire field of this package: remove it", name)
		}
	}
}

// versionOneFields are the fields that are part of their type from the
// start, frozen here: a field added since is a feature or ignorable,
// never base, and adding one to this list is a change a reviewer sees.
var versionOneFields = []string{
	"DeadLetter.attempts", "DeadLetter.body", "DeadLetter.error", "DeadLetter.failed_at", "DeadLetter.id",
	"DeadLetter.messages", "DeadLetter.reason", "DeadLetter.run", "DeadLetter.status", "DeadLetter.v", "DeadLetter.worker",
	"Heartbeat.completed", "Heartbeat.dead_lettered", "Heartbeat.in_flight", "Heartbeat.in_flight_tokens",
	"Heartbeat.retried", "Heartbeat.run", "Heartbeat.time", "Heartbeat.tokens_streamed", "Heartbeat.window", "Heartbeat.worker",
	"Lease.acquired_at", "Lease.holder", "Lease.host", "Lease.pid", "Lease.renewed_at",
	"Manifest.created_at", "Manifest.model", "Manifest.params", "Manifest.producer", "Manifest.run", "Manifest.source",
	"Manifest.total", "Manifest.v",
	"Message.content", "Message.role",
	"Params.max_tokens", "Params.temperature", "Params.top_p",
	"Prompt.id", "Prompt.messages", "Prompt.run", "Prompt.source", "Prompt.v",
	"Result.attempts", "Result.completion_tokens", "Result.content", "Result.finish_reason", "Result.finished_at",
	"Result.id", "Result.latency_ms", "Result.messages", "Result.model", "Result.params", "Result.prompt_tokens",
	"Result.reasoning", "Result.run", "Result.ttft_ms", "Result.v", "Result.worker",
	"Usage.completion_tokens", "Usage.prompt_tokens",
}

func TestBaseFieldsAreFrozen(t *testing.T) {
	var got []string
	for name, rule := range wireFields {
		if rule.base {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(versionOneFields))
	if !slices.Equal(got, want) {
		for _, n := range got {
			if !slices.Contains(want, n) {
				t.Errorf("%s is listed as base, but only fields that were part of their type from the start are: tie it to a feature, or say why old readers may ignore it", n)
			}
		}
		for _, n := range want {
			if !slices.Contains(got, n) {
				t.Errorf("%s was part of its type from the start and is no longer listed as base", n)
			}
		}
	}
}

// nonZero sets v, a field named name, to a value its message's Uses
// counts: the special values of string settings, else any non-zero one.
func nonZero(t *testing.T, name string, v reflect.Value) {
	t.Helper()
	special := map[string]string{
		"Manifest.turns": TurnsAll, "Manifest.context_reasoning": ContextReasoningKeep,
		"Manifest.task": "extraction", "Policy.on_length": OnLengthRetry,
	}
	if s, ok := special[name]; ok {
		v.SetString(s)
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int64:
		v.SetInt(2)
	case reflect.Uint64:
		v.SetUint(2)
	case reflect.Float64:
		v.SetFloat(2)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		if v.Elem().Kind() != reflect.Struct {
			nonZero(t, "", v.Elem())
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 { // json.RawMessage
			v.SetBytes([]byte(`{"k":1}`))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		nonZero(t, "", v.Index(0))
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Now()))
			return
		}
		nonZero(t, "", v.Field(0))
	default:
		t.Fatalf("%s: no non-zero value for kind %v", name, v.Kind())
	}
}

// fieldByWireName is the field of struct value s named name on the wire.
func fieldByWireName(s reflect.Value, name string) (reflect.Value, bool) {
	for i := range s.NumField() {
		if wireName(s.Type().Field(i).Tag) == name {
			return s.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// TestFeatureFieldsAreNeeded is the other half of the rule: a field tied
// to a feature makes its message need it once set, so that a reader
// without the feature never takes it. The parts of messages (Message,
// Params, Policy) are set inside each message that carries them.
func TestFeatureFieldsAreNeeded(t *testing.T) {
	type carrier struct {
		name string
		// make returns a message, the struct value in it that holds the
		// part's fields, and its features.
		make func() (any, reflect.Value, func() []string)
	}
	msg := func(part string) []carrier {
		switch part {
		case "Message":
			return []carrier{
				{"Prompt.messages", func() (any, reflect.Value, func() []string) {
					p := &Prompt{Messages: make([]Message, 1)}
					return p, reflect.ValueOf(&p.Messages[0]).Elem(), p.Uses
				}},
				{"Result.messages", func() (any, reflect.Value, func() []string) {
					r := &Result{Messages: make([]Message, 1)}
					return r, reflect.ValueOf(&r.Messages[0]).Elem(), r.Uses
				}},
				{"DeadLetter.messages", func() (any, reflect.Value, func() []string) {
					d := &DeadLetter{Messages: make([]Message, 1)}
					return d, reflect.ValueOf(&d.Messages[0]).Elem(), d.Uses
				}},
			}
		case "Params":
			return []carrier{
				{"Manifest.params", func() (any, reflect.Value, func() []string) {
					m := &Manifest{}
					return m, reflect.ValueOf(&m.Params).Elem(), m.Uses
				}},
				{"Prompt.params", func() (any, reflect.Value, func() []string) {
					p := &Prompt{Params: &Params{}}
					return p, reflect.ValueOf(p.Params).Elem(), p.Uses
				}},
				{"Result.params", func() (any, reflect.Value, func() []string) {
					r := &Result{}
					return r, reflect.ValueOf(&r.Params).Elem(), r.Uses
				}},
			}
		case "Policy":
			return []carrier{{"Manifest.policy", func() (any, reflect.Value, func() []string) {
				m := &Manifest{}
				return m, reflect.ValueOf(&m.Policy).Elem(), m.Uses
			}}}
		case "Extraction":
			return []carrier{{"Manifest.extraction", func() (any, reflect.Value, func() []string) {
				m := &Manifest{Extraction: &Extraction{}}
				return m, reflect.ValueOf(m.Extraction).Elem(), m.Uses
			}}}
		case "HiddenStatesFile":
			return []carrier{{"Result.hidden_states", func() (any, reflect.Value, func() []string) {
				r := &Result{HiddenStates: &HiddenStatesFile{}}
				return r, reflect.ValueOf(r.HiddenStates).Elem(), r.Uses
			}}}
		case "Manifest":
			return []carrier{{"Manifest", func() (any, reflect.Value, func() []string) {
				m := &Manifest{}
				return m, reflect.ValueOf(m).Elem(), m.Uses
			}}}
		case "Prompt":
			return []carrier{{"Prompt", func() (any, reflect.Value, func() []string) {
				p := &Prompt{}
				return p, reflect.ValueOf(p).Elem(), p.Uses
			}}}
		case "Result":
			return []carrier{{"Result", func() (any, reflect.Value, func() []string) {
				r := &Result{}
				return r, reflect.ValueOf(r).Elem(), r.Uses
			}}}
		case "DeadLetter":
			return []carrier{{"DeadLetter", func() (any, reflect.Value, func() []string) {
				d := &DeadLetter{}
				return d, reflect.ValueOf(d).Elem(), d.Uses
			}}}
		}
		return nil
	}
	checked := 0
	for name, rule := range wireFields {
		if rule.feature == "" {
			continue
		}
		typ, field, _ := strings.Cut(name, ".")
		carriers := msg(typ)
		if len(carriers) == 0 {
			// Turn is read only by workers of --turns all runs, which
			// need the feature as a whole; Usage only inside a
			// Message.usage, itself a feature.
			if typ != "Turn" && typ != "Usage" {
				t.Errorf("%s needs feature %s, but no message's Uses is checked for it: add its carriers here", name, rule.feature)
			}
			continue
		}
		for _, c := range carriers {
			_, s, uses := c.make()
			v, ok := fieldByWireName(s, field)
			if !ok {
				t.Fatalf("%s: no field %s", c.name, field)
			}
			nonZero(t, name, v)
			want := rule.feature
			if want == "task-*" {
				want = TaskFeature("extraction")
			}
			if got := uses(); !slices.Contains(got, want) {
				t.Errorf("%s set (in %s): Uses gives %v, want it to include %s", name, c.name, got, want)
			}
			checked++
		}
	}
	if checked < 30 {
		t.Errorf("checked %d feature fields; the list has more", checked)
	}
}
