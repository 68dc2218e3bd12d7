package idemhook_test

import (
	"os"
	"strings"
	"testing"
)

// The README's quick start must be the program examples/quickstart, which
// the build compiles and vets, so that it compiles as written.
func TestReadmeQuickStartIsTheCompiledExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("examples/quickstart/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(src)+"```\n") {
		t.Fatal("README.md's quick start differs from examples/quickstart/main.go: paste the file into the README's first go block")
	}
}
