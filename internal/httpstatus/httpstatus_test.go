package httpstatus_test

import (
	"testing"

	"github.com/idemhook/idemhook/internal/httpstatus"
)

func TestIsSuccess(t *testing.T) {
	for status, want := range map[int]bool{0: false, 100: false, 199: false, 200: true, 204: true, 299: true, 300: false, 404: false, 500: false} {
		if got := httpstatus.IsSuccess(status); got != want {
			t.Errorf("IsSuccess(%d) = %v; want %v", status, got, want)
		}
	}
}
