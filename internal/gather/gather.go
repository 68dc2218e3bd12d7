// Package gather hands a worker goroutine the work that concurrent callers
// queued for it, as one batch. The stores' group commits (sqlitestore,
// pgstore) and Redis pipelines (redisstore) are built on it. Whatever waits
// when the previous batch is done becomes the next batch, so a lone call
// goes at once and a burst shares one commit or one round trip.
package gather

// Next waits for the first item of queue, then takes the items already
// waiting after it, without blocking, up to max in all. It returns them in
// batch[:0]. It returns false, and no items, once stop is closed while
// nothing waits.
func Next[T any](batch []T, queue <-chan T, stop <-chan struct{}, max int) ([]T, bool) {
	select {
	case v := <-queue:
		batch = append(batch[:0], v)
	case <-stop:
		return batch[:0], false
	}
	for len(batch) < max {
		select {
		case v := <-queue:
			batch = append(batch, v)
		default:
			return batch, true
		}
	}
	return batch, true
}
