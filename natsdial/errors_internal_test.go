package natsdial

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// The refusals auth.CheckRole asks for are not logged; other errors the
// server sends go to the logger, not to stderr.
func TestAsyncErrorsLeaveOutTheRoleCheck(t *testing.T) {
	var b strings.Builder
	h := asyncErrors(slog.New(slog.NewTextHandler(&b, nil)))
	h(nil, nil, errors.New(`nats: permissions violation: Permissions Violation for Subscription to "_INBOX_admin.aerie-role-check"`))
	if b.Len() != 0 {
		t.Errorf("the role check's refusal was logged: %s", b.String())
	}
	h(nil, &nats.Subscription{Subject: "aerie.results.r.x"}, errors.New("nats: slow consumer, messages dropped"))
	if !strings.Contains(b.String(), "slow consumer") || !strings.Contains(b.String(), "subject=aerie.results.r.x") {
		t.Errorf("another error was not logged with its subject: %s", b.String())
	}
}
