package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/aerie-dev/aerie/schema"
)

// MaxIDBytes bounds a prompt id. Ids travel in a header and in every
// result line; 256 bytes is ample for any dataset's keys and keeps a
// runaway field (a whole document pasted as id) from being accepted.
const MaxIDBytes = 256

// Roles of the chat turns a prompt may hold.
const (
	roleSystem    = "system"
	roleUser      = "user"
	roleAssistant = "assistant"
)

// roleNames maps the role (or ShareGPT "from") values accepted in input
// files, compared without regard to case, to chat roles.
var roleNames = map[string]string{
	"system":    roleSystem,
	"user":      roleUser,
	"human":     roleUser,
	"assistant": roleAssistant,
	"gpt":       roleAssistant,
}

// lineFields are the top-level fields of an input line that aerie reads;
// any others are ignored. When several prompt fields are present,
// messages wins over conversations, which wins over prompt (UltraChat, for
// one, carries both prompt and messages).
type lineFields struct {
	ID            json.RawMessage `json:"id"`
	Messages      json.RawMessage `json:"messages"`
	Conversations json.RawMessage `json:"conversations"`
	Prompt        json.RawMessage `json:"prompt"`
	Params        json.RawMessage `json:"params"`
	LengthHint    json.RawMessage `json:"length_hint"`
}

// turnFields are the fields of one chat turn: role and content (OpenAI,
// SpecForge) or from and value (ShareGPT).
type turnFields struct {
	Role    json.RawMessage `json:"role"`
	From    json.RawMessage `json:"from"`
	Content json.RawMessage `json:"content"`
	Value   json.RawMessage `json:"value"`
}

// ParseLine reads one JSONL line into a prompt id and the messages to
// send, as a run with --turns last sends them. It is ParseLineWith with
// the zero ParseOptions, less the line's params (which it still checks).
//
// Accepted shapes:
//
//	{"id": ..., "messages": [{"role": "user", "content": "..."}, ...]}
//	{"id": ..., "conversations": [{"role": ..., "content": ...}, ...]}   (SpecForge)
//	{"id": ..., "conversations": [{"from": "human", "value": ...}, ...]} (ShareGPT)
//	{"id": ..., "prompt": "..."}                                         (one user message)
//	{"custom_id": ..., "method": "POST", "url": "/v1/chat/completions",
//	 "body": {"model": ..., "messages": [...], ...}}                      (OpenAI Batch)
//
// An OpenAI Batch line (one with custom_id and body) has its id in
// custom_id and its parameters in the body (see parseBatch).
//
// Each may carry a "params" object of request parameters for this prompt
// alone (see schema.ParamsFromJSON), e.g. {"temperature": 0.2, "top_k":
// 20}; a wrong one makes the line invalid. Each may carry a "length_hint",
// the tokens its answer is expected to take (see Line.LengthHint), which
// orders the queue longest first.
//
// Roles are system, user and assistant; ShareGPT's human and gpt mean user
// and assistant. Content is a string or a list of {"type": "text", "text"}
// parts, joined with newlines. A final assistant turn is dropped: it is the
// answer being regenerated. What remains must end with a user turn.
//
// The id is a string or a number (its decimal text); it may not contain
// control characters, NUL included. Without an id, the id is derived from
// the messages (see ContentID), so the same prompt gets the same id on
// every produce.
//
// ParseLine never panics; its error says what is wrong with the line.
func ParseLine(line []byte) (id string, msgs []schema.Message, err error) {
	l, err := ParseLineWith(line, ParseOptions{})
	return l.ID, l.Messages, err
}

// ParseOptions says how ParseLineWith reads a line. The zero value reads
// it as a run with --turns last does.
type ParseOptions struct {
	// Turns is schema.TurnsLast (or empty, the same) or schema.TurnsAll.
	// With TurnsAll every assistant turn of the input is a turn to
	// regenerate: each stays in Line.Messages as a placeholder whose
	// Content is empty (the input's text is neither read nor kept), and
	// must directly follow a user message. A final assistant turn is
	// dropped as with TurnsLast: its answer is the conversation's last
	// turn.
	Turns string
	// Model is the run's model. An OpenAI Batch line whose body names
	// another model is refused, naming both; empty checks nothing.
	Model string
	// Task is the run's task kind: schema.TaskChat (or empty, the same)
	// reads prompts; schema.TaskHiddenStates reads extraction samples
	// (see parseExtraction), JSONL only.
	Task string
}

// extraction reports whether o reads extraction samples.
func (o ParseOptions) extraction() bool { return o.Task == schema.TaskHiddenStates }

