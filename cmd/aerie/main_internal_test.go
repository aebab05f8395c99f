package main

import (
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

func TestWorkerRuns(t *testing.T) {
	for _, c := range []struct {
		run, list string
		all       bool
		want      []string
		err       string
	}{
		{run: "a"},
		{list: "a, b,,c", want: []string{"a", "b", "c"}},
		{all: true},
		{err: "--run is required"},
		{run: "a", all: true, err: "one of --run, --runs and --all-runs"},
		{run: "a", list: "b", err: "one of --run, --runs and --all-runs"},
		{list: "a,b.c", err: "--runs: run name \"b.c\" is not valid"},
		{run: "a b", err: "not valid"},
	} {
		got, err := workerRuns(c.run, c.list, c.all)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("workerRuns(%q, %q, %v) error %v, want one saying %q", c.run, c.list, c.all, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("workerRuns(%q, %q, %v) = %v, %v; want %v", c.run, c.list, c.all, got, err, c.want)
		}
	}
}
