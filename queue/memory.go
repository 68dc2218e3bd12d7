package queue

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/fence"
)

// Memory is an [Engine] in this process's memory, over any idemhook.Store:
// for tests, the demo and a gateway on the memory store. A restart loses
// what it holds, so its accept step is atomic only within the process:
// Accept completes the claim in the store, then appends. An attempt's
// fence is this process's clock (as the middleware's fences on a store
// without a clock of its own), and above the event's last fence.
type Memory struct {
	store idemhook.Store
	now   func() time.Time

	mu     sync.Mutex
	nextID int64
	events map[int64]*memEvent
	routes map[string]*memRoute
}

type memRoute struct {
	ids    []int64 // the route's events in ID order
	paused bool
}

type memEvent struct {
	ev         Event // Attempt, Base and Since are kept up to date
	state      State
	nextAt     time.Time // Queued: due; Running: lease end
	worker     string
	reason     string
	attempts   []Attempt
	lastStatus int
	lastError  string
}

var _ Engine = (*Memory)(nil)

// NewMemory returns an empty memory engine whose Accept completes claims in
// store (the middleware's store).
func NewMemory(store idemhook.Store) *Memory {
	return &Memory{store: store, now: time.Now, events: map[int64]*memEvent{}, routes: map[string]*memRoute{}}
}

func (m *Memory) route(name string) *memRoute {
	r := m.routes[name]
	if r == nil {
		r = &memRoute{}
		m.routes[name] = r
	}
	return r
}

// Accept implements [Engine].
func (m *Memory) Accept(ctx context.Context, c Completion, ev *Event) error {
	if err := ValidateAccept(ev); err != nil {
		return err
	}
	if err := m.store.Complete(ctx, c.Key, c.Claim, c.Done, c.TTL); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.append(ev)
	return nil
}

// AcceptAll implements [Engine]: it completes the claim in the store, then
// appends every event under one hold of the engine's lock, so that no
// Claim sees some of them without the others.
func (m *Memory) AcceptAll(ctx context.Context, c Completion, evs []*Event) error {
	if err := ValidateAcceptAll(evs); err != nil {
		return err
	}
	if err := m.store.Complete(ctx, c.Key, c.Claim, c.Done, c.TTL); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ev := range evs {
		m.append(ev)
	}
	return nil
}

// append gives ev the next ID and appends a copy of it to its route. The
// caller holds m.mu.
func (m *Memory) append(ev *Event) {
	m.nextID++
	ev.ID = m.nextID
	e := &memEvent{ev: *ev, state: Queued, nextAt: ev.ReceivedAt}
	if ev.Lease > 0 {
		ev.Attempt = 1
		e.ev.Attempt, e.state, e.nextAt, e.worker = 1, Running, m.now().Add(ev.Lease), ev.Worker
	}
	e.ev.Header = ev.Header.Clone()
	e.ev.Body = slices.Clone(ev.Body)
	if e.ev.Since.IsZero() {
		e.ev.Since = ev.ReceivedAt
	}
	m.events[ev.ID] = e
	r := m.route(ev.Route)
	r.ids = append(r.ids, ev.ID)
}

// Claim implements [Engine].
func (m *Memory) Claim(ctx context.Context, route string, max int, lease time.Duration, worker string) ([]*Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.routes[route]
	if r == nil || r.paused || max <= 0 {
		return nil, nil
	}
	now := m.now()
	var out []*Event
	heads := map[string]bool{} // ordered groups whose head has been seen
	for _, id := range r.ids {
		e := m.events[id]
		if e.ev.OrderKey != "" {
			if heads[e.ev.OrderKey] {
				continue
			}
			heads[e.ev.OrderKey] = true
		}
		// Queued and due, or running past its lease's end.
		if e.state == Dead || e.nextAt.After(now) {
			continue
		}
		e.state, e.nextAt, e.worker = Running, now.Add(lease), worker
		e.ev.Attempt++
		if f := fence.Next(); f > e.ev.Fence {
			e.ev.Fence = f
		} else {
			e.ev.Fence++ // the event's last fence came from another clock (the store's) and is ahead
		}
		ev := e.ev
		ev.Header = e.ev.Header.Clone()
		ev.Body = slices.Clone(e.ev.Body)
		out = append(out, &ev)
		if len(out) == max {
			break
		}
	}
	return out, nil
}

// holds returns the event t holds, or nil.
func (m *Memory) holds(t Token) *memEvent {
	e := m.events[t.ID]
	if e == nil || e.state != Running || e.ev.Attempt != t.Attempt {
		return nil
	}
	return e
}

// Extend implements [Engine].
func (m *Memory) Extend(ctx context.Context, t Token, lease time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.holds(t)
	if e == nil {
		return ErrSuperseded
	}
	e.nextAt = m.now().Add(lease)
	return nil
}

