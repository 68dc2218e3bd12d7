package redisstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/idemhook/idemhook/internal/gather"
	"github.com/redis/go-redis/v9"
)

// Batching (the default of [New]; [Config.Unbatched] turns it off). Without
// it every store call is one command on a connection of its own, so N
// concurrent deliveries cost Redis N reads and N writes on N sockets. With
// it the store's commands go to a few worker goroutines. Each takes the commands waiting at that moment and sends them
// as one pipeline, so Redis reads them with one system call and answers them
// with one. A lone command is sent at once. Commands only wait while an
// earlier pipeline is on the wire. Each command keeps its own result and
// error, and its caller gets them as before. A caller whose context ends
// first returns its context's error. The command may still run, as with any
// command whose reply is not awaited.
//
// With Config.WaitReplicas (or WaitAOF), the calls that wait (a claim's
// SET, a completion's EVALSHA) go in pipelines of their own, which end with
// one WAIT: WAIT counts the replicas that have the connection's last write,
// so its one answer covers every write before it in the pipeline, and every
// call of the pipeline gets it. The other calls of the same moment go out
// beside them in a pipeline without WAIT, so that they never wait for a
// replica.
//
// The worker goroutines start on demand (internal/gather's StartIdle): a
// store that has not been called holds none, the first call starts one, and
// one that has had nothing to send for batchIdle to twice that exits. So a
// store that is never closed leaks no goroutine; Store.Close stops those
// running at once. While a pipeline is on the wire, the calls that arrive
// wait for it and go out together in the next one: one pipeline at a time
// makes the largest pipelines, the fewest system calls per command on both
// sides. Another worker starts (up to batchWorkers) only when a pipeline has
// been on the wire for longer than batchStall with calls waiting, so that a
// slow one (a WAIT for replicas, a stalled server) holds the others up for
// at most that long.

const (
	batchWorkers = 4                     // pipelines on the wire at once
	batchMax     = 256                   // commands per pipeline
	batchIdle    = 1 * time.Second       // a worker with nothing to send this long exits
	batchStall   = 10 * time.Millisecond // a pipeline on the wire this long with calls waiting starts another worker
)

type call struct {
	ctx  context.Context
	cmd  redis.Cmder
	wait bool // followed by the batcher's WAIT
	ack  acks // the WAIT's answer, set before done is closed
	done chan struct{}
}

type batcher struct {
	client  redis.UniversalClient
	wait    *waiting // nil: no call waits
	workers *gather.Workers[*call]
}

var errClosed = errors.New("redisstore: the store is closed")

// newBatcher returns a batcher whose workers start on demand and exit once
// idle for idle.
func newBatcher(client redis.UniversalClient, w *waiting, idle time.Duration) *batcher {
	b := &batcher{client: client, wait: w}
	b.workers = gather.StartIdle(batchWorkers, batchMax, idle, batchStall, b.exec)
	return b
}

func (b *batcher) close() { b.workers.Close() }

// do runs cmd in one of the next pipelines and returns its error.
func (b *batcher) do(ctx context.Context, cmd redis.Cmder) error {
	_, err := b.queue(&call{ctx: ctx, cmd: cmd, done: make(chan struct{})})
	return err
}

// doWait runs cmd in one of the next pipelines that end with the
// batcher's WAIT, and returns the WAIT's answer and cmd's error.
func (b *batcher) doWait(ctx context.Context, cmd redis.Cmder) (acks, error) {
	return b.queue(&call{ctx: ctx, cmd: cmd, wait: true, done: make(chan struct{})})
}

func (b *batcher) queue(c *call) (acks, error) {
	if err := b.workers.Put(c.ctx, c); err != nil {
		if err == gather.ErrStopped {
			err = errClosed
		}
		return acks{}, err
	}
	select {
	case <-c.done:
		return c.ack, c.cmd.Err()
	case <-c.ctx.Done():
		return acks{}, c.ctx.Err()
	}
}

// exec sends batch as one pipeline; or, when some of its calls wait and
// others don't, as two pipelines at once, the one of the waiting calls
// followed by WAIT.
func (b *batcher) exec(batch []*call) {
	n := 0 // the calls that wait, moved to the front
	for i, c := range batch {
		if c.wait {
			batch[n], batch[i] = batch[i], batch[n]
			n++
		}
	}
	switch {
	case n == 0:
		b.send(batch, false)
	case n == len(batch):
		b.send(batch, true)
	default:
		done := make(chan struct{})
		go func() {
			defer close(done)
			b.send(batch[n:], false)
		}()
		b.send(batch[:n], true)
		<-done
	}
}

// send sends calls as one pipeline, followed by the batcher's WAIT when
// wait is set. The pipeline runs until the latest deadline of the calls,
// so that one caller's short deadline never fails the others' commands. If
// any call has no deadline, only the client's own timeouts bound it.
func (b *batcher) send(calls []*call, wait bool) {
	var deadline gather.Deadline
	pipe := b.client.Pipeline()
	var sent []*call
	for _, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.cmd.SetErr(err)
			close(c.done)
			continue
		}
		deadline.Add(c.ctx)
		pipe.Process(c.ctx, c.cmd) //nolint:errcheck // a pipeline's Process only queues
		sent = append(sent, c)
	}
	if len(sent) == 0 {
		return
	}
	ctx, cancel := deadline.Context()
	var wc redis.Cmder
	if wait {
		wc = b.wait.goredisCmd(ctx)
		pipe.Process(ctx, wc) //nolint:errcheck // a pipeline's Process only queues
	}
	pipe.Exec(ctx) //nolint:errcheck // every command carries its own error
	cancel()
	var ack acks
	if wait {
		ack = b.wait.goredisAcks(wc)
	}
	for _, c := range sent {
		c.ack = ack
		close(c.done)
	}
}

// isNoScript reports whether err says the server doesn't have a script
// cached (EVALSHA's NOSCRIPT).
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
