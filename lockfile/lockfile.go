// Package lockfile gives one process sole use of something on disk (a
// directory it writes, a store it serves): an exclusive OS lock on a
// file, held for as long as the process keeps it and released by the
// operating system when the process dies, even by kill -9. Who holds it
// is written in the file, so that a second process can say so.
package lockfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/aerie-dev/aerie/fsmode"
)

// Holder says who holds a lock.
type Holder struct {
	PID  int    `json:"pid"`
	Host string `json:"host"`
	// What the holder is, e.g. "aerie aggregate of run r1".
	What string `json:"what,omitempty"`
	// Addr is the address the holder serves on, if it serves.
	Addr  string    `json:"addr,omitempty"`
	Since time.Time `json:"since"`
}

func (h Holder) String() string {
	if h.PID == 0 {
		return "another process (it did not say which)"
	}
	s := fmt.Sprintf("pid %d on %s", h.PID, h.Host)
	if h.Addr != "" {
		s += ", listening on " + h.Addr
	}
	if h.What != "" {
		s = h.What + " (" + s + ")"
	}
	if !h.Since.IsZero() {
		s += " since " + h.Since.Local().Format(time.DateTime)
	}
	return s
}

// HeldError says that another process holds the lock.
type HeldError struct {
	Path   string
	Holder Holder
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s is locked by %s", e.Path, e.Holder)
}

// Lock is a held lock. The zero value holds nothing.
type Lock struct {
	f      *os.File
	holder Holder
}

// Acquire takes the lock on path, creating the file if needed, without
// waiting: when another process holds it the error is a *HeldError naming
// that process. what describes this process for the next one to ask.
func Acquire(path, what string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, fsmode.File)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", path, err)
	}
	if err := lock(f); err != nil {
		defer f.Close()
		if errors.Is(err, errLocked) {
			return nil, &HeldError{Path: path, Holder: readHolder(f)}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	host, _ := os.Hostname()
	l := &Lock{f: f, holder: Holder{PID: os.Getpid(), Host: host, What: what, Since: time.Now().UTC()}}
	if err := l.write(); err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// SetAddr records the address the holder serves on, once it knows it.
func (l *Lock) SetAddr(addr string) error {
	l.holder.Addr = addr
	return l.write()
}

func (l *Lock) write() error {
	b, _ := json.Marshal(l.holder)
	err := l.f.Truncate(0)
	if err == nil {
		_, err = l.f.WriteAt(append(b, '\n'), 0)
	}
	if err != nil {
		return fmt.Errorf("write lock file %s: %w", l.f.Name(), err)
	}
	return nil
}

// Release gives the lock up. It may be called more than once, and on a
// nil Lock.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0) // the next holder writes its own
	_ = l.f.Close()     // closing the file releases the lock
	l.f = nil
}

// readHolder reads what the holder wrote; a file it has not written yet,
// or one written by something else, gives a zero Holder.
func readHolder(f *os.File) Holder {
	var h Holder
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 4096))
	if err == nil {
		_ = json.Unmarshal([]byte(strings.TrimSpace(string(b))), &h)
	}
	return h
}

var errLocked = errors.New("locked by another process")
