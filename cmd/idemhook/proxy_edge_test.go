package main

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"testing"
)

// TestForwardChunkedAndLarge sends deliveries whose length is not announced
// (chunked), one exactly at max_body and one a byte over it, with a
// repeated header: the upstream must get every body byte for byte and every
// header value in order, and the oversized one must not reach it.
func TestForwardChunkedAndLarge(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.srv.URL, "max_body: 64KiB")), startOpts{})
	const limit = 64 << 10
	big := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i*7)
		}
		return b
	}
	send := func(body []byte, chunked bool) *http.Response {
		t.Helper()
		var rd io.Reader = bytes.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // hides the length: sent chunked
		}
		req, err := http.NewRequest(http.MethodPost, g.url("/webhooks/test"), rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Add("X-Multi", "one")
		req.Header.Add("X-Multi", "two")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	tests := []struct {
		name       string
		body       []byte
		chunked    bool
		wantStatus int
		forwarded  bool
	}{
		{"chunked small", []byte(`{"id":"chunked"}`), true, http.StatusOK, true},
		{"chunked at the limit", big(limit, 1), true, http.StatusOK, true},
		{"announced at the limit", big(limit, 2), false, http.StatusOK, true},
		{"chunked one byte over", big(limit+1, 3), true, http.StatusRequestEntityTooLarge, false},
		{"announced one byte over", big(limit+1, 4), false, http.StatusRequestEntityTooLarge, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(up.received())
			resp := send(tt.body, tt.chunked)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			got := up.received()[before:]
			if !tt.forwarded {
				if len(got) != 0 {
					t.Fatalf("an oversized body reached the upstream")
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("upstream got %d requests, want 1", len(got))
			}
			if !bytes.Equal(got[0].Body, tt.body) {
				t.Errorf("body differs: got %d bytes, sent %d", len(got[0].Body), len(tt.body))
			}
			if v := got[0].Header.Values("X-Multi"); !slices.Equal(v, []string{"one", "two"}) {
				t.Errorf("X-Multi = %q, want [one two]", v)
			}
		})
	}
}