// Settle implements [Engine].
func (m *Memory) Settle(ctx context.Context, s Settlement) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.holds(s.Token)
	if e == nil {
		if e := m.events[s.Token.ID]; e != nil {
			e.keep(s.Attempt)
		}
		return ErrSuperseded
	}
	e.keep(s.Attempt)
	switch s.Verdict {
	case Delivered:
		m.remove(e)
	case Retry:
		e.state, e.nextAt, e.worker = Queued, s.NextAt, ""
	case Kill:
		e.state, e.nextAt, e.worker, e.reason = Dead, time.Time{}, "", s.Reason
	}
	return nil
}

// keep records a, keeping the first attempt and the most recent ones.
func (e *memEvent) keep(a Attempt) {
	a.BodyHead = slices.Clone(a.BodyHead[:min(len(a.BodyHead), MaxBodyHead)])
	e.attempts = append(e.attempts, a)
	slices.SortStableFunc(e.attempts, func(x, y Attempt) int { return x.Attempt - y.Attempt })
	if len(e.attempts) > KeptAttempts {
		e.attempts = slices.Delete(e.attempts, 1, 2)
	}
	e.lastStatus, e.lastError = a.Status, a.Error
}

func (m *Memory) remove(e *memEvent) {
	delete(m.events, e.ev.ID)
	r := m.routes[e.ev.Route]
	if i, ok := slices.BinarySearch(r.ids, e.ev.ID); ok {
		r.ids = slices.Delete(r.ids, i, i+1)
	}
}

// Hasten implements [Engine].
func (m *Memory) Hasten(ctx context.Context, route string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.routes[route]
	if r == nil {
		return 0, nil
	}
	now := m.now()
	var n int64
	for _, id := range r.ids {
		if e := m.events[id]; e.state == Queued && e.ev.Attempt > 0 && e.nextAt.After(now) {
			e.nextAt = now
			n++
		}
	}
	return n, nil
}

// Stats implements [Engine].
func (m *Memory) Stats(ctx context.Context, route string) (Stats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var st Stats
	r := m.routes[route]
	if r == nil {
		return st, nil
	}
	st.Paused = r.paused
	for _, id := range r.ids {
		e := m.events[id]
		switch {
		case e.state == Dead:
			st.Dead++
			continue
		case e.state == Running:
			st.Running++
		case e.ev.Attempt == 0:
			st.Queued++
		default:
			st.Retrying++
		}
		if st.Oldest.IsZero() || e.ev.ReceivedAt.Before(st.Oldest) {
			st.Oldest = e.ev.ReceivedAt
		}
		if e.state == Queued && (st.NextAt.IsZero() || e.nextAt.Before(st.NextAt)) {
			st.NextAt = e.nextAt
		}
	}
	return st, nil
}

func (e *memEvent) summary() Summary {
	return Summary{
		ID: e.ev.ID, Route: e.ev.Route, Key: e.ev.Key, OrderKey: e.ev.OrderKey,
		State: e.state, Attempt: e.ev.Attempt, ReceivedAt: e.ev.ReceivedAt,
		NextAt: e.nextAt, Reason: e.reason, LastStatus: e.lastStatus, LastError: e.lastError,
	}
}

// selected returns the events f selects, in ID order.
func (m *Memory) selected(f Filter) []*memEvent {
	var out []*memEvent
	for name, r := range m.routes {
		if f.Route != "" && name != f.Route {
			continue
		}
		for _, id := range r.ids {
			e := m.events[id]
			if s := e.summary(); f.Selects(&s) {
				out = append(out, e)
			}
		}
	}
	slices.SortFunc(out, func(a, b *memEvent) int { return int(a.ev.ID - b.ev.ID) })
	return out
}

// List implements [Engine].
func (m *Memory) List(ctx context.Context, f Filter) ([]Summary, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Summary
	for _, e := range m.selected(f) {
		if len(out) == f.PageSize() {
			break
		}
		out = append(out, e.summary())
	}
	return out, nil
}

// Get implements [Engine].
func (m *Memory) Get(ctx context.Context, id int64) (*Summary, []Attempt, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.events[id]
	if e == nil {
		return nil, nil, nil
	}
	s := e.summary()
	attempts := make([]Attempt, len(e.attempts))
	for i, a := range e.attempts {
		a.BodyHead = slices.Clone(a.BodyHead)
		attempts[i] = a
	}
	return &s, attempts, nil
}

// Redrive implements [Engine].
func (m *Memory) Redrive(ctx context.Context, f Filter) (int64, error) {
	if err := ValidateFilter("Redrive", f); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	var n int64
	for _, e := range m.selected(f) {
		if e.state == Running {
			continue
		}
		e.state, e.nextAt, e.reason = Queued, now, ""
		e.ev.Base, e.ev.Since = e.ev.Attempt, now
		n++
	}
	return n, nil
}

// Purge implements [Engine].
func (m *Memory) Purge(ctx context.Context, f Filter) ([]string, error) {
	if err := ValidateFilter("Purge", f); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	for _, e := range m.selected(f) {
		if e.state == Running {
			continue
		}
		keys = append(keys, e.ev.Key)
		m.remove(e)
	}
	return keys, nil
}

// SetPaused implements [Engine].
func (m *Memory) SetPaused(ctx context.Context, route string, paused bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.route(route).paused = paused
	return nil
}
