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
