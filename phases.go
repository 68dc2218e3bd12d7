package idemhook

import (
	"net/http"
	"strconv"
)

// A delivery goes through its phases in order, each taking what the one
// before returned:
//
//	decide  (middleware.go)  read, check and key the request, claim its key: a verdict
//	serve   (this file)      run the handler under the verdict: a handlerRun,
//	                         a panic captured into it
//	settle  (middleware.go,  store the handler's answer or release the claim
//	         delivery.go)    (or learn what the handler's transaction did): a settled,
//	                         which holds the answer to send
//	send    (this file)      write that answer: the one writer of an answer
//	                         decided after the handler ran
//	report  (middleware.go)  Options.OnDelivery, once
//
// A verdict that runs no handler (a replay, a problem) is answered and
// reported by exchange.end directly. A batched delivery (itemsrun.go)
// settles each of its items as its handler's run returns, and its settled
// holds the batch's counts; the batch's one answer is written by
// itemRun.answer, its last step.

// settled is how a delivery that ran the handler ends: the outcome it
// reports, with its error, and the answer the caller gets.
type settled struct {
	outcome Outcome
	err     error
	answer  answer
	items   *ItemsInfo // a batched delivery's counts, once it answered

	bodyOmitted bool // the answer stored has no body: it was over MaxStoredBodyBytes
}

// answer is the answer a settling phase decided on; only send writes it.
type answer struct {
	kind answerKind

	done *txCompletion // answerCommitted: the completion that committed

	// answerProblem
	status        int
	title, detail string
	retryAfter    string // the Retry-After header, if any
}

type answerKind uint8

const (
	answerNone      answerKind = iota // nothing to write: the answer went out already, or it is the handler's to make
	answerCaptured                    // the handler's answer, buffered: sent as it is
	answerCommitted                   // the record the handler's transaction committed, as a replay has it
	answerProblem                     // a problem in place of the handler's answer, headers included
	answerFailed                      // 500 for a handler that panicked or exited its goroutine
)

func problemAnswer(status int, retryAfter, title, detail string) answer {
	return answer{kind: answerProblem, status: status, retryAfter: retryAfter, title: title, detail: detail}
}

// handlerRun is what came of running the handler: whether it returned, the
// value it panicked with, and how the delivery settled. A handler that
// neither returned nor panicked exited its goroutine (runtime.Goexit).
type handlerRun struct {
	returned bool
	panicVal any
	end      settled
}

// serve runs the handler for v (for a batched delivery, the runs of its
// items) and settles the delivery. However the run ends, conclude takes
// its result: when the handler returns, and from serve's deferred call when
// it panics or exits its goroutine, which no recover stops.
func (ex *exchange) serve(v verdict) {
	var run handlerRun
	defer ex.conclude(v, &run)
	switch v.act {
	case actRun:
		ex.h.next.ServeHTTP(&ex.out, ex.r)
		run.end = settled{outcome: v.outcome, err: v.err}
	case actRunClaimed:
		run.end = ex.runClaimed(v.claim)
	case actItems:
		run.end = v.items.runItems()
	}
	run.returned = true
}

// conclude is the one place that decides what follows a handler's run: a
// run that did not return (a panic, captured here, or runtime.Goexit) gives
// up the claims it held and answers 500; then the answer is sent and the
// outcome reported, and a panic goes on, to net/http, from here, where the
// handler's frames are still on the stack for its log.
func (ex *exchange) conclude(v verdict, run *handlerRun) {
	if !run.returned {
		run.panicVal = recover()
		run.end = ex.died(v, run.panicVal)
	}
	ex.send(run.end.answer)
	ex.report(run.end, run.returned)
	if run.panicVal != nil {
		panic(run.panicVal)
	}
}

// died settles a delivery whose handler panicked (p, the value it panicked
// with) or exited its goroutine (p nil). A handler run without a claim
// leaves nothing to give up, nor an answer: net/http ends it.
func (ex *exchange) died(v verdict, p any) settled {
	switch v.act {
	case actRunClaimed:
		return ex.handlerDied(v.claim, p)
	case actItems:
		return v.items.died(p)
	}
	return settled{outcome: v.outcome, err: v.err}
}

// send writes the answer a, decided once the handler returned (or died), to
// the caller. An answer that replaces the handler's is not sent once the
// handler's own has gone out (a body over the storage cap streams; a
// hijacked connection is the handler's).
func (ex *exchange) send(a answer) {
	out := &ex.out
	switch a.kind {
	case answerCaptured:
		out.send()
	case answerCommitted:
		if out.streaming || out.hijacked {
			return
		}
		c := a.done
		ex.offered.resetHeader(c.header)
		w := out.w
		w.Header().Set("Content-Length", strconv.Itoa(len(c.body)))
		out.streaming = true
		out.status = c.status
		out.written = int64(len(c.body))
		out.buf = nil
		w.WriteHeader(c.status)
		w.Write(c.body) //nolint:errcheck // the client may be gone
	case answerProblem:
		if out.streaming || out.hijacked {
			return
		}
		*out = responseCapture{w: out.w}
		ex.offered.resetHeader(nil)
		if a.retryAfter != "" {
			out.w.Header().Set("Retry-After", a.retryAfter)
		}
		ex.writeProblem(a.status, a.title, a.detail)
	case answerFailed:
		// The caller gets a definite failure (and retries), and the hooks
		// report what it got. The answer is flushed, because net/http
		// closes the connection of a panicking handler without sending
		// what is still buffered.
		if out.streaming || ex.r.Context().Err() != nil {
			return
		}
		out.buf, out.status, out.buffering, out.omitted, out.written = out.buf[:0], 0, false, false, 0
		h := out.w.Header()
		for _, name := range representationHeaders {
			h.Del(name)
		}
		ex.writeProblem(http.StatusInternalServerError, "Handler failed",
			"the webhook handler failed; the delivery was not processed, retry it")
		http.NewResponseController(out.w).Flush() //nolint:errcheck // best effort: the connection is about to close
	}
}
