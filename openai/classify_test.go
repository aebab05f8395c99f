package openai

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("chat completion to http://h/v1/chat/completions: %w", err) }
	opErr := func(errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}
	}
	var syntaxErr *json.SyntaxError
	if err := json.Unmarshal([]byte("{"), new(any)); !errors.As(err, &syntaxErr) {
		t.Fatalf("no syntax error from %v", err)
	}
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"nil", nil, 0},
		{"caller canceled", wrap(context.Canceled), Canceled},
		{"caller deadline", wrap(context.DeadlineExceeded), Canceled},
		{"first-token timeout", wrap(firstTokenExpired(time.Minute)), Transient},
		{"idle timeout", wrap(idleExpired(time.Minute, afterFirstToken)), Transient},
		{"request timeout", wrap(totalExpired(time.Minute)), Transient},
		{"probe timeout", wrap(probeExpired(time.Second)), Transient},
		{"time limit beats a context error", fmt.Errorf("%w: %w", idleExpired(time.Minute, afterFirstToken), context.DeadlineExceeded), Transient},
		{"bad request", wrap(&APIError{Status: 400}), Permanent},
		{"not found", wrap(&APIError{Status: 404}), Permanent},
		{"payload too large", wrap(&APIError{Status: 413}), Permanent},
		{"unprocessable", wrap(&APIError{Status: 422}), Permanent},
		{"other 4xx", wrap(&APIError{Status: 451}), Permanent},
		{"unauthorized", wrap(&APIError{Status: 401}), Auth},
		{"forbidden", wrap(&APIError{Status: 403}), Auth},
		{"request timeout status", wrap(&APIError{Status: 408}), Transient},
		{"conflict", wrap(&APIError{Status: 409}), Transient},
		{"too early", wrap(&APIError{Status: 425}), Transient},
		{"queue full", wrap(&APIError{Status: 429}), Transient},
		{"internal", wrap(&APIError{Status: 500}), Transient},
		{"bad gateway", wrap(&APIError{Status: 502}), Transient},
		{"unavailable", wrap(&APIError{Status: 503}), Transient},
		{"gateway timeout", wrap(&APIError{Status: 504}), Transient},
		{"other 5xx", wrap(&APIError{Status: 599}), Transient},
		{"unfollowed redirect", wrap(&APIError{Status: 307}), Transient},
		{"in-stream 400", wrap(&APIError{Type: "BadRequestError", Code: "400"}), Transient},
		{"in-stream 401", wrap(&APIError{Code: "401"}), Transient},
		{"in-stream 500", wrap(&APIError{Code: "500"}), Transient},
		{"in-stream symbolic code", wrap(&APIError{Code: "context_length_exceeded"}), Transient},
		{"error object in a 200 response", wrap(&APIError{Status: 200, Code: "400"}), Transient},
		{"invalid request", wrap(errInvalidRequest), Permanent},
		{"stream ended early", wrap(errStreamEnded), Transient},
		{"malformed", wrap(errMalformed), Transient},
		{"JSON syntax", wrap(syntaxErr), Transient},
		{"JSON type", wrap(&json.UnmarshalTypeError{Value: "string"}), Transient},
		{"line too long", wrap(&lineTooLongError{limit: 1}), Transient},
		{"EOF", wrap(io.EOF), Transient},
		{"unexpected EOF", wrap(io.ErrUnexpectedEOF), Transient},
		{"connection refused", wrap(opErr(syscall.ECONNREFUSED)), Transient},
		{"connection reset", wrap(syscall.ECONNRESET), Transient},
		{"broken pipe", wrap(syscall.EPIPE), Transient},
		{"DNS", wrap(&net.DNSError{Err: "no such host", Name: "vllm", IsNotFound: true}), Transient},
		{"url error", &url.Error{Op: "Post", URL: "http://h", Err: opErr(syscall.ECONNREFUSED)}, Transient},
		{"unknown CA", wrap(x509.UnknownAuthorityError{}), Auth},
		{"wrong host name", wrap(x509.HostnameError{Host: "h"}), Auth},
		{"certificate verification", wrap(&tls.CertificateVerificationError{Err: x509.CertificateInvalidError{}}), Auth},
		{"not TLS", wrap(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), Auth},
		{"HTTP answer to HTTPS", &url.Error{Op: "Post", URL: "https://h", Err: http.ErrSchemeMismatch}, Auth},
		{"unknown error", errors.New("something odd"), Transient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestClassString(t *testing.T) {
	for c, want := range map[Class]string{
		Transient: "transient", Permanent: "permanent", Auth: "auth", Canceled: "canceled", 0: "none", 42: "Class(42)",
	} {
		if got := c.String(); got != want {
			t.Errorf("Class(%d).String() = %q, want %q", int(c), got, want)
		}
	}
}

func TestClassifyRealFailures(t *testing.T) {
	t.Run("https to a plain HTTP server", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		defer srv.Close()
		c, err := New(Config{BaseURL: strings.Replace(srv.URL, "http://", "https://", 1)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.ChatStream(testContext(t), userMessage("q"), nil)
		wantClass(t, err, Auth)
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		srv := httptest.NewTLSServer(http.NotFoundHandler())
		defer srv.Close()
		c, err := New(Config{BaseURL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.ChatStream(testContext(t), userMessage("q"), nil)
		wantClass(t, err, Auth)
	})
	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		c, err := New(Config{BaseURL: "http://" + addr, APIKey: testKey})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.ChatStream(testContext(t), userMessage("q"), nil)
		wantClass(t, err, Transient)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("error %q is not connection refused", err)
		}
	})
}
