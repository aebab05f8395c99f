package brokertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// PKI is a throwaway certificate authority for tests of TLS: its CA and
// every certificate it issues are PEM files in a directory the test
// removes, valid for an hour around now. Create it with NewPKI.
type PKI struct {
	// Dir holds the files; CA is the CA certificate's file (ca.pem).
	Dir, CA string

	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool

	mu     sync.Mutex
	serial int64
}

// NewPKI creates a CA in t.TempDir().
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "aerie test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &PKI{Dir: t.TempDir(), cert: cert, key: key, pool: x509.NewCertPool(), serial: 1}
	p.pool.AddCert(cert)
	p.CA = filepath.Join(p.Dir, "ca.pem")
	writePEM(t, p.CA, "CERTIFICATE", der)
	return p
}

// Issue writes name.pem and name-key.pem: a certificate the CA signed,
// good for both ends of a TLS connection (a server, a client, or a
// cluster node, which is both), for hosts (IP addresses or DNS names;
// none means 127.0.0.1 and localhost). It returns the two files.
func (p *PKI) Issue(t testing.TB, name string, hosts ...string) (certFile, keyFile string) {
	t.Helper()
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.serial++
	serial := p.serial
	p.mu.Unlock()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(p.Dir, name+".pem"), filepath.Join(p.Dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
	return certFile, keyFile
}

// MutualTLS is a configuration that presents a certificate issued as
// name for hosts and accepts only peers whose certificate the CA signed:
// as a server's it requires client certificates (mutual TLS), and as a
// cluster node's it serves both the routes it accepts and those it opens.
func (p *PKI) MutualTLS(t testing.TB, name string, hosts ...string) *tls.Config {
	t.Helper()
	certFile, keyFile := p.Issue(t, name, hosts...)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      p.pool, ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS12,
	}
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
