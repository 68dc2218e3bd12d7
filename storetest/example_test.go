package storetest_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/storetest"
)

func ExampleDiff() {
	want := &idemhook.Record{
		State:     idemhook.StateCompleted,
		CreatedAt: time.UnixMilli(1_700_000_000_000),
		Status:    http.StatusOK,
		Header:    http.Header{"Set-Cookie": {"a=1", "b=2"}},
		Body:      []byte(`{"ok":true}`),
	}
	got := *want
	got.CreatedAt = want.CreatedAt.Add(999 * time.Microsecond) // same millisecond
	got.Header = http.Header{"Set-Cookie": {"a=1"}}
	got.Body = []byte(`{"ok":false}`)
	fmt.Println(storetest.Diff(&got, want))
	// Output:
	// Header["Set-Cookie"]: got ["a=1"], want ["a=1" "b=2"]
	// Body: got 12 bytes, want 11; first difference at offset 6: got "false}", want "true}"
}
