package auth_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type cluster struct {
	srv  *broker.Server
	keys string
	// tls are the options of a client over mutual TLS: the CA and a
	// client certificate it signed.
	tls []nats.Option
}

// start runs the embedded server admitting only the four roles, over
// mutual TLS as a shared cluster runs, and provisions aerie's streams and
// buckets as the producer would.
func start(t *testing.T) *cluster {
	t.Helper()
	pki := brokertest.NewPKI(t)
	srv, keys := brokertest.StartWithRoles(t, nil, pki.MutualTLS(t, "server"))
	cert, key := pki.Issue(t, "client")
	c := &cluster{srv: srv, keys: keys, tls: []nats.Option{nats.RootCAs(pki.CA), nats.ClientCert(cert, key)}}
	_, js := c.connect(t, auth.Producer)
	ctx := ctxT(t)
	if err := provision.Streams(ctx, js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := provision.RunsBucket(ctx, js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// connect connects over mutual TLS as role r, with r's seed and inbox
// prefix.
func (c *cluster) connect(t *testing.T, r auth.Role) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	opts := append(brokertest.RoleOptions(t, c.keys, r, r), nats.NoReconnect())
	opts = append(opts, c.tls...)
	nc, err := nats.Connect(c.srv.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", r, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// refused says whether err is the server refusing a request for lack of
// permission: the request either reports the violation or, because the
// server drops it, times out.
func refused(err error) bool {
	return err != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		strings.Contains(strings.ToLower(err.Error()), "permissions violation"))
}

func TestWorkerCannotPurgePrompts(t *testing.T) {
	c := start(t)
	nc, _ := c.connect(t, auth.Worker)
	_, err := nc.Request("$JS.API.STREAM.PURGE."+schema.PromptsStream, nil, 2*time.Second)
	if !refused(err) {
		t.Fatalf("worker purged %s: err %v", schema.PromptsStream, err)
	}
	_, err = nc.Request("$JS.API.STREAM.DELETE."+schema.ResultsStream, nil, 2*time.Second)
	if !refused(err) {
		t.Fatalf("worker deleted %s: err %v", schema.ResultsStream, err)
	}
	_, aj := c.connect(t, auth.Admin)
	if _, err := aj.Stream(ctxT(t), schema.ResultsStream); err != nil {
		t.Fatalf("results stream gone after the worker's delete: %v", err)
	}
}

func TestWorkerCannotPublishPrompts(t *testing.T) {
	c := start(t)
	_, js := c.connect(t, auth.Worker)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, schema.PromptsRoot+".r.x", []byte("forged")); !refused(err) {
		t.Fatalf("worker published a prompt: err %v", err)
	}
	// What a worker must do still works.
	if _, err := js.Publish(ctxT(t), schema.ResultsRoot+".r.x", []byte("r")); err != nil {
		t.Fatalf("worker cannot publish a result: %v", err)
	}
}

func TestWorkerCannotWriteManifest(t *testing.T) {
	c := start(t)
	_, js := c.connect(t, auth.Worker)
	kv, err := js.KeyValue(ctxT(t), schema.RunsBucket)
	if err != nil {
		t.Fatalf("worker cannot open the runs bucket to read it: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := kv.Put(ctx, "r", []byte("{}")); !refused(err) {
		t.Fatalf("worker wrote a manifest: err %v", err)
	}
}

func TestProducerCannotPublishResults(t *testing.T) {
	c := start(t)
	_, js := c.connect(t, auth.Producer)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, schema.ResultsRoot+".r.x", []byte("forged")); !refused(err) {
		t.Fatalf("producer published a result: err %v", err)
	}
}

func TestRoleCannotReadAnotherInbox(t *testing.T) {
	c := start(t)
	nc, _ := c.connect(t, auth.Worker)
	errs := make(chan error, 1)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	})
	if _, err := nc.SubscribeSync(auth.InboxPrefix(auth.Producer) + ".>"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("want a permissions violation, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("worker subscribed to the producer's inbox without a violation")
	}
}

// A client with a valid certificate but no role key is refused, and so
// is a client with a role key that does not speak TLS.
func TestNoCredentialsRefused(t *testing.T) {
	c := start(t)
	nc, err := nats.Connect(c.srv.ClientURL(), append([]nats.Option{nats.NoReconnect()}, c.tls...)...)
	if err == nil {
		nc.Close()
		t.Fatal("connected without credentials")
	}
	if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Fatalf("want an authorization violation, got %v", err)
	}
	o, err := nats.NkeyOptionFromSeed(filepath.Join(c.keys, auth.SeedFile(auth.Admin)))
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(c.srv.ClientURL(), o, nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("the admin key connected without TLS")
	}
}

