package main

import (
	"strings"
	"testing"
)

// TestConfigSecondDocument: a "---" followed by more YAML starts a second
// document, which a single Unmarshal drops without a word; a setting
// written there (here listen) would be silently ignored and the gateway
// would start with another configuration than the file shows.
func TestConfigSecondDocument(t *testing.T) {
	text := minimal + "---\nlisten: 0.0.0.0:9999\n"
	_, err := parseConfig("f.yaml", []byte(text), envOf())
	if err == nil {
		t.Fatal("parseConfig accepted a file whose second YAML document is ignored")
	}
	if want := "f.yaml:6:"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name %s (the second document)", err, want)
	}
	// One document with --- before or after it stays valid.
	for _, text := range []string{"---\n" + minimal, minimal + "---\n", minimal + "---\n# end\n", minimal + "...\n"} {
		if _, err := parseConfig("f.yaml", []byte(text), envOf()); err != nil {
			t.Fatalf("one document %q: %v", text, err)
		}
	}
}
