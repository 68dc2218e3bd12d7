package redisstore

import (
	"context"
	"errors"
	"strings"

	"github.com/idemhook/idemhook/internal/gather"
	"github.com/redis/go-redis/v9"
)

// Batching ([Config.Batch]). Without it every store call is one command on
// a connection of its own, so N concurrent deliveries cost Redis N reads and
// N writes on N sockets. With it the store's commands go to a few worker
// goroutines. Each takes the commands waiting at that moment and sends them
// as one pipeline, so Redis reads them with one system call and answers them
// with one. A lone command is sent at once. Commands only wait while an
// earlier pipeline is on the wire. Each command keeps its own result and
// error, and its caller gets them as before. A caller whose context ends
// first returns its context's error. The command may still run, as with any
// command whose reply is not awaited.

const (
	batchWorkers = 4   // pipelines on the wire at once
	batchMax     = 256 // commands per pipeline
)

type call struct {
	ctx  context.Context
	cmd  redis.Cmder
	done chan struct{}
}

type batcher struct {
	client  redis.UniversalClient
	workers *gather.Workers[*call]
}

var errClosed = errors.New("redisstore: the store is closed")

func startBatcher(client redis.UniversalClient) *batcher {
	b := &batcher{client: client}
	b.workers = gather.Start(batchWorkers, batchMax, b.exec)
	return b
}

func (b *batcher) close() { b.workers.Close() }

// do runs cmd in one of the next pipelines and returns its error.
func (b *batcher) do(ctx context.Context, cmd redis.Cmder) error {
	c := &call{ctx: ctx, cmd: cmd, done: make(chan struct{})}
	select {
	case b.workers.Queue() <- c:
	case <-ctx.Done():
		return ctx.Err()
	case <-b.workers.Stopped():
		return errClosed
	}
	select {
	case <-c.done:
		return cmd.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// exec sends batch as one pipeline. It runs until the latest deadline of
// the batch's calls, so that one caller's short deadline never fails the
// others' commands. If any call has no deadline, only the client's own
// timeouts bound the pipeline.
func (b *batcher) exec(batch []*call) {
	var deadline gather.Deadline
	pipe := b.client.Pipeline()
	var sent []*call
	for _, c := range batch {
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
	pipe.Exec(ctx) //nolint:errcheck // every command carries its own error
	cancel()
	for _, c := range sent {
		close(c.done)
	}
}

// isNoScript reports whether err says the server doesn't have a script
// cached (EVALSHA's NOSCRIPT).
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
