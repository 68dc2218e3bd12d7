package queue_test

import (
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/idemhook/idemhook/queue"
)

func TestRequestRoundTrip(t *testing.T) {
	for _, give := range []queue.Event{
		{Method: "POST", Target: "/hook?a=1", Header: http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "b"}}, Body: []byte(`{"id":1}`)},
		{Method: "PUT", Target: "/", Header: http.Header{}, Body: []byte{}},
	} {
		var got queue.Event
		if err := queue.DecodeRequest(queue.EncodeRequest(nil, &give), &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, give) {
			t.Errorf("round trip gave %+v, want %+v", got, give)
		}
	}
}

func TestDecodeRequestRejectsCorruptInput(t *testing.T) {
	good := queue.EncodeRequest(nil, &queue.Event{Method: "POST", Target: "/hook", Header: http.Header{"A": {"b"}}, Body: []byte("body")})
	for _, tc := range []struct {
		name string
		give []byte
	}{
		{"empty", nil},
		{"unknown version", append([]byte{9}, good[1:]...)},
		{"truncated", good[:len(good)-1]},
		{"trailing bytes", append(append([]byte{}, good...), 0)},
		{"length past the end", []byte{1, 200, 'P'}},
		{"count past the end", []byte{1, 1, 'P', 1, '/', 0x7f, 0}},
		{"overflowing length", []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ev queue.Event
			if err := queue.DecodeRequest(tc.give, &ev); !errors.Is(err, queue.ErrCorruptEvent) {
				t.Fatalf("err = %v, want ErrCorruptEvent", err)
			}
		})
	}
}

func TestSameRequest(t *testing.T) {
	base := func() *queue.Event {
		return &queue.Event{Method: "POST", Target: "/a?b=1", Header: http.Header{"X-A": {"1", "2"}}, Body: []byte("body")}
	}
	for _, tt := range []struct {
		name   string
		change func(*queue.Event)
		want   bool
	}{
		{"the same", func(*queue.Event) {}, true},
		{"a copy of the header", func(e *queue.Event) { e.Header = e.Header.Clone() }, true},
		{"method", func(e *queue.Event) { e.Method = "PUT" }, false},
		{"target", func(e *queue.Event) { e.Target = "/a?b=2" }, false},
		{"body", func(e *queue.Event) { e.Body = []byte("bodY") }, false},
		{"a header value", func(e *queue.Event) { e.Header = http.Header{"X-A": {"1", "3"}} }, false},
		{"a header more", func(e *queue.Event) { e.Header.Set("X-B", "1") }, false},
		{"fields other than the request", func(e *queue.Event) { e.Route, e.Key, e.OrderKey, e.Fence = "r", "k", "o", 9 }, true},
	} {
		a, b := base(), base()
		tt.change(b)
		if got := queue.SameRequest(a, b); got != tt.want {
			t.Errorf("%s: SameRequest = %v; want %v", tt.name, got, tt.want)
		}
	}
}
