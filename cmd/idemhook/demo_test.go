package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestDemo(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"demo"}, envOf(), &stdout, &stderr); err != nil {
		t.Fatalf("demo: %v\nstderr:\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"#  step",
		"upstream calls so far",
		"200 x20  19 of 20",
		"26 deliveries of 4 events were sent; the backend ran 5 times.",
		"21 duplicates were answered",
		"6 deliveries of 5 events were answered 202 at once",
		"1 of them a replay",
		"When it was back, each of the 5 events reached it exactly once.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	// The end comes last, once the files are gone, and its next step runs
	// from a checkout with nothing installed.
	queue, end := strings.Index(out, "Then /webhooks/payments"), strings.Index(out, "Done in ")
	if queue < 0 || end < queue || !strings.Contains(out[end:], "the temporary directory was removed.") {
		t.Errorf("demo output: want the queue's part, then \"Done in ...; the temporary directory was removed.\":\n%s", out)
	}
	if m := regexp.MustCompile(`SQLite store (\S+)\)`).FindStringSubmatch(out); m == nil {
		t.Errorf("demo output names no store file:\n%s", out)
	} else if _, err := os.Stat(filepath.Dir(m[1])); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the demo's directory %s: %v; want it removed", filepath.Dir(m[1]), err)
	}
	_, next, ok := strings.Cut(out, "Next: ")
	lines := strings.Split(strings.TrimSpace(next), "\n")
	if !ok || len(lines) != 2 {
		t.Fatalf("demo output: want a Next: line and its command last:\n%s", out)
	}
	for _, cmd := range strings.Split(lines[1], "&&") {
		f := strings.Fields(cmd)
		if len(f) < 4 || f[0] != "go" || f[1] != "run" || f[2] != "./cmd/idemhook" || !slices.Contains([]string{"check", "serve"}, f[3]) {
			t.Errorf("Next: runs %q; want go run ./cmd/idemhook check|serve ...", strings.TrimSpace(cmd))
		}
	}
	if _, err := os.Stat(filepath.Join("..", "..", "cmd", "idemhook", "main.go")); err != nil {
		t.Errorf("Next: runs ./cmd/idemhook from the checkout's root: %v", err)
	}
	// Rows: # | step | key | status | replayed | calls so far | answer.
	rows := regexp.MustCompile(`(?m)^(\d)\s+.*?(sha256:[0-9a-f]{12}…)\s+(\d{3}(?: x\d+)?)\s+(yes|no|\d+ of \d+)\s+(\d+)\s`).FindAllStringSubmatch(out, -1)
	want := [][3]string{
		{"200", "no", "1"}, {"200", "yes", "1"}, {"200 x20", "19 of 20", "2"}, {"200", "no", "3"},
		{"500", "no", "4"}, {"200", "no", "5"}, {"200", "yes", "5"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d table rows, want %d:\n%s", len(rows), len(want), out)
	}
	for i, r := range rows {
		if got := [3]string{r[3], r[4], r[5]}; got != want[i] {
			t.Errorf("row %d = %v, want %v", i+1, got, want[i])
		}
	}
	if rows[0][2] != rows[1][2] {
		t.Errorf("the re-serialized retry has key %s, the first %s: the body hash must ignore spacing", rows[1][2], rows[0][2])
	}
	// The temporary directory is gone.
	m := regexp.MustCompile(`SQLite store (\S+)/idemhook\.db`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no store path in the output")
	}
	if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Errorf("temporary directory %s still exists (%v)", m[1], err)
	}
	if stderr.Len() > 0 {
		t.Errorf("demo wrote to stderr:\n%s", stderr.String())
	}
}
