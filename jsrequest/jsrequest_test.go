package jsrequest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/jsrequest"
)

func TestDoRetriesWhatMaySucceedLater(t *testing.T) {
	calls := 0
	err := jsrequest.Do(context.Background(), jsrequest.Options{}, "read x", func(context.Context) error {
		calls++
		if calls < 3 {
			return nats.ErrNoResponders // a stream leader being elected
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Do = %v after %d calls, want success on the third", err, calls)
	}

	calls = 0
	notFound := &jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound, Description: "stream not found"}
	err = jsrequest.Do(context.Background(), jsrequest.Options{}, "read y", func(context.Context) error {
		calls++
		return notFound
	})
	if !errors.Is(err, notFound) || calls != 1 || !strings.HasPrefix(err.Error(), "read y: ") {
		t.Fatalf("Do = %v after %d calls, want the error at once, described", err, calls)
	}

	calls = 0
	err = jsrequest.Do(context.Background(), jsrequest.Options{Attempts: 2}, "read z", func(context.Context) error {
		calls++
		return nats.ErrTimeout
	})
	if !errors.Is(err, nats.ErrTimeout) || calls != 2 {
		t.Fatalf("Do = %v after %d calls, want it to give up after 2", err, calls)
	}
}

func TestOptionsValidate(t *testing.T) {
	if (jsrequest.Options{}).Validate() != nil {
		t.Error("zero options refused")
	}
	if (jsrequest.Options{Timeout: -1}).Validate() == nil || (jsrequest.Options{Attempts: -1}).Validate() == nil {
		t.Error("negative values accepted")
	}
}