func TestEnsureDirKeepsSeeds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	first, err := auth.EnsureDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700", fi.Mode().Perm())
	}
	for _, r := range auth.Roles {
		fi, err := os.Stat(filepath.Join(dir, auth.SeedFile(r)))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", r, fi.Mode().Perm())
		}
	}
	second, err := auth.EnsureDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range auth.Roles {
		if first[r] != second[r] {
			t.Errorf("%s key changed on the second EnsureDir", r)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, auth.SeedFile(auth.Worker)), []byte("not a seed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.EnsureDir(dir); err == nil || !strings.Contains(err.Error(), "worker.nk") {
		t.Errorf("a bad seed file: err %v, want one naming worker.nk", err)
	}
}

// users.conf is a configuration nats-server accepts, with one user per
// role holding that role's permissions.
func TestUsersConfLoads(t *testing.T) {
	dir := t.TempDir()
	public, err := auth.EnsureDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.WriteUsersConf(dir, public); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(conf, []byte("port: -1\ninclude ./users.conf\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server rejects users.conf: %v", err)
	}
	if len(opts.Nkeys) != len(auth.Roles) {
		t.Fatalf("%d nkey users, want %d", len(opts.Nkeys), len(auth.Roles))
	}
	for _, u := range opts.Nkeys {
		if u.Nkey == public[auth.Worker] {
			p, _ := auth.Permissions(auth.Worker)
			if strings.Join(u.Permissions.Publish.Allow, " ") != strings.Join(p.Publish.Allow, " ") {
				t.Errorf("worker publish permissions in users.conf differ:\n%v\n%v", u.Permissions.Publish.Allow, p.Publish.Allow)
			}
		}
	}
}

// Nodes of a cluster started together on one auth directory must all end
// up with the same seeds and route secret, none of them failing because
// another made a file first or reading one half written.
func TestEnsureDirConcurrently(t *testing.T) {
	for round := 0; round < 20; round++ {
		dir := filepath.Join(t.TempDir(), "keys")
		const nodes = 6
		type got struct {
			public map[auth.Role]string
			secret string
			err    error
		}
		results := make(chan got, nodes)
		start := make(chan struct{})
		for i := 0; i < nodes; i++ {
			go func() {
				<-start
				public, err := auth.EnsureDir(dir)
				if err != nil {
					results <- got{err: err}
					return
				}
				secret, err := auth.EnsureRouteSecret(dir)
				results <- got{public: public, secret: secret, err: err}
			}()
		}
		close(start)
		var first got
		for i := 0; i < nodes; i++ {
			g := <-results
			if g.err != nil {
				t.Fatalf("round %d: %v", round, g.err)
			}
			if i == 0 {
				first = g
				continue
			}
			for _, r := range auth.Roles {
				if g.public[r] != first.public[r] {
					t.Fatalf("round %d: two nodes got different %s keys", round, r)
				}
			}
			if g.secret != first.secret {
				t.Fatalf("round %d: two nodes got different route secrets", round)
			}
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != len(auth.Roles)+1 {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Fatalf("round %d: %s holds %v, want the seeds and route.secret only", round, dir, names)
		}
	}
}
