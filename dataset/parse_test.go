package dataset

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aerie-dev/aerie/schema"
)

func user(s string) schema.Message      { return schema.Message{Role: "user", Content: s} }
func system(s string) schema.Message    { return schema.Message{Role: "system", Content: s} }
func assistant(s string) schema.Message { return schema.Message{Role: "assistant", Content: s} }

func sameMessages(a, b []schema.Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

// Every accepted line shape, with the id and messages it must give. An
// empty want id means "derived from the content".
func TestParseLineShapes(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		id         string
		msgs       []schema.Message
	}{
		{"messages", `{"id":"a","messages":[{"role":"user","content":"hi"}]}`, "a", []schema.Message{user("hi")}},
		{"system and final assistant dropped", `{"id":"a","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"},{"role":"assistant","content":"old"}]}`,
			"a", []schema.Message{system("s"), user("q")}},
		{"final assistant placeholder null", `{"id":"a","messages":[{"role":"user","content":"q"},{"role":"assistant","content":null}]}`, "a", []schema.Message{user("q")}},
		{"final assistant without content", `{"id":"a","messages":[{"role":"user","content":"q"},{"role":"assistant"}]}`, "a", []schema.Message{user("q")}},
		{"multi-turn kept", `{"id":"a","messages":[{"role":"user","content":"1"},{"role":"assistant","content":"2"},{"role":"user","content":"3"}]}`,
			"a", []schema.Message{user("1"), assistant("2"), user("3")}},
		{"role case folded", `{"id":"a","messages":[{"role":"User","content":"q"}]}`, "a", []schema.Message{user("q")}},
		{"specforge conversations", `{"id":"sf-1","conversations":[{"role":"user","content":"q"},{"role":"assistant","content":"","reasoning_content":""}]}`,
			"sf-1", []schema.Message{user("q")}},
		{"sharegpt human gpt", `{"id":"sg","conversations":[{"from":"human","value":"q"},{"from":"gpt","value":"a"}]}`, "sg", []schema.Message{user("q")}},
		{"sharegpt system and multi-turn", `{"id":"sg","conversations":[{"from":"system","value":"s"},{"from":"human","value":"q1"},{"from":"gpt","value":"a1"},{"from":"human","value":"q2"},{"from":"gpt","value":"a2"}]}`,
			"sg", []schema.Message{system("s"), user("q1"), assistant("a1"), user("q2")}},
		{"sharegpt user assistant names", `{"id":"sg","conversations":[{"from":"user","value":"q"},{"from":"assistant","value":"a"}]}`, "sg", []schema.Message{user("q")}},
		{"prompt", `{"id":"p","prompt":"hello"}`, "p", []schema.Message{user("hello")}},
		{"messages win over prompt", `{"prompt":"ignored","prompt_id":"x","messages":[{"role":"user","content":"q"}],"id":"u"}`, "u", []schema.Message{user("q")}},
		{"text parts joined", `{"id":"a","messages":[{"role":"user","content":[{"type":"text","text":"one"},{"type":"text","text":"two"}]}]}`,
			"a", []schema.Message{user("one\ntwo")}},
		{"unicode and escapes", `{"id":"ü","prompt":"caf\u00e9 \ud83d\ude00 \"q\"\n"}`, "ü", []schema.Message{user("café 😀 \"q\"\n")}},
		{"extra fields ignored", `{"id":"a","source":"x","meta":{"k":[1,2]},"prompt":"q"}`, "a", []schema.Message{user("q")}},
		{"trailing white space", "{\"id\":\"a\",\"prompt\":\"q\"} \r", "a", []schema.Message{user("q")}},
		{"integer id", `{"id":12,"prompt":"q"}`, "12", []schema.Message{user("q")}},
		{"negative id", `{"id":-3,"prompt":"q"}`, "-3", []schema.Message{user("q")}},
		{"large integer id keeps digits", `{"id":123456789012345678901234567890,"prompt":"q"}`, "123456789012345678901234567890", []schema.Message{user("q")}},
		{"fraction as string id", `{"id":"2.50","prompt":"q"}`, "2.50", []schema.Message{user("q")}},
		{"large integer id keeps its digits", `{"id":123456789012345678901234567890,"prompt":"q"}`, "123456789012345678901234567890", []schema.Message{user("q")}},
		{"minus zero id", `{"id":-0,"prompt":"q"}`, "0", []schema.Message{user("q")}},
		{"id with dots and spaces", `{"id":"a.b c>*","prompt":"q"}`, "a.b c>*", []schema.Message{user("q")}},
		{"null id derived", `{"id":null,"prompt":"q"}`, "", []schema.Message{user("q")}},
		{"absent id derived", `{"messages":[{"role":"user","content":"q"}]}`, "", []schema.Message{user("q")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, msgs, err := ParseLine([]byte(tc.line))
			if err != nil {
				t.Fatalf("ParseLine(%s): %v", tc.line, err)
			}
			want := tc.id
			if want == "" {
				want = ContentID(tc.msgs)
			}
			if id != want {
				t.Errorf("id = %q, want %q", id, want)
			}
			if !sameMessages(msgs, tc.msgs) {
				t.Errorf("messages = %+v, want %+v", msgs, tc.msgs)
			}
		})
	}
}

