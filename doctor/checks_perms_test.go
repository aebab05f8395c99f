package doctor_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/provision"
)

// authServer runs the embedded server admitting only aerie's four roles,
// each with the permissions of package auth after change (nil: as
// granted), provisions aerie's streams as the producer and queues run r.
// It returns the server and the directory of the role seeds.
func authServer(t *testing.T, change func(auth.Role, *server.Permissions)) (*broker.Server, string) {
	t.Helper()
	srv, keys := brokertest.StartWithRoles(t, change, nil)
	nc, err := nats.Connect(srv.ClientURL(), roleOptions(t, keys, auth.Producer, auth.Producer)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := provision.Streams(ctx, js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	queueRun(t, js, testRun, 64, provision.Options{})
	return srv, keys
}

// roleOptions connect with the seed of role key, replying on the inbox
// of role as, as aerie doctor --nkey key.nk --role as does.
func roleOptions(t *testing.T, keys string, key, as auth.Role) []nats.Option {
	return brokertest.RoleOptions(t, keys, key, as)
}

// doctorAs runs the doctor's NATS checks with the seed of role key,
// checked for role as.
func doctorAs(t *testing.T, srv *broker.Server, keys string, key, as auth.Role) doctor.Report {
	t.Helper()
	return run(t, doctor.Config{NATSURL: srv.ClientURL(), NATSOptions: roleOptions(t, keys, key, as), Role: as, Run: testRun})
}

// Each role's own key has every permission its command needs, and the
// other checks look only at what the role may read, so none of them
// waits on a request the server drops.
func TestPermissionsOfEachRolePass(t *testing.T) {
	t.Parallel()
	srv, keys := authServer(t, nil)
	for _, r := range auth.Roles {
		start := time.Now()
		rep := doctorAs(t, srv, keys, r, r)
		if rep.Failed() {
			t.Errorf("%s key checked as %s failed:\n%s", r, r, printed(rep))
		}
		expect(t, rep, "permissions", doctor.Pass, "every permission", "needs is granted")
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: the NATS checks took %v: one waited for an answer that does not come\n%s", r, took, printed(rep))
		}
	}
	rep := doctorAs(t, srv, keys, auth.Worker, auth.Worker)
	expect(t, rep, "streams", doctor.Pass, "AERIE_EVENTS (file, R1); not looked at, the worker may not read them: AERIE_ADVISORIES")
	expect(t, rep, "manifest", doctor.Pass)
	expect(t, rep, "consumer", doctor.Pass)
}

// A worker key that may not publish results is named for it, with what
// the worker then cannot do and where to grant it; so is a worker key
// that may not acknowledge.
func TestPermissionsNameWhatIsMissing(t *testing.T) {
	t.Parallel()
	srv, keys := authServer(t, func(r auth.Role, p *server.Permissions) {
		if r == auth.Worker {
			p.Publish.Allow = slices.DeleteFunc(p.Publish.Allow, func(s string) bool {
				return s == "aerie.results.>" || s == "$JS.ACK.AERIE_PROMPTS.>"
			})
		}
	})
	rep := doctorAs(t, srv, keys, auth.Worker, auth.Worker)
	expect(t, rep, "permissions", doctor.Fail,
		"worker credentials may not publish aerie.results.>: the worker cannot store answers; ",
		"may not publish $JS.ACK.AERIE_PROMPTS.>: the worker cannot acknowledge messages of AERIE_PROMPTS",
		"fix:grant it in the server's users.conf (aerie auth init --out DIR writes the worker's")
	// The same holds for aerie work's preflight, which then refuses to
	// start rather than fail on its first answer.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := doctor.Preflight(ctx, doctor.Config{NATSURL: srv.ClientURL(), NATSOptions: roleOptions(t, keys, auth.Worker, auth.Worker), Role: auth.Worker, Run: testRun})
	if err == nil || !contains(err.Error(), "permissions: worker credentials may not publish") {
		t.Errorf("preflight with a reduced worker key: %v", err)
	}
	// A deny entry takes a permission away as surely as a missing allow.
	srv, keys = authServer(t, func(r auth.Role, p *server.Permissions) {
		if r == auth.Aggregator {
			p.Publish.Deny = []string{"aerie.events.*.progress"}
		}
	})
	rep = doctorAs(t, srv, keys, auth.Aggregator, auth.Aggregator)
	expect(t, rep, "permissions", doctor.Fail, "may not publish aerie.events.>: the aggregator cannot publish throughput events")
}

// A producer key used for work is recognised as the producer's, with the
// fix of using the worker's, and the other way round; an admin key used
// for work passes with a warning that it may do more than work needs.
func TestPermissionsOfAnotherRole(t *testing.T) {
	t.Parallel()
	srv, keys := authServer(t, nil)
	rep := doctorAs(t, srv, keys, auth.Producer, auth.Worker)
	expect(t, rep, "permissions", doctor.Fail,
		"these are the producer's credentials, not the worker's",
		"may not subscribe to _INBOX_worker.>: the worker cannot receive the replies to its requests",
		"fix:use the worker's key (worker.nk) for aerie work, or check these for aerie produce with --role producer")
	rep = doctorAs(t, srv, keys, auth.Worker, auth.Producer)
	expect(t, rep, "permissions", doctor.Fail,
		"these are the worker's credentials, not the producer's",
		"may not publish aerie.prompts.>: the producer cannot queue prompts")
	rep = doctorAs(t, srv, keys, auth.Admin, auth.Worker)
	expect(t, rep, "permissions", doctor.Warn, "may do everything, as the admin role: more than aerie work needs", "fix:worker.nk")
}

// Credentials that may not ask the server for their permissions (a
// users.conf written before aerie doctor checked them), or a server that
// enforces none, do not fail the check: it says what it could not check.
func TestPermissionsFallBack(t *testing.T) {
	t.Parallel()
	srv, keys := authServer(t, func(r auth.Role, p *server.Permissions) {
		p.Publish.Allow = slices.DeleteFunc(p.Publish.Allow, func(s string) bool { return s == auth.UserInfoSubject })
	})
	start := time.Now()
	rep := doctorAs(t, srv, keys, auth.Worker, auth.Worker)
	expect(t, rep, "permissions", doctor.Warn, "not checked: these credentials may not publish $SYS.REQ.USER.INFO", "fix:aerie auth init --out DIR again")
	if rep.Failed() {
		t.Errorf("an older users.conf failed the doctor:\n%s", printed(rep))
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the NATS checks took %v", took)
	}

	open := brokertest.Start(t)
	rep = run(t, doctor.Config{NATSURL: open.ClientURL(), Role: auth.Worker})
	expect(t, rep, "permissions", doctor.Pass, "no user in account $G: the server sets no permissions, every subject is open")

	rep = run(t, doctor.Config{NATSURL: open.ClientURL()})
	expect(t, rep, "permissions", doctor.Skip, "no role given")
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// A command with its own role's key under a users.conf that refuses part
// of its work is told what is missing before it starts; one with every
// permission, or whose server does not say, goes on.
func TestMissingPermissionsAtConnect(t *testing.T) {
	t.Parallel()
	srv, keys := authServer(t, func(r auth.Role, p *server.Permissions) {
		if r == auth.Aggregator {
			p.Publish.Allow = slices.DeleteFunc(p.Publish.Allow, func(s string) bool { return s == "aerie.events.>" })
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range auth.Roles {
		nc, err := nats.Connect(srv.ClientURL(), roleOptions(t, keys, r, r)...)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = doctor.MissingPermissions(ctx, nc, r)
		took := time.Since(start)
		nc.Close()
		if r != auth.Aggregator {
			if err != nil {
				t.Errorf("%s with every permission: %v", r, err)
			}
			continue
		}
		if err == nil || !contains(err.Error(), "these aggregator credentials may not publish aerie.events.>: the aggregator cannot publish throughput events") ||
			!contains(err.Error(), "grant it in the server's users.conf") {
			t.Errorf("aggregator without aerie.events.>: %v", err)
		}
		if took > time.Second {
			t.Errorf("the check took %v", took)
		}
	}
}
