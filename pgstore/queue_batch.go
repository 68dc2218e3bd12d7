package pgstore

import (
	"encoding/binary"
	"fmt"
)

// An accept is one statement (acceptSQL) that makes both writes: the
// keys' compare-and-set and the INSERT of the event. Without [Config.Batch]
// it goes to PostgreSQL alone, as a pgx.Batch of its own: one round trip,
// one implicit transaction, one flush. With it, an unordered accept goes
// to the store's batcher (batch.go) like a Claim or a Complete. The
// batcher sends the statements waiting at that moment as one pgx.Batch:
// one round trip, one implicit transaction, one commit and one flush for
// all of them.
//
// Each accept stays atomic on its own, because it is one statement: the
// INSERT takes its row from the UPDATE's RETURNING, so the event is
// inserted exactly when the key's compare-and-set matched. A claim that is
// no longer held matches no row, inserts nothing, and yields NULL rather
// than no row. That is a result, not an error, so the batch commits for
// the others. When the server rejects a statement (the batch is then
// rolled back), the batcher runs each statement again on its own.
//
// Ordered accepts keep a batch of their own (Queue.acceptAlone): their head
// flag needs the group's advisory lock before the INSERT, taken by the
// batch's first statement, and in a shared batch that lock would be held
// until the whole batch commits, holding back every other accept and
// delete of the group meanwhile.
//
// AcceptAll's statement (acceptAllSQL) is the same for several events, one
// per route: unordered, it goes where an unordered accept goes; with an
// ordered event, in a batch of its own after the locks of all its ordered
// events' groups, taken by route then order key, so that two AcceptAlls
// of the same groups take their locks in one order and never deadlock.
//
// Within one batch the statements run in the keys' order (batch.go), so
// the ids of a batch's events follow their keys rather than their
// arrival. Only ordered events depend on the order of ids.

// prepareAcceptSQL builds acceptSQL. Its arguments: $1 the store key, $2
// the encoded claim, $3 the encoded done record, $4 its lifetime in
// microseconds (those four are completeSQL's, in its order), $5 the route,
// $6 the received time, $7 since, $8 the encoded request, $9 the lease in
// microseconds (0: queued), $10 the worker holding it (NULL without a
// lease), $11 the event's store key, $12 its fence (the claim's), $13 its
// order key (NULL: unordered). The UPDATE is completeSQL's compare-and-set.
// The INSERT makes an unordered event its own head, and an ordered one its
// group's head when the group has no other event; with a lease, the event
// is running its first attempt (see queue.Event.Lease). The statement
// yields one row: the event's id as 8 big-endian bytes (int8send), or NULL
// when the claim is no longer held.
func (q *Queue) prepareAcceptSQL() {
	keys := q.s.ident
	q.acceptSQL = `WITH c AS (
		UPDATE ` + keys + ` SET value = $3::bytea, expires_at = statement_timestamp() + $4::bigint * interval '1 microsecond'
		WHERE key = $1::bytea AND value = $2::bytea AND expires_at > statement_timestamp()
		RETURNING 1
	), ins AS (
		INSERT INTO ` + q.events + ` (route, store_key, order_key, head, next_at, received_at, since, request,
			state, attempt, lease_until, lease_by, fence)
		SELECT $5::text, $11::bytea, $13::bytea, $13::bytea IS NULL OR NOT EXISTS (
			SELECT 1 FROM ` + q.events + ` g WHERE g.route = $5::text AND g.order_key = $13::bytea),
			now(), $6::timestamptz, $7::timestamptz, $8::bytea,
			CASE WHEN $9::bigint > 0 THEN 1 ELSE 0 END, CASE WHEN $9::bigint > 0 THEN 1 ELSE 0 END,
			CASE WHEN $9::bigint > 0 THEN now() + $9::bigint * interval '1 microsecond' END, $10::text, $12::bigint
		FROM c
		RETURNING id
	)
	SELECT (SELECT int8send(id) FROM ins)`
}

// acceptID reads acceptSQL's value: the event's id, and false when the
// claim was no longer held.
func acceptID(value []byte) (int64, bool, error) {
	switch len(value) {
	case 0:
		return 0, false, nil
	case 8:
		return int64(binary.BigEndian.Uint64(value)), true, nil
	}
	return 0, false, fmt.Errorf("accept returned %d bytes for the event's id, want 8", len(value))
}

// prepareAcceptAllSQL builds acceptAllSQL, AcceptAll's statement: acceptSQL
// for one completion and several events, each of its own route. Its
// arguments: $1 to $4 as acceptSQL's (the completion), then one array per
// column of the events, element i for event i: $5 the routes, $6 the
// received times, $7 the since times, $8 the place of each event's
// encoded request in $12 (from 1), $9 the events' store keys, $10 their
// fences, $11 their order keys (NULL elements: unordered); then $12 the
// distinct encoded requests, each once (events that share a request, as a
// route's destinations do, are sent it once). The INSERT takes its rows from the UPDATE's
// RETURNING crossed with the arrays, so every event is inserted exactly
// when the key's compare-and-set matched; each row's head flag is
// acceptSQL's (the statement's rows are of distinct routes, so they are of
// distinct groups). No event is accepted running. The statement yields one
// value: the events' ids as 8 big-endian bytes each, in the arrays' order,
// or NULL when the claim is no longer held. Rows are matched back to
// their place by route, which no two events share.
func (q *Queue) prepareAcceptAllSQL() {
	keys := q.s.ident
	q.acceptAllSQL = `WITH c AS (
		UPDATE ` + keys + ` SET value = $3::bytea, expires_at = statement_timestamp() + $4::bigint * interval '1 microsecond'
		WHERE key = $1::bytea AND value = $2::bytea AND expires_at > statement_timestamp()
		RETURNING 1
	), ins AS (
		INSERT INTO ` + q.events + ` (route, store_key, order_key, head, next_at, received_at, since, request,
			state, attempt, fence)
		SELECT u.route, u.store_key, u.order_key, u.order_key IS NULL OR NOT EXISTS (
			SELECT 1 FROM ` + q.events + ` g WHERE g.route = u.route AND g.order_key = u.order_key),
			now(), u.received_at, u.since, ($12::bytea[])[u.req], 0, 0, u.fence
		FROM c CROSS JOIN unnest($5::text[], $6::timestamptz[], $7::timestamptz[], $8::int[], $9::bytea[], $10::bigint[], $11::bytea[])
			WITH ORDINALITY AS u(route, received_at, since, req, store_key, fence, order_key, ord)
		ORDER BY u.ord
		RETURNING id, route
	)
	SELECT (SELECT string_agg(int8send(ins.id), ''::bytea ORDER BY r.ord)
		FROM ins JOIN unnest($5::text[]) WITH ORDINALITY AS r(route, ord) ON r.route = ins.route)`
}

// acceptAllIDs reads acceptAllSQL's value for n events: their ids, and
// false when the claim was no longer held.
func acceptAllIDs(value []byte, n int) ([]int64, bool, error) {
	switch len(value) {
	case 0:
		return nil, false, nil
	case 8 * n:
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = int64(binary.BigEndian.Uint64(value[8*i:]))
		}
		return ids, true, nil
	}
	return nil, false, fmt.Errorf("accept of %d events returned %d bytes for their ids, want %d", n, len(value), 8*n)
}
