package main

import (
	"os"
	"strings"
	"testing"
)

// gatewayChildEnv, when set, makes the test binary run the gateway's main
// instead of the tests: startProc (proc_test.go) starts real gateway
// processes that way, without building a binary.
const gatewayChildEnv = "IDEMHOOK_TEST_RUN_GATEWAY"

func TestMain(m *testing.M) {
	if os.Getenv(gatewayChildEnv) != "" {
		os.Args = append([]string{os.Args[0]}, strings.Fields(os.Getenv(gatewayChildEnv))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}
