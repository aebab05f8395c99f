package main

import (
	"context"
	"slices"
	"strings"
	"testing"
)

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

func TestListedRuns(t *testing.T) {
	for _, c := range []struct {
		list string
		want []string
		err  string
	}{
		{list: ""},
		{list: "a, b,,c", want: []string{"a", "b", "c"}},
		{list: "a,b.c", err: "--runs: run name \"b.c\" is not valid"},
	} {
		got, err := listedRuns(c.list)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("listedRuns(%q) error %v, want one saying %q", c.list, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("listedRuns(%q) = %v, %v; want %v", c.list, got, err, c.want)
		}
	}
}

// aerie work serves exactly one of --run, --runs and --all-runs: the
// worker's configuration says so, in the flags' words.
func TestWorkRunChoice(t *testing.T) {
	for _, c := range []struct {
		args []string
		err  string
	}{
		{nil, "--run is required"},
		{[]string{"--run", "a", "--all-runs"}, "one of --run, --runs and --all-runs"},
		{[]string{"--run", "a", "--runs", "b"}, "one of --run, --runs and --all-runs"},
		{[]string{"--run", "a b"}, "not valid"},
	} {
		err := cmdWork(context.Background(), c.args)
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("aerie work %v: error %v, want one saying %q", c.args, err, c.err)
		}
	}
}
