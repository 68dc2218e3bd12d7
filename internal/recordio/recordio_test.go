package recordio_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/recordio"
)

func TestEncodeDecode(t *testing.T) {
	in := &idemhook.Record{State: idemhook.StateCompleted, Status: 201, Body: []byte("ok")}
	b, err := recordio.Encode("teststore", "complete", in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := recordio.Decode("teststore", "k", b)
	if err != nil || out.Status != 201 || string(out.Body) != "ok" {
		t.Fatalf("round trip: %+v %v", out, err)
	}
	if _, err := recordio.Encode("teststore", "claim", nil); err == nil || err.Error() != "teststore: claim: nil record" {
		t.Errorf("Encode(nil) = %v", err)
	}
	_, err = recordio.Decode("teststore", "k", []byte{0xff})
	if !errors.Is(err, idemhook.ErrCorruptRecord) || !strings.HasPrefix(err.Error(), `teststore: key "k": `) {
		t.Errorf("Decode(corrupt) = %v", err)
	}
}
