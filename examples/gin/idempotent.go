package main

import (
	"bufio"
	"errors"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
)

// Idempotent turns an idemhook route (mw.Route(...)) into gin middleware.
//
// The handlers after it run inside the idemhook middleware and write
// through it, so that it sees (and stores) the response. A re-delivery is
// answered with the stored response, and the chain is aborted without
// running them. A handler that answers 5xx (c.AbortWithStatus(500),
// c.JSON(503, ...)) releases the claim, so the provider's retry runs it
// again.
func Idempotent(route func(http.Handler) http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		orig := c.Writer
		ran := false
		route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran = true
			gw := &writer{ResponseWriter: orig, w: w, status: http.StatusOK, size: -1}
			c.Request = r // the body, read by the middleware, is handed on unchanged
			c.Writer = gw
			c.Next()
			gw.WriteHeaderNow() // a handler that only set a status (c.Status(204)) sends it
		})).ServeHTTP(orig, c.Request)
		c.Writer = orig
		if !ran {
			c.Abort() // replayed or refused: the route's handlers must not run
		}
	}
}

// writer is the gin.ResponseWriter the handlers write to: gin's semantics
// (WriteHeader only records the status until the first write) over the
// middleware's http.ResponseWriter.
type writer struct {
	gin.ResponseWriter // the connection's, for CloseNotify
	w                  http.ResponseWriter
	status             int
	size               int // -1 until the header is written
}

func (g *writer) Header() http.Header { return g.w.Header() }

func (g *writer) WriteHeader(code int) {
	if code > 0 && !g.Written() {
		g.status = code
	}
}

func (g *writer) WriteHeaderNow() {
	if !g.Written() {
		g.size = 0
		g.w.WriteHeader(g.status)
	}
}

func (g *writer) Write(b []byte) (int, error) {
	g.WriteHeaderNow()
	n, err := g.w.Write(b)
	g.size += n
	return n, err
}

func (g *writer) WriteString(s string) (int, error) { return g.Write([]byte(s)) }
func (g *writer) Status() int                       { return g.status }
func (g *writer) Size() int                         { return g.size }
func (g *writer) Written() bool                     { return g.size != -1 }
func (g *writer) Pusher() http.Pusher               { return nil }
func (g *writer) Unwrap() http.ResponseWriter       { return g.w }

func (g *writer) Flush() {
	g.WriteHeaderNow()
	_ = http.NewResponseController(g.w).Flush()
}

// Hijack is refused: the middleware could not know the answer of a
// delivery whose connection was taken over.
func (g *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, errors.New("idemhook: an idempotent route can't hijack its connection")
}
