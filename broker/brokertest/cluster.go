package brokertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/provision"
)

// StartCluster runs n servers on loopback that form one JetStream
// cluster, each with its store in t.TempDir(), shut down when the test
// ends, and waits until JetStream answers on every node. The cluster
// behaves as a production one does where a server alone cannot: a
// replicated consumer sends a message only once its delivery is
// replicated, while status messages go at once.
func StartCluster(t testing.TB, n int) []*broker.Server {
	t.Helper()
	addrs := make([]string, n)
	routes := make([]string, n)
	for i := range addrs {
		addrs[i] = FreeAddr(t)
		routes[i] = "nats-route://" + addrs[i]
	}
	nodes := make([]*broker.Server, n)
	for i := range nodes {
		s, err := broker.Start(broker.Config{
			StoreDir: t.TempDir(), SyncInterval: time.Minute,
			Name: fmt.Sprintf("node-%d", i+1), ClusterListen: addrs[i], Routes: routes,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Shutdown)
		nodes[i] = s
	}
	for _, s := range nodes {
		_, js := Connect(t, s)
		Eventually(t, time.Minute, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := js.AccountInfo(ctx)
			return err == nil
		}, "JetStream of the cluster did not answer on %s", s.ClientURL())
	}
	return nodes
}

// ProvisionedCluster starts a cluster of three, connects to its first
// node and creates aerie's streams with three replicas.
func ProvisionedCluster(t testing.TB) ([]*broker.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	nodes := StartCluster(t, 3)
	nc, js := Connect(t, nodes[0])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := provision.Streams(ctx, js, provision.Options{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	return nodes, nc, js
}