// Every way a line can be wrong, with (part of) the reason it must give.
func TestParseLineErrors(t *testing.T) {
	long := strings.Repeat("x", MaxIDBytes+1)
	for _, tc := range []struct {
		name, line, reason string
	}{
		{"empty", ``, "not JSON: unexpected end of JSON input"},
		{"truncated", `{"id":"a","prompt":`, "not JSON"},
		{"not json", `hello`, "not JSON: invalid character 'h'"},
		{"two values", `{"prompt":"a"} {"prompt":"b"}`, "not JSON"},
		{"array line", `[{"prompt":"a"}]`, "line is a JSON array, not an object"},
		{"string line", `"prompt"`, "line is a JSON string"},
		{"no prompt field", `{"id":"a"}`, "no messages, conversations or prompt field"},
		{"null messages", `{"id":"a","messages":null}`, "no messages, conversations or prompt field"},
		{"messages not a list", `{"messages":"hi"}`, "messages must be a list of {role, content} objects, found string"},
		{"messages empty", `{"messages":[]}`, "messages is empty"},
		{"conversations empty", `{"conversations":[]}`, "conversations is empty"},
		{"message not object", `{"messages":[1]}`, "message 1 must be an object with role and content, found number"},
		{"no role", `{"messages":[{"content":"x"}]}`, "message 1: no role (or from) field"},
		{"role not string", `{"messages":[{"role":"user","content":"x"},{"role":5,"content":"y"}]}`, "message 2: role must be a string, found number"},
		{"from not string", `{"conversations":[{"from":["x"],"value":"q"}]}`, "message 1: from must be a string, found array"},
		{"unknown role", `{"messages":[{"role":"robot","content":"x"}]}`, `message 1: unknown role "robot"`},
		{"no content", `{"messages":[{"role":"user"}]}`, "message 1: no content (or value) field"},
		{"no value", `{"conversations":[{"from":"human"}]}`, "message 1: no content (or value) field"},
		{"empty content", `{"messages":[{"role":"user","content":""}]}`, "message 1: empty content"},
		{"blank content", `{"messages":[{"role":"system","content":"s"},{"role":"user","content":" \n\t"}]}`, "message 2: empty content"},
		{"empty system content", `{"messages":[{"role":"system","content":""},{"role":"user","content":"q"}]}`, "message 1: empty content"},
		{"content number", `{"messages":[{"role":"user","content":5}]}`, "message 1 content must be a string or a list of text parts, found number"},
		{"invalid utf-8 content", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\xffb\"}]}", "invalid UTF-8 in message 1 content"},
		{"lone surrogate content", `{"messages":[{"role":"user","content":"a\ud800b"}]}`, "message 1 content has an unpaired UTF-16 surrogate escape"},
		{"lone low surrogate", `{"messages":[{"role":"user","content":"\udc00"}]}`, "unpaired UTF-16 surrogate"},
		{"high surrogate at end", `{"messages":[{"role":"user","content":"x\ud83d"}]}`, "unpaired UTF-16 surrogate"},
		{"image part", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}}]}]}`,
			`message 1 content part 2: type must be "text" (only text parts are supported), found "image_url"`},
		{"part without type", `{"messages":[{"role":"user","content":[{"text":"a"}]}]}`, "message 1 content part 1: type must be \"text\""},
		{"part not object", `{"messages":[{"role":"user","content":["a"]}]}`, "message 1 content part 1 must be an object with type and text, found string"},
		{"part text not string", `{"messages":[{"role":"user","content":[{"type":"text","text":1}]}]}`, "message 1 content part 1: text must be a string, found number"},
		{"part text invalid utf-8", "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\xfe\"}]}]}", "invalid UTF-8 in message 1 content part 1 text"},
		{"empty parts", `{"messages":[{"role":"user","content":[]}]}`, "message 1: empty content"},
		{"only assistant", `{"messages":[{"role":"assistant","content":"a"}]}`, "no user message left after dropping the final assistant answer"},
		{"only system", `{"messages":[{"role":"system","content":"s"}]}`, "no user message"},
		{"ends with system", `{"messages":[{"role":"user","content":"q"},{"role":"system","content":"s"}]}`, "message 2: the conversation must end with a user message"},
		{"two final assistant turns", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"assistant","content":"b"}]}`, "must end with a user message"},
		{"prompt number", `{"prompt":5}`, "prompt must be a string, found number"},
		{"prompt empty", `{"prompt":""}`, "prompt is empty"},
		{"prompt invalid utf-8", "{\"prompt\":\"\xc3\"}", "invalid UTF-8 in prompt"},
		{"id bool", `{"id":true,"prompt":"q"}`, "id must be a string or an integer, found boolean"},
		{"id object", `{"id":{"k":1},"prompt":"q"}`, "id must be a string or an integer, found object"},
		{"id array", `{"id":[1],"prompt":"q"}`, "id must be a string or an integer, found array"},
		{"id empty", `{"id":"","prompt":"q"}`, "id is an empty string"},
		{"id too long", `{"id":"` + long + `","prompt":"q"}`, "id is longer than 256 bytes"},
		{"long number id", `{"id":` + strings.Repeat("9", 300) + `,"prompt":"q"}`, "id is longer than 256 bytes"},
		{"id control character", `{"id":"a\u0001b","prompt":"q"}`, "id contains control characters"},
		{"id newline", `{"id":"a\nb","prompt":"q"}`, "id contains control characters"},
		{"id invalid utf-8", "{\"id\":\"\xff\",\"prompt\":\"q\"}", "invalid UTF-8 in id"},
		{"id exponent", `{"id":1e400,"prompt":"q"}`, `id 1e400 is a number that is not an integer: write it as a string ("1e400")`},
		{"id fraction", `{"id":2.5,"prompt":"q"}`, "id 2.5 is a number that is not an integer"},
		{"id integral fraction", `{"id":2.0,"prompt":"q"}`, "id 2.0 is a number that is not an integer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, msgs, err := ParseLine([]byte(tc.line))
			if err == nil {
				t.Fatalf("ParseLine(%s) = %q, %+v; want error %q", tc.line, id, msgs, tc.reason)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("reason %q does not contain %q", err, tc.reason)
			}
		})
	}
}

