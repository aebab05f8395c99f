package livepage_test

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/livepage"
)

// Close ends the open event streams rather than waiting on them, and a
// bad address is an error that names it.
func TestServerCloseEndsStreams(t *testing.T) {
	if _, err := livepage.Start("127.0.0.1:notaport", livepage.New("r1"), nil); err == nil || !strings.Contains(err.Error(), "127.0.0.1:notaport") {
		t.Errorf("bad address: %v; want an error naming it", err)
	}
	srv, err := livepage.Start("127.0.0.1:0", livepage.New("r1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: time.Minute}
	resp, err := client.Get(srv.URL() + "api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for { // the first state
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read the stream: %v", err)
		}
		if strings.HasPrefix(line, "data: ") {
			break
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Logf("stream ended with %v", err)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v; want the stream ended and the server shut down cleanly", err)
	}
}
