package openai

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// writeKeyFile replaces the key file at path the way an operator should:
// a new file renamed over the old one.
func writeKeyFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// authRecorder is a server that answers every chat completion and
// records the Authorization header of each request.
type authRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (a *authRecorder) handler(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.seen = append(a.seen, r.Header.Get("Authorization"))
	a.mu.Unlock()
	streamOf(chunk{field: "content", text: "ok", finish: "stop"})(w, r)
}

func (a *authRecorder) last() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen[len(a.seen)-1]
}

func TestAPIKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	writeKeyFile(t, path, "  sk-from-file-1\n\n")
	var rec authRecorder
	c, _ := newTestServer(t, rec.handler, func(cfg *Config) { cfg.APIKey, cfg.APIKeyFile = "", path })
	if _, err := c.ChatStream(testContext(t), userMessage("q"), nil); err != nil {
		t.Fatalf("ChatStream: %v", err)
	}
	if got := rec.last(); got != "Bearer sk-from-file-1" {
		t.Errorf("Authorization = %q", got)
	}
	for _, s := range []string{c.String(), fmt.Sprintf("%#v", c), fmt.Sprintf("%+v", c)} {
		if strings.Contains(s, "sk-from-file-1") || !strings.Contains(s, "[redacted]") || !strings.Contains(s, path) {
			t.Errorf("String output %q, want the key hidden and the file named", s)
		}
	}
}

func TestAPIKeyFileErrors(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		writeKeyFile(t, p, content)
		return p
	}
	const secret = "sk-secret-line"
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"both set", Config{APIKey: testKey, APIKeyFile: file("both", "sk-x")}, []string{"both APIKey and APIKeyFile are set"}},
		{"missing", Config{APIKeyFile: filepath.Join(dir, "absent")}, []string{filepath.Join(dir, "absent"), "no such file", "write the backend's API key"}},
		{"empty", Config{APIKeyFile: file("empty", " \n\t\n")}, []string{filepath.Join(dir, "empty"), "is empty", "write the backend's API key"}},
		{"a directory", Config{APIKeyFile: dir}, []string{dir, "holding only the backend's API key"}},
		{"too large", Config{APIKeyFile: file("large", strings.Repeat("k", maxKeyFile+1))}, []string{filepath.Join(dir, "large"), "larger than"}},
		{"two lines", Config{APIKeyFile: file("lines", secret+"\n"+secret+"\n")}, []string{filepath.Join(dir, "lines"), "line break"}},
		{"control character in APIKey", Config{APIKey: secret + "\r"}, []string{"APIKey holds a line break"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.BaseURL = "http://h:8000"
			_, err := New(tt.cfg)
			if err == nil {
				t.Fatal("New succeeded")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q, want it to contain %q", err, want)
				}
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), testKey) {
				t.Errorf("error shows the key: %q", err)
			}
		})
	}
}

func TestReloadAPIKey(t *testing.T) {
	t.Run("no key file", func(t *testing.T) {
		c, _ := newTestServer(t, streamOf())
		if changed, err := c.ReloadAPIKey(); changed || err != nil {
			t.Errorf("ReloadAPIKey() = %v, %v; want false, nil", changed, err)
		}
	})
	path := filepath.Join(t.TempDir(), "key")
	writeKeyFile(t, path, "sk-old\n")
	var rec authRecorder
	c, _ := newTestServer(t, rec.handler, func(cfg *Config) { cfg.APIKey, cfg.APIKeyFile = "", path })
	ask := func(want string) {
		t.Helper()
		if _, err := c.ChatStream(testContext(t), userMessage("q"), nil); err != nil {
			t.Fatalf("ChatStream: %v", err)
		}
		if got := rec.last(); got != "Bearer "+want {
			t.Errorf("Authorization = %q, want the key %q", got, want)
		}
	}
	reload := func(wantChanged bool) {
		t.Helper()
		changed, err := c.ReloadAPIKey()
		if err != nil || changed != wantChanged {
			t.Fatalf("ReloadAPIKey() = %v, %v; want %v, nil", changed, err, wantChanged)
		}
	}
	ask("sk-old")
	reload(false)

	writeKeyFile(t, path, "sk-new\n")
	ask("sk-old") // not read until reloaded
	reload(true)
	ask("sk-new")
	reload(false)

	for name, broken := range map[string]func(){
		"emptied": func() { writeKeyFile(t, path, "\n") },
		"removed": func() {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		},
	} {
		broken()
		changed, err := c.ReloadAPIKey()
		if changed || err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: ReloadAPIKey() = %v, %v; want an error naming the file", name, changed, err)
		}
		ask("sk-new") // the last good key stays
	}

	writeKeyFile(t, path, "sk-old")
	reload(true)
	ask("sk-old")
	if got, want := c.keys.secrets(), []string{"sk-old", "sk-new"}; !reflect.DeepEqual(got, want) {
		t.Errorf("keys held %q, want %q", got, want)
	}
}

