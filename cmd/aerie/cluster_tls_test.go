package main_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/broker/brokertest"
)

// Two aerie servers with --tls-ca form a cluster: each dials the other
// as a client too, and must trust the CA for the other's certificate.
// A message published on one node reaches a subscriber on the other.
func TestServerRoutesOverMutualTLS(t *testing.T) {
	bin := buildAerie(t)
	pki := brokertest.NewPKI(t)
	client, clientKey := pki.Issue(t, "client")
	listen := []string{freeAddr(t), freeAddr(t)}
	cluster := []string{freeAddr(t), freeAddr(t)}
	routes := "nats-route://" + cluster[0] + ",nats-route://" + cluster[1]
	var conns []*nats.Conn
	for i, name := range []string{"n1", "n2"} {
		cert, key := pki.Issue(t, name)
		start(t, bin, "server", "--name", name, "--listen", listen[i], "--cluster-listen", cluster[i], "--routes", routes,
			"--store", filepath.Join(t.TempDir(), name), "--tls-cert", cert, "--tls-key", key, "--tls-ca", pki.CA)
		waitTCP(t, listen[i])
		nc, err := nats.Connect("tls://"+listen[i], nats.RootCAs(pki.CA), nats.ClientCert(client, clientKey))
		if err != nil {
			t.Fatalf("connect to %s: %v", name, err)
		}
		t.Cleanup(nc.Close)
		conns = append(conns, nc)
	}
	sub, err := conns[1].SubscribeSync("routed")
	if err != nil {
		t.Fatal(err)
	}
	if err := conns[1].Flush(); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 30*time.Second, func() bool {
		if err := conns[0].Publish("routed", []byte("x")); err != nil {
			t.Fatal(err)
		}
		_, err := sub.NextMsg(200 * time.Millisecond)
		return err == nil
	}, "a message published on n1 to reach n2's subscriber over the TLS route")
}
