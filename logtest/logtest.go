// Package logtest holds what tests need to read what aerie logs.
package logtest

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that many goroutines may write at once, as
// the handlers of a logger shared by a worker's goroutines do. The zero
// value is an empty buffer ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
