package redistest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A Link relays the TCP connections made to its address to a server, and
// passes on what the server sends a fixed delay after it arrived. Put
// between a replica and its master (StartReplica(t, link.Addr())), it is a
// replication stream that lags by the delay, as over a slow or distant
// network or to a replica busy elsewhere: the master acknowledges each
// write to its client at once, and the replica gets it later. What the
// replica sends (its acknowledgements) goes through at once.
//
// Cut ends every connection and drops what the link still holds, so the
// replica never gets it: what a master that dies takes with it when its
// replication stream was not yet through.
type Link struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // time.Duration

	cut     chan struct{}
	cutOnce sync.Once
	wg      sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

// StartLink starts a link to the server at target on a free loopback port,
// with the given delay, and cuts it when the test ends.
func StartLink(t testing.TB, target string, delay time.Duration) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: link: %v", err)
	}
	l := &Link{ln: ln, target: target, cut: make(chan struct{})}
	l.delay.Store(int64(delay))
	l.wg.Go(l.accept)
	t.Cleanup(l.Cut)
	return l
}

// SetDelay changes the delay from now on: each byte the server sends is
// passed on delay after it arrived, or at once if that time has come.
// Starting with no delay and setting one once the replica has synchronized
// spares the replica's handshake (several round trips) the delay.
func (l *Link) SetDelay(delay time.Duration) { l.delay.Store(int64(delay)) }

// Addr returns the link's address, "127.0.0.1:<port>".
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Cut closes the link and every connection through it at once, dropping
// whatever the server sent that has not been passed on, and waits for the
// link's goroutines. New connections are refused. Cutting a cut link does
// nothing.
func (l *Link) Cut() {
	l.cutOnce.Do(func() {
		close(l.cut)
		l.ln.Close()
		l.mu.Lock()
		for _, c := range l.conns {
			c.Close()
		}
		l.mu.Unlock()
	})
	l.wg.Wait()
}

func (l *Link) accept() {
	for {
		down, err := l.ln.Accept()
		if err != nil {
			return // cut
		}
		up, err := net.DialTimeout("tcp", l.target, time.Second)
		if err != nil {
			down.Close()
			continue
		}
		if !l.track(down, up) {
			return
		}
		l.wg.Go(func() { relay(up, down) })
		chunks := make(chan chunk, 1024)
		l.wg.Go(func() { l.read(up, down, chunks) })
		l.wg.Go(func() { l.write(down, up, chunks) })
	}
}

// track records the connections so that Cut closes them, or closes them
// and reports false when the link is already cut.
func (l *Link) track(cs ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.cut:
		for _, c := range cs {
			c.Close()
		}
		return false
	default:
	}
	l.conns = append(l.conns, cs...)
	return true
}

// relay copies from src to dst at once, until either ends.
func relay(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			dst.Close()
			src.Close()
			return
		}
	}
}

// A chunk is what one read from the server returned, and when.
type chunk struct {
	data []byte
	at   time.Time
}

// read reads what the server sends into chunks, stamped with their
// arrival. It closes chunks when the server's side ends.
func (l *Link) read(up, down net.Conn, chunks chan<- chunk) {
	defer close(chunks)
	for {
		buf := make([]byte, 32<<10)
		n, err := up.Read(buf)
		if n > 0 {
			select {
			case chunks <- chunk{data: buf[:n], at: time.Now()}:
			case <-l.cut:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// write passes each chunk on once it is delay old, unless the link is cut
// first: then what it holds is dropped.
func (l *Link) write(down, up net.Conn, chunks <-chan chunk) {
	defer func() {
		down.Close()
		up.Close()
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for c := range chunks {
		if wait := time.Until(c.at.Add(time.Duration(l.delay.Load()))); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-l.cut:
				return
			}
		}
		select {
		case <-l.cut:
			return
		default:
		}
		if _, err := down.Write(c.data); err != nil {
			return
		}
	}
}
