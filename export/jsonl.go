package export

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/aerie-dev/aerie/dataset"
)

// errTemplate marks a row the chat template failed on (FormatText): it is
// left out and counted, and the export goes on.
var errTemplate = errors.New("chat template error")

// jsonlSink writes an export's rows as JSON lines, building each line by
// hand from the row's raw values: the text of an answer is copied as the
// line held it, never decoded.
type jsonlSink struct {
	w    *bufio.Writer
	opts Options
	sum  *Summary
	b    []byte
	// openTag and closeTag are the think tags as JSON string bodies
	// (escaped, no quotes), for FormatShareGPT.
	openTag, closeTag []byte
}

func newJSONLSink(w *bufio.Writer, opts Options, sum *Summary) *jsonlSink {
	return &jsonlSink{w: w, opts: opts, sum: sum, openTag: stringBody(opts.ThinkOpen), closeTag: stringBody(opts.ThinkClose)}
}

// stringBody is s as a JSON string without its quotes.
func stringBody(s string) []byte {
	q, _ := jsontext.AppendQuote(nil, s)
	return q[1 : len(q)-1]
}

func (j *jsonlSink) row(r *exportRow, tk int) error {
	b := j.b[:0]
	var err error
	switch j.opts.Format {
	case FormatSpecForge:
		b = appendSpecForge(b, r)
	case FormatShareGPT:
		b = j.appendShareGPT(b, r)
	case FormatSpeculators:
		b = appendSpeculators(b, r, tk)
	case FormatOpenAIBatch:
		b, err = appendBatch(b, r, j.opts.Run)
	case FormatText:
		b, err = j.appendText(b, r)
	}
	if err != nil {
		return err
	}
	b = append(b, '\n')
	j.b = b
	_, err = j.w.Write(b)
	return err
}

func (j *jsonlSink) failed(l *dataset.FailedLine) error {
	b, err := appendJSON(j.b[:0], batchErrorLine(l, j.opts.Run))
	if err != nil {
		return err
	}
	j.b = append(b, '\n')
	_, err = j.w.Write(j.b)
	return err
}

func (j *jsonlSink) close() error { return j.w.Flush() }

func appendQuoted(b []byte, s string) []byte {
	b, _ = jsontext.AppendQuote(b, s)
	return b
}

