package provision

import (
	"errors"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Error codes JetStream answers when a message for a subject is already
// stored, on the streams built by oncePerSubject.
const (
	// errCodeWrongLastSequence answers a publish that expected the subject
	// to be empty (ExpectLastSequencePerSubject(0)) when it was not.
	errCodeWrongLastSequence jetstream.ErrorCode = 10071
	// errCodeStoreFailed is the generic store failure; with the text
	// "maximum messages per subject exceeded" it means DiscardNewPerSubject
	// refused a second message for the subject.
	errCodeStoreFailed jetstream.ErrorCode = 10077
)

// IsAlreadyStored reports whether a publish error means the message's
// subject already holds a message: on aerie's once-per-subject streams that
// is success (the prompt is queued, the answer is stored), not a failure.
// A PubAck with Duplicate set means the same and needs no error check.
func IsAlreadyStored(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case errCodeWrongLastSequence:
		return true
	case errCodeStoreFailed:
		return strings.Contains(apiErr.Description, "maximum messages per subject")
	}
	return false
}
