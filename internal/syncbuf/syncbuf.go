// Package syncbuf is a bytes.Buffer safe for concurrent use, for tests that
// read what a logger shared by many goroutines wrote.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer collects writes from any number of goroutines. The zero value is
// an empty buffer ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
