package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/schema"
)

// aerie runs set changes a run's schedule and says what it was; runs ls
// and status show it; what makes no sense is refused with the reason.
func TestRunsSetCommand(t *testing.T) {
	bin := buildAerie(t)
	srv, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: "pilot", Model: "m"}, brokertest.Prompts(2))
	url := srv.ClientURL()

	p := aerie(t, bin, "runs", "set", "pilot", "--priority", "5", "--weight", "3", "--pause", "--nats", url)
	p.wait(t, time.Minute)
	if got := p.stdout.String(); !strings.Contains(got, "run pilot: priority 5, weight 3, paused (was priority 0, weight 1, running)") {
		t.Errorf("aerie runs set printed %q", got)
	}
	p = aerie(t, bin, "runs", "ls", "--nats", url)
	p.wait(t, time.Minute)
	if got := p.stdout.String(); !strings.Contains(got, "p5 w3 paused") {
		t.Errorf("aerie runs ls does not show the schedule:\n%s", got)
	}
	p = aerie(t, bin, "status", "--nats", url, "--run", "pilot")
	p.wait(t, time.Minute)
	if got := p.stdout.String(); !strings.Contains(got, "priority 5  weight 3  PAUSED") || !strings.Contains(got, "aerie runs set pilot --resume") {
		t.Errorf("aerie status does not show the schedule:\n%s", got)
	}
	p = aerie(t, bin, "runs", "set", "pilot", "--resume", "--nats", url)
	p.wait(t, time.Minute)
	if got := p.stdout.String(); !strings.Contains(got, "priority 5, weight 3, running (was") {
		t.Errorf("aerie runs set --resume printed %q", got)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"runs", "set", "pilot"}, "nothing to change"},
		{[]string{"runs", "set", "pilot", "--pause", "--resume"}, "--pause or --resume, not both"},
		{[]string{"runs", "set", "pilot", "--weight", "0"}, "must be above 0"},
		{[]string{"runs", "set", "--priority", "1"}, "name the run"},
		{[]string{"runs", "set", "nope", "--priority", "1"}, "run nope has no manifest"},
	} {
		p := aerie(t, bin, append(c.args, "--nats", url)...)
		if code := p.exit(t, time.Minute); code != 1 || !strings.Contains(p.stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", c.args, code, p.stderr.String(), c.want)
		}
	}
}
