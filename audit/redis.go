package audit

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults of [RedisStreamConfig].
const (
	DefaultStreamKey    = "idemhook:audit"
	DefaultStreamMaxLen = 100000
)

// RedisStreamConfig configures a [RedisStream]. The zero value means the
// defaults.
type RedisStreamConfig struct {
	// Key is the stream's key. Every gateway writing the same key shares
	// one trail. Default: DefaultStreamKey ("idemhook:audit").
	Key string

	// MaxLen caps the stream: each write trims it to about MaxLen entries
	// (XADD MAXLEN ~, which trims whole nodes, so a few more may stay).
	// An entry takes about 200-300 bytes of Redis memory. Default:
	// DefaultStreamMaxLen (100000).
	MaxLen int64
}

// RedisStream is a [Sink] and [Querier] keeping the trail in a capped Redis
// stream, typically on the Redis the gateways already share as their store,
// so that every gateway on it writes and reads one trail. Create it with
// [NewRedisStream].
//
// Query has the filters and the pagination of the SQL sinks, with one
// difference in order: entries come newest first in the order they were
// appended (roughly when each delivery finished), not sorted by their Time.
// An entry's ID is derived from its stream ID. Queries with rare filters
// scan the stream (at most MaxLen entries), which is what an admin query
// may cost.
type RedisStream struct {
	client redis.UniversalClient
	key    string
	maxLen int64
}

var (
	_ Sink    = (*RedisStream)(nil)
	_ Querier = (*RedisStream)(nil)
)

// NewRedisStream returns a sink appending to the stream cfg.Key through
// client. It sends nothing until the first Write or Query. The caller owns
// client.
func NewRedisStream(client redis.UniversalClient, cfg RedisStreamConfig) (*RedisStream, error) {
	if client == nil {
		return nil, errors.New("audit: NewRedisStream: nil client")
	}
	if cfg.MaxLen < 0 {
		return nil, fmt.Errorf("audit: NewRedisStream: negative MaxLen %d", cfg.MaxLen)
	}
	if cfg.Key == "" {
		cfg.Key = DefaultStreamKey
	}
	if cfg.MaxLen == 0 {
		cfg.MaxLen = DefaultStreamMaxLen
	}
	return &RedisStream{client: client, key: cfg.Key, maxLen: cfg.MaxLen}, nil
}

// Key returns the stream's key.
func (s *RedisStream) Key() string { return s.key }

// Write appends entries in one MULTI/EXEC transaction: all or none.
func (s *RedisStream) Write(ctx context.Context, entries []Entry) error {
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
func (s *RedisStream) Query(ctx context.Context, f Filter) (Page, error) {
	end := "+"
	if f.Cursor != "" {
		id, err := decodeStreamCursor(f.Cursor)
		if err != nil {
			return Page{}, err
		}
		end = "(" + id
	}
	since, until := f.window()
	limit := f.limit()
	var out []Entry
	var ids []string
	for {
		msgs, err := s.client.XRevRangeN(ctx, s.key, end, "-", scanChunk).Result()
		if err != nil {
			return Page{}, fmt.Errorf("audit: query stream %s: %w", s.key, err)
		}
		for _, m := range msgs {
			e, ms, err := streamEntry(m)
			if err != nil {
				return Page{}, fmt.Errorf("audit: query stream %s: %w", s.key, err)
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
func streamPage(rows []Entry, ids []string, limit int) Page {
	if len(rows) <= limit {
		return Page{Entries: rows}
	}
	return Page{Entries: rows[:limit], Next: base64.RawURLEncoding.EncodeToString([]byte("s1:" + ids[limit-1]))}
}

func decodeStreamCursor(c string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	id, ok := strings.CutPrefix(string(raw), "s1:")
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	if _, _, err := parseStreamID(id); err != nil {
		return "", fmt.Errorf("%w: %q", ErrBadCursor, c)
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

// streamEntry decodes one stream message; its ID is the stream ID's
// milliseconds shifted left 20 bits plus its sequence number, unique while
// fewer than a million entries are appended in one millisecond.
func streamEntry(m redis.XMessage) (Entry, int64, error) {
	ms, seq, err := parseStreamID(m.ID)
	if err != nil {
		return Entry{}, 0, err
	}
	str := func(name string) string { v, _ := m.Values[name].(string); return v }
	num := func(name string) int64 { n, _ := strconv.ParseInt(str(name), 10, 64); return n }
	e := Entry{
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

var _ Counter = (*RedisStream)(nil)

// Counts returns the number of entries matching f per source and outcome,
// ordered by source then outcome, reading the stream (at most MaxLen
// entries). f.Limit and f.Cursor are ignored.
func (s *RedisStream) Counts(ctx context.Context, f Filter) ([]Count, error) {
	since, until := f.window()
	c := counter{}
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
				return c.counts(), nil
			}
			if matches(e, f, since, until) {
				c.add(e)
			}
		}
		if len(msgs) < scanChunk {
			return c.counts(), nil
		}
		end = "(" + msgs[len(msgs)-1].ID
	}
}