// Reloading while requests are in flight: in-flight requests keep the key
// they were sent with, later ones use the new key, and -race sees no
// conflict between the two.
func TestReloadAPIKeyWhileInFlight(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	writeKeyFile(t, path, "sk-first")
	const inFlight = 8
	arrived := make(chan string, inFlight)
	release := make(chan struct{})
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.Header.Get("Authorization")
		startStream(w)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		send(w, chunk{field: "content", text: "ok", finish: "stop"}.String())
		send(w, "[DONE]")
	}, func(cfg *Config) { cfg.APIKey, cfg.APIKeyFile = "", path })

	errs := make(chan error, inFlight)
	for range inFlight {
		go func() {
			_, err := c.ChatStream(testContext(t), userMessage("q"), nil)
			errs <- err
		}()
	}
	for range inFlight {
		if got := <-arrived; got != "Bearer sk-first" {
			t.Errorf("in-flight request sent %q", got)
		}
	}
	// Reload from several goroutines at once while the requests run.
	var wg sync.WaitGroup
	writeKeyFile(t, path, "sk-second")
	for range 4 {
		wg.Go(func() {
			if _, err := c.ReloadAPIKey(); err != nil {
				t.Errorf("ReloadAPIKey: %v", err)
			}
		})
	}
	wg.Wait()
	close(release)
	for range inFlight {
		if err := <-errs; err != nil {
			t.Errorf("in-flight request: %v", err)
		}
	}
	go func() { _, err := c.ChatStream(testContext(t), userMessage("q"), nil); errs <- err }()
	if got := <-arrived; got != "Bearer sk-second" {
		t.Errorf("request after the reload sent %q", got)
	}
	if err := <-errs; err != nil {
		t.Error(err)
	}
}

// A key rotated out is still scrubbed: a proxy may echo a request sent
// with it long after.
func TestRotatedKeysNeverInErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	writeKeyFile(t, path, "sk-rotated-out-0000")
	var mu sync.Mutex
	var seen []string
	inStream := false
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		// A careless proxy that echoes every key it has seen.
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		msg := "denied for " + strings.Join(seen, ", ")
		stream := inStream
		mu.Unlock()
		if stream {
			startStream(w)
			send(w, fmt.Sprintf(`{"error": {"message": %q, "type": "BadRequestError", "param": null, "code": 400}}`, msg))
			send(w, "[DONE]")
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error": {"message": %q, "type": "AuthenticationError"}, "echo": %q}`, msg, msg)
	}, func(cfg *Config) { cfg.APIKey, cfg.APIKeyFile = "", path })

	_, _ = c.ChatStream(testContext(t), userMessage("q"), nil)
	writeKeyFile(t, path, "sk-current-1111")
	if changed, err := c.ReloadAPIKey(); !changed || err != nil {
		t.Fatalf("ReloadAPIKey() = %v, %v", changed, err)
	}
	var errs []error
	_, err := c.ChatStream(testContext(t), userMessage("q"), nil)
	errs = append(errs, err)
	mu.Lock()
	inStream = true
	mu.Unlock()
	_, err = c.ChatStream(testContext(t), userMessage("q"), nil)
	errs = append(errs, err)
	for i, err := range errs {
		var apiErr *APIError
		if echoes := i + 2; !errors.As(err, &apiErr) || strings.Count(apiErr.Message, "Bearer [redacted]") != echoes {
			t.Fatalf("error %v does not show the %d redacted echoes", err, echoes)
		}
		for _, text := range []string{err.Error(), fmt.Sprintf("%#v", err), apiErr.Body, apiErr.Message} {
			if strings.Contains(text, "sk-rotated-out") || strings.Contains(text, "sk-current") {
				t.Errorf("error shows a key: %s", text)
			}
		}
	}
}

func TestRedactLongestKeyFirst(t *testing.T) {
	keys := withKey(withKey(nil, "abc"), "abcdef")
	if got := string(redact([]byte("xabcdefx abc"), keys)); got != "x[redacted]x [redacted]" {
		t.Errorf("redact = %q", got)
	}
	if got := withKey(keys, "abc"); !reflect.DeepEqual(got, keys) {
		t.Errorf("a key held twice: %q", got)
	}
}
