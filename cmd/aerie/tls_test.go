package main_test

import (
	"testing"

	"github.com/aerie-dev/aerie/broker/brokertest"
)

// testPKI is a throwaway CA with a server certificate for 127.0.0.1 and
// a client certificate, as PEM files.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	pki := brokertest.NewPKI(t)
	p := testPKI{ca: pki.CA}
	p.serverCert, p.serverKey = pki.Issue(t, "server")
	p.clientCert, p.clientKey = pki.Issue(t, "client")
	return p
}
