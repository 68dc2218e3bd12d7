package idemhook

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
)

// responseCapture wraps the handler's ResponseWriter.
//
// In buffering mode (the first delivery of an event) it holds the status and
// the body, up to the storage cap, and sends nothing. The middleware stores
// the response (or releases the claim) first and only then sends it. A
// provider that retries the instant it has our answer thus finds the
// response stored rather than a pending claim. Flush is deferred while
// buffering. A body over the cap switches to streaming. What was buffered is
// sent and the rest passes straight through. The record then keeps status
// and headers only.
//
// A handler that hijacks the connection answers on it directly: nothing is
// stored and the claim is released.
//
// In pass-through mode (a delivery that owns no claim) it only counts.
type responseCapture struct {
	w         http.ResponseWriter
	buffering bool
	limit     int

	status    int
	streaming bool // the header was sent to w
	omitted   bool // the body went over limit
	hijacked  bool // the handler took over the connection
	buf       []byte
	written   int64
}

var (
	_ http.Flusher  = (*responseCapture)(nil)
	_ http.Hijacker = (*responseCapture)(nil)
)

func (c *responseCapture) Header() http.Header { return c.w.Header() }

func (c *responseCapture) WriteHeader(code int) {
	if code < 100 || code > 999 {
		// net/http's own check, made here so that the panic happens in
		// the handler (which releases the claim) and not after the bad
		// status was stored, when the buffered response is sent.
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if c.status != 0 {
		return // superfluous, as in net/http; a 1xx after the final status too
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		c.w.WriteHeader(code) // informational: passes through, not the final status
		return
	}
	c.status = code
	if !c.buffering {
		c.streaming = true
		c.w.WriteHeader(code)
	}
}

func (c *responseCapture) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	c.written += int64(len(p))
	if c.streaming {
		return c.w.Write(p)
	}
	if len(c.buf)+len(p) <= c.limit {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	c.omitted = true
	c.startStreaming()
	return c.w.Write(p)
}

// startStreaming sends the status and what is buffered.
func (c *responseCapture) startStreaming() {
	c.streaming = true
	c.w.WriteHeader(c.status)
	if len(c.buf) > 0 {
		c.w.Write(c.buf) //nolint:errcheck // a write error reaches the handler on its next Write
	}
}

// Flush implements http.Flusher; it is deferred while buffering.
func (c *responseCapture) Flush() {
	if c.streaming {
		http.NewResponseController(c.w).Flush() //nolint:errcheck // Flusher has no error
	}
}

// FlushError is what http.ResponseController calls.
func (c *responseCapture) FlushError() error {
	if c.streaming {
		return http.NewResponseController(c.w).Flush()
	}
	return nil
}

// Hijack hands the connection to the handler, as net/http does: what the
// handler wrote before is sent first. From then on the middleware writes
// nothing and, not knowing the answer, stores none (the claim is released).
// Where the underlying writer can't hijack (HTTP/2), it fails with
// http.ErrNotSupported and changes nothing.
func (c *responseCapture) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj := hijacker(c.w)
	if hj == nil {
		return nil, nil, fmt.Errorf("idemhook: hijack: %w", http.ErrNotSupported)
	}
	if !c.streaming && c.status != 0 {
		c.startStreaming()
		// Should the hijack fail, what follows streams past the buffer:
		// the record must not keep a truncated body.
		c.omitted = true
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	c.hijacked = true
	c.streaming = true
	return conn, rw, nil
}

// hijacker finds the Hijacker under w the way http.ResponseController does.
func hijacker(w http.ResponseWriter) http.Hijacker {
	for {
		switch t := w.(type) {
		case http.Hijacker:
			return t
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return nil
		}
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (c *responseCapture) Unwrap() http.ResponseWriter { return c.w }

// finalStatus is the status the handler answered; 200 when it wrote nothing,
// as net/http does.
func (c *responseCapture) finalStatus() int {
	if c.status == 0 {
		return http.StatusOK
	}
	return c.status
}

// send writes a buffered response to the client.
func (c *responseCapture) send() {
	if c.streaming {
		return
	}
	c.streaming = true
	c.w.WriteHeader(c.finalStatus())
	if len(c.buf) > 0 {
		c.w.Write(c.buf) //nolint:errcheck // the client may be gone; nothing to do
	}
}
