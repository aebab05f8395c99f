package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// WrongRoleError is credentials that cannot receive the replies of the
// role a command runs as: another role's key, or a key whose permissions
// lack the role's inbox. Every request such a command makes would time
// out, so it is found before the first.
type WrongRoleError struct {
	// Want is the command's role; Got the role whose inbox the
	// credentials may use, empty when none of them.
	Want, Got Role
	// Command names the command, for the message ("aerie status").
	Command string
}

func (e *WrongRoleError) Error() string {
	if e.Got == "" {
		return fmt.Sprintf("these credentials may not subscribe to %s.>, where %s receives every reply: give the %s key (--nkey %s, or AERIE_NATS_NKEY), or grant %s.> in the server's users.conf",
			InboxPrefix(e.Want), e.Command, e.Want, SeedFile(e.Want), InboxPrefix(e.Want))
	}
	return fmt.Sprintf("this is the %s's key, and %s needs the %s's: give --nkey %s (or AERIE_NATS_NKEY); the %s key is for %s",
		e.Got, e.Command, e.Want, SeedFile(e.Want), e.Got, RoleCommands(e.Got))
}

// RoleCommands names the commands a role's key is for.
func RoleCommands(r Role) string {
	switch r {
	case Producer:
		return "aerie produce"
	case Worker:
		return "aerie work"
	case Aggregator:
		return "aerie aggregate"
	}
	return "aerie status, runs, replay, reconcile, export and doctor"
}

// CheckRole reports, as a *WrongRoleError, credentials on nc that may not
// subscribe to role's inbox, and then whose inbox they may use. It asks
// the server only for subscriptions, which it refuses before it answers
// the flush that follows; nothing is published. A server without
// permissions passes at once.
func CheckRole(ctx context.Context, nc *nats.Conn, role Role, command string) error {
	ok, err := maySubscribe(ctx, nc, InboxPrefix(role))
	if err != nil || ok {
		return err
	}
	wrong := &WrongRoleError{Want: role, Command: command}
	for _, r := range Roles {
		if r == role {
			continue
		}
		if ok, err := maySubscribe(ctx, nc, InboxPrefix(r)); err != nil {
			return err
		} else if ok {
			wrong.Got = r
			break
		}
	}
	return wrong
}

// RoleCheckToken ends the subjects CheckRole subscribes to: a refusal
// on one of them is the answer it asks for, not an error to report.
const RoleCheckToken = "aerie-role-check"

// maySubscribe reports whether nc may subscribe under prefix.
func maySubscribe(ctx context.Context, nc *nats.Conn, prefix string) (bool, error) {
	subject := prefix + "." + RoleCheckToken
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		return false, fmt.Errorf("check the credentials' role: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	before := nc.LastError()
	if err := nc.FlushWithContext(ctx); err != nil {
		return false, fmt.Errorf("check the credentials' role: %w", err)
	}
	after := nc.LastError()
	refused := after != nil && after != before && errors.Is(after, nats.ErrPermissionViolation) &&
		strings.Contains(after.Error(), "Subscription to") && strings.Contains(after.Error(), subject)
	return !refused, nil
}
