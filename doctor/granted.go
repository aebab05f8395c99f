package doctor

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/auth"
)

// MissingPermissions asks the server what the credentials on nc may do
// and returns an error naming each permission role's command needs and
// lacks, what it is for, and how to grant it: a key of the right role
// under a users.conf that refuses part of its work (one written by an
// older aerie, or edited) would otherwise fail its first request that
// needs it after a timeout. It returns nil when every permission is
// granted, and also when the server does not say (a users.conf that
// refuses the question, a server without a system account): the
// command then goes on as before. Call it after auth.CheckRole, which
// names a key of another role.
func MissingPermissions(ctx context.Context, nc *nats.Conn, role auth.Role) error {
	info, err := userInfo(ctx, nc)
	if err != nil || info.Permissions == nil {
		return nil
	}
	miss, err := missing(role, info.Permissions)
	if err != nil || len(miss) == 0 {
		return nil
	}
	lines := make([]string, len(miss))
	for i, n := range miss {
		lines[i] = fmt.Sprintf("may not %s %s: the %s %s", n.verb(), n.subject, role, purpose(n))
	}
	return fmt.Errorf("these %s credentials %s; grant it in the server's users.conf (aerie auth init --out DIR rewrites it and keeps the seeds; aerie server --auth-dir grants it itself), then reload nats-server; aerie doctor --nkey %s lists the rest",
		role, strings.Join(firstN(lines, 3), "; "), auth.SeedFile(role))
}
