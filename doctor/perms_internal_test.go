package doctor

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

func TestSubjectWithin(t *testing.T) {
	for _, c := range []struct {
		subj, pattern string
		want          bool
	}{
		{"aerie.results.>", "aerie.results.>", true},
		{"aerie.results.>", ">", true},
		{"aerie.results.>", "aerie.>", true},
		{"aerie.results.>", "aerie.*.>", true},
		{"aerie.results.>", "aerie.results.*", false}, // one token, not all
		{"aerie.results.>", "aerie.results", false},
		{"aerie.results.r1.>", "aerie.results.>", true},
		{"aerie.events.*.heartbeat.*", "aerie.events.>", true},
		{"aerie.events.*.heartbeat.*", "aerie.events.r1.heartbeat.*", false}, // one run, not every run
		{"aerie.events.*.heartbeat.*", "aerie.events.*.heartbeat.*", true},
		{"$JS.API.INFO", "$JS.API.INFO", true},
		{"$JS.API.INFO", "$JS.API.INFO.>", false},
		{"$JS.API.INFO", "$JS.API.*", true},
		{"a.b", "a.b.c", false},
		{">", "*", false},
	} {
		if got := subjectWithin(c.subj, c.pattern); got != c.want {
			t.Errorf("subjectWithin(%q, %q) = %v, want %v", c.subj, c.pattern, got, c.want)
		}
	}
}

func TestSubjectsOverlap(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"aerie.events.>", "aerie.events.*.progress", true},
		{"aerie.events.*.progress", "aerie.events.>", true},
		{"aerie.results.>", "aerie.prompts.>", false},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.b", "a.b", true},
		{"a", "a.>", false},
	} {
		if got := subjectsOverlap(c.a, c.b); got != c.want {
			t.Errorf("subjectsOverlap(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestAllows(t *testing.T) {
	p := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"aerie.>"}, Deny: []string{"aerie.prompts.>"}},
		Subscribe: &server.SubjectPermission{Deny: []string{"secret.>"}},
	}
	for n, want := range map[need]bool{
		{subject: "aerie.results.>"}:            true,
		{subject: "aerie.prompts.>"}:            false,
		{subject: "aerie.>"}:                    false, // partly denied
		{subject: "other"}:                      false,
		{subject: "anything.>", sub: true}:      true, // no allow list: all but the denied
		{subject: "secret.key", sub: true}:      false,
		{subject: ">", sub: true}:               false,
		{subject: "_INBOX_worker.>", sub: true}: true,
	} {
		if got := allows(p, n); got != want {
			t.Errorf("allows(%v) = %v, want %v", n, got, want)
		}
	}
	if !allows(nil, need{subject: ">"}) {
		t.Error("nil permissions refuse")
	}
}