// appendSpecForge is the row SpecForge's scripts/regenerate_train_data.py
// (call_sglang) writes, which scripts/validate_regenerated_data.py
// (validate_row) and scripts/expand_reasoning_conversations.py read:
// "id", "conversations" with a leading system message kept as role
// system, reasoning_content only on a turn the target generated with
// reasoning, and "status": "success". A simulated answer says so in
// "simulated", a field both scripts and SpecForge's loader leave alone.
func appendSpecForge(b []byte, r *exportRow) []byte {
	b = append(b, `{"id":`...)
	b = appendQuoted(b, ID(r.unit))
	b = append(b, `,"conversations":[`...)
	for i := range r.turns {
		t := &r.turns[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"role":`...)
		b = appendQuoted(b, t.role)
		b = append(b, `,"content":`...)
		b = append(b, r.raw(t.content)...)
		if t.generated && !t.reasoningEmpty {
			b = append(b, `,"reasoning_content":`...)
			b = append(b, r.raw(t.reasoning)...)
		}
		b = append(b, '}')
	}
	b = append(b, `],"status":"success"`...)
	if r.simulated {
		b = append(b, `,"simulated":true`...)
	}
	return append(b, '}')
}

// shareGPTFrom is ShareGPT's name of a role; a role it has no name for
// (a tool's turn) keeps its own.
func shareGPTFrom(role string) string {
	switch role {
	case "user":
		return "human"
	case "assistant":
		return "gpt"
	}
	return role
}

// appendShareGPT is the ShareGPT row: {"id", "conversations": [{"from",
// "value"}]}, a generated answer's reasoning inline before it between
// the think tags ("<think>\nR\n</think>\n\nC"), and system messages as
// --system says: kept as "from": "system", dropped, or merged in front
// of the next human turn.
func (j *jsonlSink) appendShareGPT(b []byte, r *exportRow) []byte {
	b = append(b, `{"id":`...)
	b = appendQuoted(b, ID(r.unit))
	b = append(b, `,"conversations":[`...)
	var pending [][]byte // system texts (bodies) waiting for a human turn
	n := 0
	for i := range r.turns {
		t := &r.turns[i]
		body := jsonBody(r.raw(t.content))
		if t.role == "system" && j.opts.System == SystemDrop {
			continue
		}
		if t.role == "system" && j.opts.System == SystemMerge {
			pending = append(pending, body)
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, `{"from":`...)
		b = appendQuoted(b, shareGPTFrom(t.role))
		b = append(b, `,"value":"`...)
		switch {
		case t.role == "user" && len(pending) > 0:
			for _, p := range pending {
				b = append(b, p...)
				b = append(b, `\n\n`...)
			}
			pending = pending[:0]
			b = append(b, body...)
		case t.generated && !t.reasoningEmpty:
			b = append(b, j.openTag...)
			b = append(b, `\n`...)
			b = append(b, jsonBody(r.raw(t.reasoning))...)
			b = append(b, `\n`...)
			b = append(b, j.closeTag...)
			b = append(b, `\n\n`...)
			b = append(b, body...)
		default:
			b = append(b, body...)
		}
		b = append(b, `"}`...)
	}
	b = append(b, ']')
	if r.simulated {
		b = append(b, `,"simulated":true`...)
	}
	return append(b, '}')
}

// jsonBody is a raw JSON string without its quotes.
func jsonBody(raw []byte) []byte {
	if len(raw) < 2 {
		return nil
	}
	return raw[1 : len(raw)-1]
}

// Loss masks are written from these, sliced: "0,0,...".
var (
	zeros = []byte(strings.Repeat("0,", 1<<16))
	ones  = []byte(strings.Repeat("1,", 1<<16))
)

func appendMask(b []byte, digits []byte, n int) []byte {
	for n > 0 {
		k := min(n, len(digits)/2)
		b = append(b, digits[:2*k]...)
		n -= k
	}
	return b
}

// appendSpeculators is the row speculators' response regenerator
// (scripts/response_regeneration/script.py, build_boundary_sample and
// _sample_from_response) writes for one generation: input_ids are the
// prompt's token ids as the backend rendered them followed by the
// answer's, loss_mask 0 over the prompt and 1 over the answer; id and
// primary_id name the turn and its conversation; metadata holds the
// turn, the sample, the finish reason and the usage. Its "text", a
// decode that training ignores, needs the tokenizer and is left out.
func appendSpeculators(b []byte, r *exportRow, tk int) []byte {
	t := &r.turns[tk]
	k := 0
	for i := 0; i <= tk; i++ {
		if r.turns[i].generated {
			k++
		}
	}
	b = append(b, `{"id":`...)
	b = appendQuoted(b, turnID(r.unit, k, tk == len(r.turns)-1))
	b = append(b, `,"primary_id":`...)
	b = appendQuoted(b, ID(r.unit))
	b = append(b, `,"input_ids":[`...)
	b = append(b, bytes.TrimSpace(jsonBody(r.raw(t.promptIDs)))...)
	b = append(b, ',')
	b = append(b, bytes.TrimSpace(jsonBody(r.raw(t.tokenIDs)))...)
	b = append(b, `],"loss_mask":[`...)
	b = appendMask(b, zeros, t.nPrompt)
	b = appendMask(b, ones, t.nTokens)
	b[len(b)-1] = ']'
	b = append(b, `,"metadata":{"turn":`...)
	b = strconv.AppendInt(b, int64(k), 10)
	b = append(b, `,"sample":`...)
	b = strconv.AppendInt(b, int64(r.unit.Sample), 10)
	b = append(b, `,"finish_reason":`...)
	b = appendQuoted(b, t.finish)
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(t.usage.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(t.usage.CompletionTokens), 10)
	b = append(b, '}')
	if r.simulated {
		b = append(b, `,"simulated":true`...)
	}
	return append(b, `}}`...)
}

// appendText renders the conversation with the chat template.
func (j *jsonlSink) appendText(b []byte, r *exportRow) ([]byte, error) {
	msgs := make([]any, len(r.turns))
	for i := range r.turns {
		t := &r.turns[i]
		m := map[string]any{"role": t.role, "content": r.text(t.content)}
		if t.role == "assistant" {
			m["reasoning_content"] = r.text(t.reasoning)
		}
		msgs[i] = m
	}
	text, err := j.opts.ChatTemplate.Render(msgs)
	if err != nil {
		if j.sum.TemplateError == "" {
			j.sum.TemplateError = fmt.Sprintf("line %s: %v", ID(r.unit), err)
		}
		return b, errTemplate
	}
	if reasoning := r.text(r.last().reasoning); reasoning != "" && !strings.Contains(text, reasoning) {
		j.sum.ReasoningLost++
	}
	b = append(b, `{"id":`...)
	b = appendQuoted(b, ID(r.unit))
	b = append(b, `,"text":`...)
	b = appendQuoted(b, text)
	return append(b, '}'), nil
}

// The OpenAI Batch output shapes, fields in the order of OpenAI's own
// example lines.
type batchLineJSON struct {
	ID       string         `json:"id"`
	CustomID string         `json:"custom_id"`
	Response *batchResponse `json:"response"`
	Error    *batchError    `json:"error"`
}

type batchResponse struct {
	StatusCode int            `json:"status_code"`
	RequestID  string         `json:"request_id"`
	Body       chatCompletion `json:"body"`
}

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   batchUsage   `json:"usage"`
}

type chatChoice struct {
	Index   int         `json:"index"`
	Message chatMessage `json:"message"`
	// Logprobs is always null: aerie does not ask for them.
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason string    `json:"finish_reason"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// Reasoning is vLLM's name for the reasoning of an answer.
	Reasoning json.RawMessage `json:"reasoning"`
}

type batchUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type batchError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// batchHash is a stable identifier derived from the run and a custom_id,
// so that exporting a run twice gives the same file.
func batchHash(kind, run, customID string) string {
	h := sha256.New()
	h.Write([]byte("aerie/" + kind + "\x00" + run + "\x00" + customID))
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// appendBatch is the Batch output line of a completed unit. Its usage
// is summed over the turns generated (one with --turns last).
func appendBatch(b []byte, r *exportRow, run string) ([]byte, error) {
	id := ID(r.unit)
	last := r.last()
	reasoning := []byte(`""`)
	if !last.reasoning.empty() {
		reasoning = r.raw(last.reasoning)
	}
	var created int64
	if t, err := time.Parse(time.RFC3339Nano, r.finishedAt); err == nil {
		created = t.Unix()
	}
	line := batchLineJSON{
		ID: "batch_req_" + batchHash("batch", run, id), CustomID: id,
		Response: &batchResponse{
			StatusCode: 200, RequestID: "req_" + batchHash("request", run, id),
			Body: chatCompletion{
				ID: "chatcmpl-" + batchHash("completion", run, id), Object: "chat.completion",
				Created: created, Model: r.model,
				Choices: []chatChoice{{Message: chatMessage{Role: "assistant", Content: r.raw(last.content), Reasoning: reasoning}, FinishReason: last.finish}},
				Usage: batchUsage{PromptTokens: r.usage.PromptTokens, CompletionTokens: r.usage.CompletionTokens,
					TotalTokens: r.usage.PromptTokens + r.usage.CompletionTokens},
			},
		},
	}
	return appendJSON(b, line)
}

// appendJSON appends v encoded as encoding/json does, without escaping
// <, > and & for HTML: the text stays as the model wrote it.
func appendJSON(b []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return b, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// batchErrorLine is the Batch output line of a failed unit: its code is
// the backend's HTTP status when there was one, else aerie's reason
// (permanent, retries-exhausted, poison, truncated).
func batchErrorLine(l *dataset.FailedLine, run string) batchLineJSON {
	id := ID(l.Unit())
	code := l.Reason
	if l.Status > 0 {
		code = strconv.Itoa(l.Status)
	}
	msg := l.Error
	if msg == "" {
		msg = l.Reason
	}
	return batchLineJSON{ID: "batch_req_" + batchHash("batch", run, id), CustomID: id, Error: &batchError{Code: code, Message: msg}}
}
