package audit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultQueueSize is RecorderConfig.QueueSize by default.
const DefaultQueueSize = 10000

// RecorderConfig configures a [Recorder]. The zero value means the
// defaults.
type RecorderConfig struct {
	// QueueSize is how many entries wait for the sink at most, those of a
	// batch being retried included. Beyond, entries are dropped and
	// counted. Default: DefaultQueueSize (10000).
	QueueSize int

	// BatchSize is the most entries handed to the sink in one Write.
	// Default: 256.
	BatchSize int

	// FlushInterval is how long an entry waits for a batch to fill before
	// it is written anyway. Default: 200ms.
	FlushInterval time.Duration

	// WriteTimeout bounds each Write to the sink. Default: 5s.
	WriteTimeout time.Duration

	// RetryMin and RetryMax bound the wait between two attempts at a
	// batch the sink refused: it starts at RetryMin and doubles up to
	// RetryMax. Defaults: 100ms and 5s.
	RetryMin, RetryMax time.Duration

	// Logger receives a WARN when entries are dropped (at most one per
	// second) and when the sink starts failing, and an INFO when it
	// recovers. Default: none.
	Logger *slog.Logger

	// OnDrop, when set, is called with the number of entries dropped
	// (1 per Record that found the queue full). It runs on the request
	// path and must be fast: a counter increment. Default: none.
	OnDrop func(n int)
}