// check says whether o's Turns is a mode.
func (o ParseOptions) check() error {
	if err := taskCheck(o.Task); err != nil {
		return err
	}
	switch o.Turns {
	case "", schema.TurnsLast, schema.TurnsAll:
		return nil
	}
	return fmt.Errorf("turns %q: use %s or %s", o.Turns, schema.TurnsLast, schema.TurnsAll)
}

// Line is one input line as ParseLineWith reads it.
type Line struct {
	// ID is the prompt id: the line's own, or derived from Messages
	// (Derived).
	ID string
	// Messages are the messages of the prompt as queued: ending with a
	// user message; with TurnsAll, assistant messages are placeholders
	// with empty Content, one per turn to regenerate before the last
	// (schema.TurnSlots counts the turns).
	Messages []schema.Message
	// Params are the line's "params": its own request parameters,
	// validated. Nil when the line has none, or an empty object.
	Params *schema.Params
	// Derived is set when the line has no id and ID was derived from
	// Messages (ContentID), as queued: with TurnsAll the input's
	// assistant texts are not part of it.
	Derived bool
	// LengthHint is how many tokens the answer is expected to take: the
	// line's length_hint, or else the size of the input's own answer to
	// the turn to be generated (with TurnsAll, of all its assistant
	// turns) at BytesPerToken. Zero: no hint.
	LengthHint int
	// InputIDs and LossMask are an extraction sample's (ParseOptions.Task
	// schema.TaskHiddenStates), whose ID is its idx.
	InputIDs []int64
	LossMask []int
}

// ParseLineWith reads one JSONL line (see ParseLine for the accepted
// shapes) as opts say. It never panics; its error says what is wrong
// with the line, or that opts.Turns is not a mode.
func ParseLineWith(line []byte, opts ParseOptions) (Line, error) {
	if err := opts.check(); err != nil {
		return Line{}, err
	}
	if f, ok := asBatch(line); ok {
		return parseBatch(f, opts)
	}
	return parseLine(line, opts.Turns == schema.TurnsAll)
}

// parseLine reads a line; all selects --turns all. A well-formed line is
// decoded in one pass (quickLine); any other is decoded again, field by
// field, so that the error says exactly what is wrong. The quick path
// accepts a line only when the detailed one would give the same result.
func parseLine(line []byte, all bool) (Line, error) {
	var q quickLine
	if json.Unmarshal(line, &q) == nil {
		if l, err := q.parse(all); err == nil {
			return l, nil
		}
	}
	return parseDetailed(line, all)
}

// quickLine is lineFields with the turns decoded in the same pass. A
// field of the wrong type makes decoding fail and the line go the
// detailed way.
type quickLine struct {
	ID            json.RawMessage `json:"id"`
	Messages      []turnFields    `json:"messages"`
	Conversations []turnFields    `json:"conversations"`
	Prompt        json.RawMessage `json:"prompt"`
	Params        json.RawMessage `json:"params"`
	LengthHint    json.RawMessage `json:"length_hint"`
}

func (q *quickLine) parse(all bool) (Line, error) {
	var msgs []schema.Message
	var answer int
	var err error
	switch {
	case q.Messages != nil: // [] decodes to an empty, non-nil slice
		msgs, answer, err = buildTurns(q.Messages, "messages", len(q.Messages), all)
	case q.Conversations != nil:
		msgs, answer, err = buildTurns(q.Conversations, "conversations", len(q.Conversations), all)
	case present(q.Prompt):
		msgs, err = parsePrompt(q.Prompt)
	default:
		err = errNoPrompt
	}
	if err != nil {
		return Line{}, err
	}
	return finishLine(q.ID, q.Params, q.LengthHint, msgs, answer)
}

var errNoPrompt = errors.New("no messages, conversations or prompt field")

// parseDetailed decodes a line field by field, to say what is wrong.
func parseDetailed(line []byte, all bool) (Line, error) {
	var f lineFields
	if err := json.Unmarshal(line, &f); err != nil {
		return Line{}, jsonProblem(line, err)
	}
	var msgs []schema.Message
	var answer int
	var err error
	switch {
	case present(f.Messages):
		msgs, answer, err = parseTurns(f.Messages, "messages", all)
	case present(f.Conversations):
		msgs, answer, err = parseTurns(f.Conversations, "conversations", all)
	case present(f.Prompt):
		msgs, err = parsePrompt(f.Prompt)
	default:
		err = errNoPrompt
	}
	if err != nil {
		return Line{}, err
	}
	return finishLine(f.ID, f.Params, f.LengthHint, msgs, answer)
}