// Content-derived ids are part of the data's identity: if they changed,
// producing an existing run again would queue every prompt a second time.
// The expected values pin the encoding.
func TestContentIDIsStable(t *testing.T) {
	for _, tc := range []struct {
		msgs []schema.Message
		want string
	}{
		{[]schema.Message{user("hello")}, "h3c3c4351644cf50a"},
		{[]schema.Message{system("be brief"), user("hello")}, "h2d8f9ebb09e597f5"},
	} {
		if got := ContentID(tc.msgs); got != tc.want {
			t.Errorf("ContentID(%+v) = %s, want %s", tc.msgs, got, tc.want)
		}
	}
	// Same conversation, any JSON spelling or field order, with or without
	// the old answer: one id.
	lines := []string{
		`{"messages":[{"role":"user","content":"hello"}]}`,
		`{ "messages" : [ { "content" : "hel\u006co", "role" : "user" } ] }`,
		`{"conversations":[{"from":"human","value":"hello"},{"from":"gpt","value":"hi!"}]}`,
		`{"prompt":"hello"}`,
	}
	for _, l := range lines {
		id, _, err := ParseLine([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		if id != "h3c3c4351644cf50a" {
			t.Errorf("%s: id %s", l, id)
		}
	}
	// Role and boundaries between messages count.
	a := ContentID([]schema.Message{user("ab"), user("c")})
	b := ContentID([]schema.Message{user("a"), user("bc")})
	c := ContentID([]schema.Message{system("ab"), user("c")})
	if a == b || a == c {
		t.Errorf("different conversations share an id: %s %s %s", a, b, c)
	}
}

// unquote must agree with encoding/json on every literal it accepts, and
// flag exactly the unpaired surrogates.
func TestUnquote(t *testing.T) {
	for raw, lone := range map[string]bool{
		`""`:                   false,
		`"plain"`:              false,
		`"a\"b\\c\/d"`:         false,
		`"\b\f\n\r\t"`:         false,
		`"caf\u00e9 \u00E9"`:   false,
		`"\u0000"`:             false,
		`"\ud83d\ude00 ok"`:    false,
		`"x\\ud800"`:           false, // an escaped backslash, then text
		`"\ud800"`:             true,
		`"\ud800x"`:            true,
		`"\ud800\u0041"`:       true,
		`"\ude00"`:             true,
		`"\ud83d\ude00\ud83d"`: true,
		`"\ud83d\ud83d"`:       true,
		`"ünï 😀"`:              false,
	} {
		got, gotLone, ok := unquote([]byte(raw))
		if gotLone != lone {
			t.Errorf("unquote(%s): lone = %v, want %v", raw, gotLone, lone)
			continue
		}
		if lone {
			continue
		}
		var want string
		if err := json.Unmarshal([]byte(raw), &want); err != nil {
			t.Fatalf("test literal %s: %v", raw, err)
		}
		if !ok || got != want {
			t.Errorf("unquote(%s) = %q, %v; encoding/json gives %q", raw, got, ok, want)
		}
	}
}

func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`"a"`, `"\n\u00e9"`, `"\ud83d\ude00"`, `"\ud800"`, `"x\\y"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		raw = bytes.TrimSpace(raw) // a decoded field holds the literal alone
		if !json.Valid(raw) || len(raw) == 0 || raw[0] != '"' || !utf8.Valid(raw) {
			return
		}
		got, lone, ok := unquote(raw)
		if lone {
			return
		}
		var want string
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		if !ok || got != want {
			t.Fatalf("unquote(%q) = %q, %v; encoding/json gives %q", raw, got, ok, want)
		}
	})
}

// checkParsed asserts what every accepted line guarantees.
func checkParsed(t *testing.T, line []byte, id string, msgs []schema.Message) {
	t.Helper()
	if id == "" || len(id) > MaxIDBytes || !utf8.ValidString(id) {
		t.Fatalf("%q: bad id %q", line, id)
	}
	if len(msgs) == 0 || msgs[len(msgs)-1].Role != "user" {
		t.Fatalf("%q: messages do not end with a user turn: %+v", line, msgs)
	}
	for _, m := range msgs {
		if strings.TrimSpace(m.Content) == "" || !utf8.ValidString(m.Content) {
			t.Fatalf("%q: bad content %q", line, m.Content)
		}
		if m.Role != "user" && m.Role != "system" && m.Role != "assistant" {
			t.Fatalf("%q: bad role %q", line, m.Role)
		}
	}
}

var parseSeeds = []string{
	`{"id":"a","messages":[{"role":"user","content":"hi"}]}`,
	`{"id":7,"conversations":[{"from":"human","value":"q"},{"from":"gpt","value":"a"}]}`,
	`{"prompt":"p\ud83d\ude00"}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`,
	`{"id":1e3,"messages":[{"role":"system","content":"s"},{"role":"user","content":"q"},{"role":"assistant","content":null}]}`,
	"{\"prompt\":\"\xff\"}",
	`{"id":"\ud800","prompt":"x"}`,
	`[`, `{`, `{"messages":[{}]}`, `{"messages":[[]]}`, `{"id":-0,"prompt":"q"}`,
	`{"id":"p","prompt":"q","params":{"temperature":0.5,"top_k":20,"stop":["x"],"chat_template_kwargs":{"b":1,"a":true},"custom":{"z":[1]}}}`,
	`{"messages":[{"role":"user","content":"q1"},{"role":"assistant","content":null},{"role":"user","content":"q2"}],"params":{"seed":3}}`,
	`{"conversations":[{"from":"system","value":"s"},{"from":"gpt","value":"a"},{"from":"human","value":"q"}]}`,
	`{"id":"a\u0000b","prompt":"q","params":{"top_k":"x"}}`,
}

// Truncations and byte flips of valid lines: ParseLine must return, not
// panic, and whatever it accepts must be a usable prompt.
func TestParseLineNeverPanics(t *testing.T) {
	for _, seed := range parseSeeds {
		for i := 0; i <= len(seed); i++ {
			for _, line := range [][]byte{[]byte(seed[:i]), flip(seed, i)} {
				id, msgs, err := ParseLine(line)
				if err == nil {
					checkParsed(t, line, id, msgs)
				}
				if l, err := ParseLineWith(line, ParseOptions{Turns: schema.TurnsAll}); err == nil {
					checkParsedAll(t, line, l)
				}
				checkSamePaths(t, line)
			}
		}
	}
}

// checkSamePaths asserts that the quick and the detailed decoding agree,
// in both turns modes.
func checkSamePaths(t *testing.T, line []byte) {
	t.Helper()
	for _, all := range []bool{false, true} {
		l, err := parseLine(line, all)
		d, derr := parseDetailed(line, all)
		if !sameLine(l, d) || (err == nil) != (derr == nil) || (err != nil && err.Error() != derr.Error()) {
			t.Fatalf("%q (all %v): quick path gives %+v %v, detailed %+v %v", line, all, l, err, d, derr)
		}
	}
}

func sameLine(a, b Line) bool {
	return a.ID == b.ID && a.Derived == b.Derived && sameMessages(a.Messages, b.Messages) && reflect.DeepEqual(a.Params, b.Params)
}

// checkParsedAll asserts what every line accepted with --turns all
// guarantees: ending with a user turn, every assistant turn an empty
// placeholder right after a user turn, the other turns with content.
func checkParsedAll(t *testing.T, line []byte, l Line) {
	t.Helper()
	if l.ID == "" || len(l.ID) > MaxIDBytes || !utf8.ValidString(l.ID) || strings.IndexByte(l.ID, 0) >= 0 {
		t.Fatalf("%q: bad id %q", line, l.ID)
	}
	msgs := l.Messages
	if len(msgs) == 0 || msgs[len(msgs)-1].Role != "user" {
		t.Fatalf("%q: messages do not end with a user turn: %+v", line, msgs)
	}
	for i, m := range msgs {
		if m.Role == "assistant" {
			if m.Content != "" || i == 0 || msgs[i-1].Role != "user" {
				t.Fatalf("%q: bad assistant placeholder %d in %+v", line, i+1, msgs)
			}
			continue
		}
		if strings.TrimSpace(m.Content) == "" || !utf8.ValidString(m.Content) {
			t.Fatalf("%q: bad content %q", line, m.Content)
		}
	}
	if l.Params != nil && (l.Params.IsZero() || l.Params.Validate() != nil) {
		t.Fatalf("%q: bad params %+v", line, l.Params)
	}
}

func flip(s string, i int) []byte {
	b := []byte(s)
	if i < len(b) {
		b[i] ^= 0x80
	}
	return b
}

func FuzzParseLine(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		id, msgs, err := ParseLine(line)
		if err == nil {
			checkParsed(t, line, id, msgs)
		}
		if l, err := ParseLineWith(line, ParseOptions{Turns: schema.TurnsAll}); err == nil {
			checkParsedAll(t, line, l)
		}
		checkSamePaths(t, line)
	})
}