// Recorder decouples request handling from the sink: [Recorder.Record] puts
// the entry in a bounded queue and returns at once, and one goroutine hands
// the queue to the sink in batches.
//
// A batch the sink refuses (it is down, at start or later) is retried in
// the background, with a growing pause, until the sink takes it. Meanwhile
// new entries wait in the queue. When QueueSize entries wait (the sink is
// down, or slower than the traffic), Record drops the entry and counts it
// ([Recorder.Dropped], OnDrop, a WARN at most once per second) rather than
// wait. The audit trail observes the webhooks and must never slow one down
// or make one fail. [Recorder.Health] says whether the sink is failing and
// how many entries wait. Entries still unwritten when Close gives up are
// counted in [Recorder.Failed]. A sink may store a batch more than once if
// it fails after storing it but before answering (a connection cut at that
// moment). Create it with [NewRecorder].
type Recorder struct {
	sink     Sink
	queue    chan Entry
	batch    int
	interval time.Duration
	timeout  time.Duration
	retryMin time.Duration
	retryMax time.Duration
	log      *slog.Logger
	onDrop   func(int)

	held     atomic.Int64 // entries accepted and not yet written or lost
	dropped  atomic.Uint64
	failed   atomic.Uint64
	lastWarn atomic.Int64          // Unix nanoseconds of the last drop WARN
	sinkErr  atomic.Pointer[error] // the last Write's error while the sink fails
	mu       sync.RWMutex          // Record holds it shared, Close exclusively
	closed   bool

	ctx       context.Context // canceled when Close's context is done
	cancel    context.CancelFunc
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// NewRecorder returns a recorder writing to sink and starts its goroutine;
// stop it with [Recorder.Close].
func NewRecorder(sink Sink, cfg RecorderConfig) *Recorder {
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 256
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = 200 * time.Millisecond
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = 100 * time.Millisecond
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(cfg.RetryMin, 5*time.Second)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Recorder{
		sink:     sink,
		queue:    make(chan Entry, cfg.QueueSize),
		batch:    cfg.BatchSize,
		interval: cfg.FlushInterval,
		timeout:  cfg.WriteTimeout,
		retryMin: cfg.RetryMin,
		retryMax: cfg.RetryMax,
		log:      cfg.Logger,
		onDrop:   cfg.OnDrop,
		ctx:      ctx,
		cancel:   cancel,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go r.run()
	return r
}

// Record enqueues e without blocking. If QueueSize entries already wait, or
// the recorder is closed, e is dropped and counted.
func (r *Recorder) Record(e Entry) {
	r.mu.RLock()
	closed := r.closed
	if !closed {
		if r.held.Add(1) <= int64(cap(r.queue)) {
			// held bounds what the queue holds, so the send never blocks.
			r.queue <- e
			r.mu.RUnlock()
			return
		}
		r.held.Add(-1)
	}
	r.mu.RUnlock()
	r.drop(closed)
}

func (r *Recorder) drop(closed bool) {
	total := r.dropped.Add(1)
	if r.onDrop != nil {
		r.onDrop(1)
	}
	if r.log == nil {
		return
	}
	now := time.Now().UnixNano()
	last := r.lastWarn.Load()
	if now-last < int64(time.Second) || !r.lastWarn.CompareAndSwap(last, now) {
		return
	}
	if closed {
		// Deliveries that finish during a shutdown: the sink is fine.
		r.log.Warn("audit: recorder closed, delivery entries dropped (deliveries finished after Close)",
			"dropped_total", total)
		return
	}
	r.log.Warn("audit: queue full, delivery entries dropped (the sink is down or too slow)",
		"dropped_total", total, "queue_size", cap(r.queue))
}

// Dropped returns how many entries Record has dropped.
func (r *Recorder) Dropped() uint64 { return r.dropped.Load() }

// Failed returns how many accepted entries were never written: the sink
// still refused them when Close gave up.
func (r *Recorder) Failed() uint64 { return r.failed.Load() }

// Health returns how many entries wait for the sink and, while the sink is
// failing (its last Write failed), that Write's error. The error is nil
// once a Write succeeds again.
func (r *Recorder) Health() (waiting int, err error) {
	if p := r.sinkErr.Load(); p != nil {
		err = *p
	}
	return int(r.held.Load()), err
}

// Close stops accepting entries, writes those still queued and returns
// when they are written or when ctx is done, whichever comes first. In the
// second case it returns ctx's error, and the entries not written by then
// are lost. It is safe to call more than once.
func (r *Recorder) Close(ctx context.Context) error {
	r.closeOnce.Do(func() {
		// Once closed is set under the lock, no Record can enqueue, so
		// the drain below sees every accepted entry.
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		close(r.stop)
	})
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		r.cancel()
		return ctx.Err()
	}
}

func (r *Recorder) run() {
	defer close(r.done)
	defer r.cancel()
	buf := make([]Entry, 0, r.batch)
	t := time.NewTimer(r.interval)
	t.Stop()
	armed := false
	flush := func() {
		if len(buf) == 0 {
			return
		}
		r.write(buf)
		clear(buf)
		buf = buf[:0]
	}
	for {
		select {
		case e := <-r.queue:
			buf = append(buf, e)
			if len(buf) >= r.batch {
				flush()
				if armed {
					t.Stop()
					armed = false
				}
			} else if !armed {
				t.Reset(r.interval)
				armed = true
			}
		case <-t.C:
			armed = false
			flush()
		case <-r.stop:
			// Drain what is queued now. Record enqueues nothing more.
			for {
				select {
				case e := <-r.queue:
					buf = append(buf, e)
					if len(buf) >= r.batch {
						flush()
					}
				default:
					flush()
					return
				}
			}
		}
	}
}

// write hands batch to the sink until it takes it or Close gives up.
func (r *Recorder) write(batch []Entry) {
	pause := r.retryMin
	for len(batch) > 0 {
		if r.ctx.Err() != nil {
			r.lost(len(batch))
			return
		}
		ctx, cancel := context.WithTimeout(r.ctx, r.timeout)
		err := r.sink.Write(ctx, batch)
		cancel()
		if err == nil {
			r.held.Add(-int64(len(batch)))
			if r.sinkErr.Swap(nil) != nil && r.log != nil {
				r.log.Info("audit: the sink takes entries again", "waiting", r.held.Load())
			}
			return
		}
		var partial *PartialWriteError
		if errors.As(err, &partial) && partial.Written > 0 && partial.Written <= len(batch) {
			r.held.Add(-int64(partial.Written))
			batch = batch[partial.Written:]
		}
		if r.sinkErr.Swap(&err) == nil && r.log != nil {
			r.log.Warn("audit: the sink refuses entries; they wait and are retried in the background (beyond the queue size they are dropped)",
				"entries", len(batch), "queue_size", cap(r.queue), "err", err)
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-r.ctx.Done():
			t.Stop()
		}
		pause = min(2*pause, r.retryMax)
	}
}

// lost counts n accepted entries that will never be written.
func (r *Recorder) lost(n int) {
	r.held.Add(-int64(n))
	r.failed.Add(uint64(n))
}
