package openai

import "testing"

func TestSplitThink(t *testing.T) {
	tests := []struct {
		name, in, reasoning, content string
	}{
		{"tags", "<think>R</think>C", "R", "C"},
		{"tags with whitespace", "\n  <think>\n R \n</think>\n\n C \n", "R", "C \n"},
		{"opened in the prompt", "R\n</think>\n\nC", "R", "C"},
		{"unterminated", "<think>\nR cut off", "R cut off", ""},
		{"empty think", "<think></think>C", "", "C"},
		{"nothing after", "<think>R</think>", "R", ""},
		{"no tags", "  plain answer", "", "  plain answer"},
		{"tag not at the start", "Use <think> tags", "", "Use <think> tags"},
		{"second close stays in content", "<think>R</think>C</think>D", "R", "C</think>D"},
		{"empty", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, c := splitThink(tt.in)
			if r != tt.reasoning || c != tt.content {
				t.Errorf("splitThink(%q) = %q, %q; want %q, %q", tt.in, r, c, tt.reasoning, tt.content)
			}
		})
	}
}

func TestAnswerPrefersReasoningFields(t *testing.T) {
	var a answer
	a.add("thinking", "", "")
	a.add("", "", "An answer about <think> and </think> tags.")
	r, c := a.split()
	if r != "thinking" || c != "An answer about <think> and </think> tags." {
		t.Errorf("split = %q, %q", r, c)
	}
}
