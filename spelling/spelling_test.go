package spelling

import "testing"

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "ab", 2}, {"max-token", "max-tokens", 1},
		{"windw", "window", 1}, {"kitten", "sitting", 3}, {"run", "run", 0},
	} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestNearest(t *testing.T) {
	if w, d := Nearest("max-windw", []string{"window", "max-window", "max-tokens"}); w != "max-window" || d != 1 {
		t.Errorf("Nearest = %q, %d", w, d)
	}
	if w, d := Nearest("x", nil); w != "" || d != -1 {
		t.Errorf("Nearest of none = %q, %d", w, d)
	}
}
