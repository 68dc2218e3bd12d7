// Package redisaudit is the audit sink on Redis (through go-redis). The
// trail is a capped stream, idemhook:audit by default. It is typically on
// the Redis the gateways already share as their store, so that every
// gateway on it writes and reads one trail.
//
// The sink is an [audit.Sink], [audit.Querier] and [audit.Counter]. It is
// a package of its own so that package audit compiles no driver.
package redisaudit

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/internal/auditpage"
	"github.com/idemhook/idemhook/internal/storeconf"
	"github.com/redis/go-redis/v9"
)

// Defaults of [Config].
const (
	DefaultKey    = storeconf.RedisAuditKey
	DefaultMaxLen = 100000
)

// Config configures a [Sink]. The zero value means the defaults.
type Config struct {
	// Key is the stream's key. Every gateway writing the same key shares
	// one trail. Default: DefaultKey ("idemhook:audit").
	Key string

	// MaxLen caps the stream: each write trims it to about MaxLen entries
	// (XADD MAXLEN ~, which trims whole nodes, so a few more may stay).
	// An entry takes about 200-300 bytes of Redis memory. Default:
	// DefaultMaxLen (100000).
	MaxLen int64
}

// Sink is an [audit.Sink], [audit.Querier] and [audit.Counter] keeping the
// trail in a capped Redis stream, typically on the Redis the gateways
// already share as their store, so that every gateway on it writes and
// reads one trail. Create it with [New].
//
// Query has the filters and the pagination of the SQL sinks, with one
// difference in order: entries come newest first in the order they were
// appended (roughly when each delivery finished), not sorted by their Time.
// An entry's ID is derived from its stream ID. Queries with rare filters
// scan the stream (at most MaxLen entries), which is what an admin query
// may cost.
type Sink struct {
	client redis.UniversalClient
	key    string
	maxLen int64
}

var (
	_ audit.Sink    = (*Sink)(nil)
	_ audit.Querier = (*Sink)(nil)
	_ audit.Counter = (*Sink)(nil)
)

// New returns a sink appending to the stream cfg.Key through
// client. It sends nothing until the first Write or Query. The caller owns
// client.
func New(client redis.UniversalClient, cfg Config) (*Sink, error) {
	if client == nil {
		return nil, errors.New("audit: redisaudit.New: nil client")
	}
	if cfg.MaxLen < 0 {
		return nil, fmt.Errorf("audit: redisaudit.New: negative MaxLen %d", cfg.MaxLen)
	}
	if cfg.Key == "" {
		cfg.Key = DefaultKey
	}
	if cfg.MaxLen == 0 {
		cfg.MaxLen = DefaultMaxLen
	}
	return &Sink{client: client, key: cfg.Key, maxLen: cfg.MaxLen}, nil
}

// Key returns the stream's key.
func (s *Sink) Key() string { return s.key }

// Write appends entries in one MULTI/EXEC transaction: all or none.
func (s *Sink) Write(ctx context.Context, entries []audit.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i := range entries {
			e := &entries[i]
			p.XAdd(ctx, &redis.XAddArgs{
				Stream: s.key,
				MaxLen: s.maxLen,
				Approx: true,
				Values: []any{
					"t", e.Time.UnixMicro(), "route", e.Route, "source", e.Source, "key", e.Key,
					"outcome", e.Outcome, "status", e.Status, "duration_ns", int64(e.Duration),
					"request_bytes", e.RequestBytes, "response_bytes", e.ResponseBytes,
					"reason", e.Reason, "instance", e.Instance, "scope", e.Scope,
				},
			})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit: write %d entries to stream %s: %w", len(entries), s.key, err)
	}
	return nil
}

// scanChunk is how many stream entries one XREVRANGE reads.
const scanChunk = 500

// clockSkew is how far a gateway's clock may run ahead of Redis's: a scan
// for entries since T stops at stream IDs older than T minus this.
const clockSkew = time.Minute

