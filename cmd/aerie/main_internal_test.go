package main

import "testing"

func TestWithoutOwnName(t *testing.T) {
	for _, c := range []struct{ cmd, msg, want string }{
		{"produce", "produce: open prompts file: missing", "open prompts file: missing"},
		{"produce", "produce run x: stopped at line 3", "run x: stopped at line 3"},
		{"reconcile", "reconcile stopped at prompt \"a\"", "stopped at prompt \"a\""},
		{"doctor", "doctor: workers (-1) must not be negative", "workers (-1) must not be negative"},
		{"work", "worker w1: the backend serves [a]", "worker w1: the backend serves [a]"},
		{"run", "run: bad", "bad"},
		{"run", "run x has no manifest", "run x has no manifest"},
		{"produce", "producer is busy", "producer is busy"},
	} {
		if got := withoutOwnName(c.cmd, c.msg); got != c.want {
			t.Errorf("withoutOwnName(%q, %q) = %q, want %q", c.cmd, c.msg, got, c.want)
		}
	}
}