// finishLine reads the id (or derives it from the messages), the params
// and the length hint of a line whose messages were read; answerBytes is
// the size of the input's own answers to the turns to generate.
func finishLine(rawID, rawParams, rawHint json.RawMessage, msgs []schema.Message, answerBytes int) (Line, error) {
	id, msgs, derived, err := finishID(rawID, msgs)
	if err != nil {
		return Line{}, err
	}
	params, err := parseParams(rawParams)
	if err != nil {
		return Line{}, err
	}
	hint, err := lengthHint(rawHint, answerBytes)
	if err != nil {
		return Line{}, err
	}
	return Line{ID: id, Messages: msgs, Params: params, Derived: derived, LengthHint: hint}, nil
}

// parseParams reads a line's "params": nil when absent, null or empty.
func parseParams(raw json.RawMessage) (*schema.Params, error) {
	if !present(raw) {
		return nil, nil
	}
	p, err := schema.ParamsFromJSON(raw)
	if err != nil {
		return nil, err
	}
	if p.IsZero() {
		return nil, nil
	}
	return &p, nil
}

// finishID reads the id, or derives it from the messages when absent.
func finishID(raw json.RawMessage, msgs []schema.Message) (string, []schema.Message, bool, error) {
	if !present(raw) {
		return ContentID(msgs), msgs, true, nil
	}
	id, err := ParseID(raw)
	if err != nil {
		return "", nil, false, err
	}
	return id, msgs, false, nil
}

// present reports whether a field was given with a value other than null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// jsonProblem turns a decoding error of a whole line into a reason.
func jsonProblem(line []byte, err error) error {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Errorf("not JSON: %v (at byte %d)", err, syn.Offset)
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		return fmt.Errorf("line is a JSON %s, not an object with messages, conversations or prompt", kindOf(bytes.TrimSpace(line)))
	}
	return fmt.Errorf("not JSON: %v", err)
}

// kindOf names the JSON type of a valid value.
func kindOf(raw []byte) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// parsePrompt reads the "prompt" shape: one user message.
func parsePrompt(raw json.RawMessage) ([]schema.Message, error) {
	if raw[0] != '"' {
		return nil, fmt.Errorf("prompt must be a string, found %s", kindOf(raw))
	}
	text, err := decodeString(raw, "prompt")
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(text) == "" {
		return nil, errors.New("prompt is empty")
	}
	return []schema.Message{{Role: roleUser, Content: text}}, nil
}

// parseTurns reads a list of chat turns, checking the type of each.
func parseTurns(raw json.RawMessage, field string, all bool) ([]schema.Message, int, error) {
	var items []json.RawMessage
	if raw[0] != '[' {
		return nil, 0, fmt.Errorf("%s must be a list of {role, content} objects, found %s", field, kindOf(raw))
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, 0, fmt.Errorf("%s: %v", field, err)
	}
	turns := make([]turnFields, len(items))
	for i, item := range items {
		n := i + 1
		if len(item) == 0 || item[0] != '{' {
			return nil, 0, fmt.Errorf("message %d must be an object with role and content, found %s", n, kindOf(item))
		}
		if err := json.Unmarshal(item, &turns[i]); err != nil {
			return nil, 0, fmt.Errorf("message %d: %v", n, err)
		}
	}
	return buildTurns(turns, field, len(items), all)
}

// buildTurns drops a final assistant turn and checks that what is left can
// be sent as a prompt. With all (--turns all) every assistant turn left
// must directly follow a user message and becomes a placeholder with empty
// content: its text is not read. It also returns the size in bytes of the
// input's own answers to the turns to be generated (answerBytes): the
// final assistant turn, and with all every assistant turn; zero when the
// input has none.
func buildTurns(turns []turnFields, field string, given int, all bool) (msgs []schema.Message, answerBytes int, err error) {
	if len(turns) == 0 {
		return nil, 0, fmt.Errorf("%s is empty", field)
	}
	roles := make([]string, len(turns))
	for i, t := range turns {
		role, err := parseRole(t, i+1)
		if err != nil {
			return nil, 0, err
		}
		roles[i] = role
	}
	if roles[len(roles)-1] == roleAssistant {
		// The answer being regenerated: its content is not read at all,
		// so a placeholder (empty, null) there is fine.
		answerBytes = answerSize(turns[len(turns)-1])
		turns, roles = turns[:len(turns)-1], roles[:len(roles)-1]
	}
	if !containsUser(roles) {
		if len(roles) < given {
			return nil, 0, errors.New("no user message left after dropping the final assistant answer")
		}
		return nil, 0, errors.New("no user message")
	}
	if last := roles[len(roles)-1]; last != roleUser {
		return nil, 0, fmt.Errorf("message %d: the conversation must end with a user message (after a final assistant answer is dropped), found %s", len(roles), last)
	}
	if all {
		for i, r := range roles {
			if r == roleAssistant && (i == 0 || roles[i-1] != roleUser) {
				return nil, 0, fmt.Errorf("message %d: an assistant turn must follow a user message to be regenerated with --turns all", i+1)
			}
		}
	}
	msgs = make([]schema.Message, len(turns))
	for i, t := range turns {
		if all && roles[i] == roleAssistant {
			msgs[i] = schema.Message{Role: roleAssistant}
			answerBytes += answerSize(t)
			continue
		}
		content, err := parseContent(t, i+1)
		if err != nil {
			return nil, 0, err
		}
		msgs[i] = schema.Message{Role: roles[i], Content: content}
	}
	return msgs, answerBytes, nil
}

