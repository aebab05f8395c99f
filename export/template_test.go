package export_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/export"
)

// A template that renders reasoning_content keeps every answer's
// reasoning; one in Kimi-K2's style drops it, and the summary counts the
// lines that lost it (those whose answer had reasoning).
func TestTextReasoningLost(t *testing.T) {
	for _, c := range []struct {
		name     string
		template string
		lost     int
	}{{"qwen3 style", qwenTemplate, 0}, {"kimi-k2 style", kimiTemplate, 3}} {
		tmpl, err := export.ParseChatTemplate([]byte(c.template))
		if err != nil {
			t.Fatal(err)
		}
		got, sum, err := exported(t, export.Files("testdata/run"), export.Options{Format: export.FormatText, ChatTemplate: tmpl})
		if err != nil {
			t.Fatal(err)
		}
		if sum.RowsWritten != 4 || sum.ReasoningLost != c.lost {
			t.Errorf("%s: %d written, %d lost the reasoning; want 4 and %d\n%s", c.name, sum.RowsWritten, sum.ReasoningLost, c.lost, got)
		}
	}
}

// A tokenizer_config.json gives its chat_template (from a list of named
// ones, the "default") and its bos_token and eos_token, plain or as
// added-token objects.
func TestTokenizerConfig(t *testing.T) {
	dir := t.TempDir()
	cfg, _ := json.Marshal(map[string]any{
		"bos_token": map[string]any{"content": "<s>", "lstrip": false},
		"eos_token": "</s>",
		"chat_template": []map[string]string{
			{"name": "tool_use", "template": "wrong"},
			{"name": "default", "template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{{ eos_token }}"},
		},
	})
	path := filepath.Join(dir, "tokenizer_config.json")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl, err := export.LoadChatTemplate(path)
	if err != nil {
		t.Fatal(err)
	}
	text, err := tmpl.Render([]any{map[string]any{"role": "user", "content": "hi"}})
	if err != nil || text != "<s>[user]hi</s>" {
		t.Errorf("rendered %q, %v", text, err)
	}

	if err := os.WriteFile(path, []byte(`{"eos_token": "</s>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := export.LoadChatTemplate(path); err == nil || !strings.Contains(err.Error(), "chat_template.jinja") {
		t.Errorf("a config without a template: %v", err)
	}
	if _, err := export.ParseChatTemplate([]byte("{% for m in messages %}")); err == nil {
		t.Error("an unclosed for compiled")
	}
}

// A template that raises for a conversation leaves that line out, with
// the reason and the template's message, and the export goes on.
func TestTextTemplateError(t *testing.T) {
	tmpl, err := export.ParseChatTemplate([]byte(`{%- if messages[0].role == 'system' -%}{{ raise_exception('no system role') }}{%- endif -%}ok`))
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := exported(t, export.Files("testdata/run"), export.Options{Format: export.FormatText, ChatTemplate: tmpl})
	if err != nil {
		t.Fatal(err)
	}
	if sum.RowsWritten != 3 || sum.Dropped[export.DroppedTemplateError] != 1 || !strings.Contains(sum.TemplateError, "no system role") {
		t.Errorf("summary %+v", sum)
	}
}
