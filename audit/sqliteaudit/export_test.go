package sqliteaudit

// NoAppend makes s write every batch to a segment of its own, as a busy
// gateway's full batches are, so that a test gets many segments out of few
// entries.
func NoAppend(s *Sink) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tailMax = 0
}
