package export

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/ardanlabs/jinja"
)

// ChatTemplate is a model's Jinja chat template, which turns a
// conversation into the text the model is trained on (FormatText).
type ChatTemplate struct {
	tmpl     *jinja.Template
	bos, eos string
}

// LoadChatTemplate reads a chat template from path: a model's
// tokenizer_config.json (its "chat_template", and its bos_token and
// eos_token), or a raw Jinja template such as a chat_template.jinja.
func LoadChatTemplate(path string) (*ChatTemplate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	c, err := ParseChatTemplate(b)
	if err != nil {
		return nil, fmt.Errorf("chat template %s: %w", path, err)
	}
	return c, nil
}

// ParseChatTemplate is LoadChatTemplate of a file's contents. A JSON
// object is a tokenizer_config.json; anything else is the template. A
// "chat_template" that is a list of named templates gives the one named
// "default".
func ParseChatTemplate(b []byte) (*ChatTemplate, error) {
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
	}
	source := string(b)
	var c ChatTemplate
	if trimmed := bytes.TrimSpace(b); len(trimmed) > 0 && trimmed[0] == '{' && json.Unmarshal(trimmed, &cfg) == nil {
		var err error
		if source, err = templateOfConfig(cfg.ChatTemplate); err != nil {
			return nil, err
		}
		c.bos, c.eos = specialToken(cfg.BOS), specialToken(cfg.EOS)
	}
	if source == "" {
		return nil, errors.New("the template is empty")
	}
	t, err := compile(source)
	if err != nil {
		return nil, fmt.Errorf("the template does not compile: %w", err)
	}
	c.tmpl = t
	return &c, nil
}

func compile(source string) (t *jinja.Template, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	return jinja.Compile(source)
}

// templateOfConfig is the template in a tokenizer_config.json's
// chat_template: a string, or a list of {name, template} of which the
// one named "default" is the chat template.
func templateOfConfig(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", errors.New(`this tokenizer_config.json has no "chat_template"; newer models keep it in chat_template.jinja beside it: pass that file`)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf(`"chat_template" is neither a string nor a list of {name, template}: %w`, err)
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", errors.New(`"chat_template" is a list without a template named "default"`)
}

// specialToken is a bos_token or eos_token of a tokenizer_config.json:
// a string, or an object with its "content".
func specialToken(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var tok struct {
		Content string `json:"content"`
	}
	_ = json.Unmarshal(raw, &tok)
	return tok.Content
}

// Render renders a conversation (messages as templates see them: role,
// content and, on assistant turns, reasoning_content), without a
// generation prompt: the text of a whole training example.
func (c *ChatTemplate) Render(messages []any) (text string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the template failed: %v", p)
		}
	}()
	return c.tmpl.Render(map[string]any{
		"messages":              messages,
		"add_generation_prompt": false,
		"bos_token":             c.bos,
		"eos_token":             c.eos,
	})
}
