package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for range 20 {
				b.Write([]byte("ab\n")) //nolint:errcheck
			}
		})
	}
	wg.Wait()
	if got := b.String(); len(got) != 50*20*3 || strings.Count(got, "ab\n") != 1000 {
		t.Fatalf("got %d bytes, %d lines", len(got), strings.Count(got, "ab\n"))
	}
}
