package main

import (
	"io"
	"net"
	"sync"
	"testing"
)

// tcpProxy forwards a loopback port to a real server (PostgreSQL here). A
// test can then take the server away from the gateway and give it back
// without stopping the server, which other tests and programs share. down
// closes the listening socket (new connections are refused, as by a stopped
// server) and cuts every connection in progress. up listens again on the
// same port.
type tcpProxy struct {
	t      *testing.T
	addr   string // the proxy's address, fixed for its lifetime
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	p := &tcpProxy{t: t, target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() {
		p.down()
		p.wg.Wait()
	})
	return p
}

func (p *tcpProxy) serve(ln net.Listener) {
	p.ln = ln
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.pipe(c) })
		}
	})
}

func (p *tcpProxy) pipe(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // went down meanwhile
		p.mu.Unlock()
		c.Close()
		s.Close()
		return
	}
	p.conns[c], p.conns[s] = true, true
	p.mu.Unlock()
	var wg sync.WaitGroup
	copyClose := func(dst, src net.Conn) {
		io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	wg.Go(func() { copyClose(s, c) })
	wg.Go(func() { copyClose(c, s) })
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// down refuses new connections and cuts the open ones.
func (p *tcpProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
}

// up accepts connections again, on the same address.
func (p *tcpProxy) up() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("listening again on %s: %v", p.addr, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serve(ln)
}
