package openai

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
)

// Class says what a caller should do about an error.
type Class int

const (
	// Transient: the same request may succeed later (overload, queue
	// full, network trouble, server restart, too slow, generation that
	// failed after the server accepted the request). Retry with backoff.
	Transient Class = iota + 1
	// Permanent: this request will not succeed as sent (context too
	// long, malformed request, unknown model), as the server said with a
	// 4xx status before it started answering. Retrying is pointless.
	Permanent
	// Auth: the deployment is misconfigured (rejected key, untrusted
	// certificate, https to a plain HTTP port). No request will succeed until an operator fixes it,
	// so it says nothing about the prompt itself.
	Auth
	// Canceled: the caller's own context ended. Nothing is known about
	// the request.
	Canceled
)

// String names the class in lower case, e.g. "transient".
func (c Class) String() string {
	switch c {
	case Transient:
		return "transient"
	case Permanent:
		return "permanent"
	case Auth:
		return "auth"
	case Canceled:
		return "canceled"
	case 0:
		return "none"
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// classRule is one line of the mapping: classOf returns the class of
// the errors the rule covers and 0 for any other.
type classRule struct {
	name    string
	classOf func(error) Class
}

// classRules is the whole mapping from errors to classes. The first rule
// that gives a class wins, so order matters: the client's time limits
// are checked before context errors, errors sent inside a successful
// response before other server responses, and server responses before
// transport errors.
var classRules = []classRule{
	{"client time limit", when(isTimeLimit, Transient)},
	{"caller canceled", when(is(context.Canceled), Canceled)},
	{"caller deadline", when(is(context.DeadlineExceeded), Canceled)},
	{"server failed mid-answer", when(isInStreamError, Transient)},
	{"server response", apiErrorClass},
	{"invalid request", when(is(errInvalidRequest), Permanent)},
	{"TLS misconfigured", when(isTLSConfigError, Auth)},
	{"stream ended early", when(is(errStreamEnded), Transient)},
	{"malformed response", when(isMalformed, Transient)},
	{"connection closed", when(isEOF, Transient)},
	{"network", when(isNetworkError, Transient)},
}

// Classify returns the class of an error from this package (or of a
// context error). Errors that match no rule are Transient: an unknown
// failure is most likely the environment, and the caller's redelivery
// limit bounds the cost of being wrong. Classify(nil) is 0, which is no
// class.
func Classify(err error) Class {
	if err == nil {
		return 0
	}
	for _, r := range classRules {
		if c := r.classOf(err); c != 0 {
			return c
		}
	}
	return Transient
}

func when(match func(error) bool, c Class) func(error) Class {
	return func(err error) Class {
		if match(err) {
			return c
		}
		return 0
	}
}

// isInStreamError matches an error the server sent after accepting the
// request (APIError.InStream). Its code says nothing about the prompt:
// vLLM sends 400 for any exception raised while generating, an engine
// that died included.
func isInStreamError(err error) bool {
	var apiErr *APIError
	return errors.As(err, &apiErr) && apiErr != nil && apiErr.InStream()
}

// apiErrorClass maps an error response to a class by its HTTP status.
func apiErrorClass(err error) Class {
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr == nil {
		return 0
	}
	return statusClass(apiErr.Status)
}

// statusClass maps an HTTP status to a class.
func statusClass(status int) Class {
	switch {
	case status == 401 || status == 403:
		return Auth
	case status == 408 || status == 409 || status == 425 || status == 429:
		return Transient // timeout, conflict, too early, queue full
	case status >= 500 && status <= 599:
		return Transient // overloaded, starting, proxy trouble
	case status >= 400 && status <= 499:
		return Permanent // bad request, context too long, unknown model
	}
	// No status, or one that is not an error (an unfollowed redirect):
	// nothing says the prompt is at fault.
	return Transient
}

// isTimeLimit matches the expiry of one of the client's own time limits
// (first-token, idle, request or probe timeout): the server was too slow
// or stuck.
func isTimeLimit(err error) bool {
	var limit *timeLimitError
	return errors.As(err, &limit)
}

func is(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// isTLSConfigError matches a rejected server certificate and a server
// that does not speak TLS at all (https:// pointed at a plain HTTP port).
// Both persist until the configuration changes.
func isTLSConfigError(err error) bool {
	var (
		verify    *tls.CertificateVerificationError
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		record    tls.RecordHeaderError
	)
	return errors.As(err, &verify) || errors.As(err, &unknownCA) ||
		errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &record) || errors.Is(err, http.ErrSchemeMismatch)
}

func isMalformed(err error) bool {
	var (
		syntax   *json.SyntaxError
		typeErr  *json.UnmarshalTypeError
		tooLarge *lineTooLongError
	)
	return errors.Is(err, errMalformed) || errors.As(err, &syntax) ||
		errors.As(err, &typeErr) || errors.As(err, &tooLarge)
}

func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func isNetworkError(err error) bool {
	var netErr net.Error
	var opErr *net.OpError
	var dnsErr *net.DNSError
	return errors.As(err, &netErr) || errors.As(err, &opErr) || errors.As(err, &dnsErr) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}