// Query returns a page of the entries matching f, newest appended first.
func (s *Sink) Query(ctx context.Context, f audit.Filter) (audit.Page, error) {
	end := "+"
	if f.Cursor != "" {
		id, err := decodeStreamCursor(f.Cursor)
		if err != nil {
			return audit.Page{}, err
		}
		end = "(" + id
	}
	since, until := auditpage.Window(f.Since, f.Until)
	limit := f.PageSize()
	var out []audit.Entry
	var ids []string
	for {
		msgs, err := s.client.XRevRangeN(ctx, s.key, end, "-", scanChunk).Result()
		if err != nil {
			return audit.Page{}, fmt.Errorf("audit: query stream %s: %w", s.key, err)
		}
		for _, m := range msgs {
			e, ms, err := streamEntry(m)
			if err != nil {
				return audit.Page{}, fmt.Errorf("audit: query stream %s: %w", s.key, err)
			}
			if since != 0 && ms*1000 < since-clockSkew.Microseconds() {
				return streamPage(out, ids, limit), nil
			}
			us := e.Time.UnixMicro()
			if f.Source != "" && e.Source != f.Source || f.Outcome != "" && e.Outcome != f.Outcome ||
				f.Route != "" && e.Route != f.Route || since != 0 && us < since || until != 0 && us >= until {
				continue
			}
			out, ids = append(out, e), append(ids, m.ID)
			if len(out) > limit {
				return streamPage(out, ids, limit), nil
			}
		}
		if len(msgs) < scanChunk {
			return streamPage(out, ids, limit), nil
		}
		end = "(" + msgs[len(msgs)-1].ID
	}
}

// streamPage makes the page of rows fetched up to limit+1, ids holding
// their stream IDs.
func streamPage(rows []audit.Entry, ids []string, limit int) audit.Page {
	if len(rows) <= limit {
		return audit.Page{Entries: rows}
	}
	return audit.Page{Entries: rows[:limit], Next: base64.RawURLEncoding.EncodeToString([]byte("s1:" + ids[limit-1]))}
}

func decodeStreamCursor(c string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", fmt.Errorf("%w: %q", audit.ErrBadCursor, c)
	}
	id, ok := strings.CutPrefix(string(raw), "s1:")
	if !ok {
		return "", fmt.Errorf("%w: %q", audit.ErrBadCursor, c)
	}
	if _, _, err := parseStreamID(id); err != nil {
		return "", fmt.Errorf("%w: %q", audit.ErrBadCursor, c)
	}
	return id, nil
}

func parseStreamID(id string) (ms, seq int64, err error) {
	a, b, ok := strings.Cut(id, "-")
	if !ok {
		return 0, 0, fmt.Errorf("stream ID %q", id)
	}
	ms, err1 := strconv.ParseInt(a, 10, 64)
	seq, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || ms < 0 || seq < 0 {
		return 0, 0, fmt.Errorf("stream ID %q", id)
	}
	return ms, seq, nil
}

// streamEntry decodes one stream message. Its ID is the stream ID's
// milliseconds shifted left 20 bits plus its sequence number. The ID is
// unique while fewer than a million entries are appended in one
// millisecond.
func streamEntry(m redis.XMessage) (audit.Entry, int64, error) {
	ms, seq, err := parseStreamID(m.ID)
	if err != nil {
		return audit.Entry{}, 0, err
	}
	str := func(name string) string { v, _ := m.Values[name].(string); return v }
	num := func(name string) int64 { n, _ := strconv.ParseInt(str(name), 10, 64); return n }
	e := audit.Entry{
		ID:            ms<<20 | seq&(1<<20-1),
		Time:          time.UnixMicro(num("t")).UTC(),
		Route:         str("route"),
		Source:        str("source"),
		Key:           str("key"),
		Outcome:       str("outcome"),
		Status:        int(num("status")),
		Duration:      time.Duration(num("duration_ns")),
		RequestBytes:  num("request_bytes"),
		ResponseBytes: num("response_bytes"),
		Reason:        str("reason"),
		Instance:      str("instance"),
		Scope:         str("scope"),
	}
	return e, ms, nil
}

// Counts returns the number of entries matching f per source and outcome,
// ordered by source then outcome, reading the stream (at most MaxLen
// entries). f.Limit and f.Cursor are ignored.
func (s *Sink) Counts(ctx context.Context, f audit.Filter) ([]audit.Count, error) {
	since, _ := auditpage.Window(f.Since, f.Until)
	t := audit.NewTally(f)
	end := "+"
	for {
		msgs, err := s.client.XRevRangeN(ctx, s.key, end, "-", scanChunk).Result()
		if err != nil {
			return nil, fmt.Errorf("audit: counts of stream %s: %w", s.key, err)
		}
		for _, m := range msgs {
			e, ms, err := streamEntry(m)
			if err != nil {
				return nil, fmt.Errorf("audit: counts of stream %s: %w", s.key, err)
			}
			if since != 0 && ms*1000 < since-clockSkew.Microseconds() {
				return t.Counts(), nil
			}
			t.Add(e)
		}
		if len(msgs) < scanChunk {
			return t.Counts(), nil
		}
		end = "(" + msgs[len(msgs)-1].ID
	}
}