func containsUser(roles []string) bool {
	for _, r := range roles {
		if r == roleUser {
			return true
		}
	}
	return false
}

// parseRole reads a turn's role, or its ShareGPT "from".
func parseRole(t turnFields, n int) (string, error) {
	raw, name := t.Role, "role"
	if !present(raw) {
		raw, name = t.From, "from"
	}
	if !present(raw) {
		return "", fmt.Errorf("message %d: no role (or from) field", n)
	}
	if raw[0] != '"' {
		return "", fmt.Errorf("message %d: %s must be a string, found %s", n, name, kindOf(raw))
	}
	s, lone, ok := unquote(raw)
	if !ok || lone || !utf8.ValidString(s) {
		if _, err := decodeString(raw, fmt.Sprintf("message %d %s", n, name)); err != nil {
			return "", err
		}
		return "", fmt.Errorf("message %d: %s is not a valid JSON string", n, name)
	}
	role, ok := roleNames[s]
	if !ok {
		role, ok = roleNames[strings.ToLower(s)]
	}
	if !ok {
		return "", fmt.Errorf("message %d: unknown %s %q: use system, user (or human) or assistant (or gpt)", n, name, Truncate(s, 40))
	}
	return role, nil
}

// parseContent reads a turn's content, or its ShareGPT "value".
func parseContent(t turnFields, n int) (string, error) {
	raw := t.Content
	if !present(raw) {
		raw = t.Value
	}
	if !present(raw) {
		return "", fmt.Errorf("message %d: no content (or value) field", n)
	}
	what := fmt.Sprintf("message %d content", n)
	var text string
	var err error
	switch raw[0] {
	case '"':
		text, err = decodeString(raw, what)
	case '[':
		text, err = decodeParts(raw, what)
	default:
		err = fmt.Errorf("%s must be a string or a list of text parts, found %s", what, kindOf(raw))
	}
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(text) == "" {
		return "", fmt.Errorf("message %d: empty content", n)
	}
	return text, nil
}

// decodeParts reads OpenAI's list-of-parts content. Only text parts are
// accepted (aerie regenerates text answers); they are joined with newlines,
// which is how vLLM renders a list of text parts.
func decodeParts(raw json.RawMessage, what string) (string, error) {
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("%s: %v", what, err)
	}
	texts := make([]string, 0, len(parts))
	for i, p := range parts {
		where := fmt.Sprintf("%s part %d", what, i+1)
		if len(p) == 0 || p[0] != '{' {
			return "", fmt.Errorf("%s must be an object with type and text, found %s", where, kindOf(p))
		}
		var part struct {
			Type json.RawMessage `json:"type"`
			Text json.RawMessage `json:"text"`
		}
		if err := json.Unmarshal(p, &part); err != nil {
			return "", fmt.Errorf("%s: %v", where, err)
		}
		var typ string
		if present(part.Type) && part.Type[0] == '"' {
			if err := json.Unmarshal(part.Type, &typ); err != nil {
				return "", fmt.Errorf("%s: type: %v", where, err)
			}
		}
		if typ != "text" {
			return "", fmt.Errorf("%s: type must be \"text\" (only text parts are supported), found %s", where, describe(part.Type))
		}
		if !present(part.Text) || part.Text[0] != '"' {
			return "", fmt.Errorf("%s: text must be a string, found %s", where, describe(part.Text))
		}
		text, err := decodeString(part.Text, where+" text")
		if err != nil {
			return "", err
		}
		texts = append(texts, text)
	}
	return strings.Join(texts, "\n"), nil
}

// describe names a field's value for an error: a short string is quoted,
// anything else is named by type.
func describe(raw json.RawMessage) string {
	if !present(raw) {
		return "none"
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return fmt.Sprintf("%q", Truncate(s, 40))
		}
	}
	return kindOf(raw)
}
