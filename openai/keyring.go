package openai

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// maxKeyFile bounds what is read of an API key file. A key is a few
// dozen bytes; a file larger than this is not a key file.
const maxKeyFile = 64 << 10

// keyring holds the API key a client sends, and every key it has held,
// so that errors are scrubbed of a key rotated out too (a proxy may echo
// a request sent with it). Requests read it without locking; reloads
// replace its state as a whole.
type keyring struct {
	file   string     // Config.APIKeyFile; "" when the key is fixed
	reload sync.Mutex // serialises reloads
	state  atomic.Pointer[keyState]
}

// keyState is one immutable state of a keyring.
type keyState struct {
	current string   // sent as the bearer token; "" for none
	used    []string // every key held so far, longest first
}

// newKeyring returns a keyring holding key, or the key read from file.
// Setting both is an error: it would be unclear which one is meant.
func newKeyring(key, file string) (*keyring, error) {
	r := &keyring{file: file}
	switch {
	case key != "" && file != "":
		return nil, errors.New("both APIKey and APIKeyFile are set: set one (APIKeyFile to rotate the key without a restart)")
	case file != "":
		var err error
		if key, err = readKeyFile(file); err != nil {
			return nil, err
		}
	case key != "":
		if err := checkKey(key); err != nil {
			return nil, fmt.Errorf("APIKey %w", err)
		}
	}
	r.state.Store(&keyState{current: key, used: withKey(nil, key)})
	return r, nil
}

// current returns the key to send; "" for none.
func (r *keyring) current() string { return r.state.Load().current }

// secrets returns every key held so far, for scrubbing text. The slice
// must not be modified.
func (r *keyring) secrets() []string { return r.state.Load().used }

// load reads the key file again. On error the current key stays.
func (r *keyring) load() (changed bool, err error) {
	if r.file == "" {
		return false, nil
	}
	r.reload.Lock()
	defer r.reload.Unlock()
	key, err := readKeyFile(r.file)
	if err != nil {
		return false, err
	}
	old := r.state.Load()
	if key == old.current {
		return false, nil
	}
	r.state.Store(&keyState{current: key, used: withKey(old.used, key)})
	return true, nil
}

// withKey returns used plus key (if new and not empty), longest first so
// that a key which contains another is scrubbed whole. used is not
// modified.
func withKey(used []string, key string) []string {
	if key == "" || slices.Contains(used, key) {
		return used
	}
	out := append(slices.Clip(used), key)
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// readKeyFile reads an API key from path, without surrounding
// whitespace. Its errors name the file and say what to do, and never
// hold any of its content.
func readKeyFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("API key file: %w (write the backend's API key, the value of vLLM's --api-key, into it)", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return "", fmt.Errorf("API key file: %w (it must be a readable file holding only the backend's API key)", err)
	}
	if len(b) > maxKeyFile {
		return "", fmt.Errorf("API key file %s is larger than %d bytes: it must hold only the backend's API key", path, maxKeyFile)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("API key file %s is empty: write the backend's API key, the value of vLLM's --api-key, into it", path)
	}
	if err := checkKey(key); err != nil {
		return "", fmt.Errorf("API key file %s %w", path, err)
	}
	return key, nil
}

// checkKey rejects a key that cannot be sent in an HTTP header: one with
// a line break or another control character (two lines pasted into a
// key file, say), which would fail every request.
func checkKey(key string) error {
	if strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return errors.New("holds a line break or another control character: it must hold only the key, on one line")
	}
	return nil
}
