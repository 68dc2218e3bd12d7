package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
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

// The README's gateway quick start works as pasted: the commands are read
// from README.md and run as written, with the variables its export line sets
// and no others, so "check" passes and "serve" starts on
// examples/idemhook.yaml. The one change: serve's copy of the file listens
// on ports the system picks, as 8080 and 9090 may be taken where tests run.
func TestReadmeGatewayQuickStart(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Quick start: the gateway\n")
	_, block, ok2 := strings.Cut(section, "```sh\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal(`README.md has no "## Quick start: the gateway" with a sh block`)
	}
	vars := map[string]string{}
	getenv := func(name string) string { return vars[name] }
	var ran []string
	for _, line := range strings.Split(block, "\n") {
		line, _, _ = strings.Cut(line, " #")
		line = strings.TrimSpace(line)
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "go": // builds this package's main, which runEnv runs below
			if got, want := strings.Join(fields, " "), "go build -o idemhook ./cmd/idemhook"; got != want {
				t.Fatalf("README builds with %q; the test knows %q", got, want)
			}
		case "export":
			for _, kv := range fields[1:] {
				name, value, ok := strings.Cut(kv, "=")
				if !ok {
					t.Fatalf("README exports %q: want NAME=value", kv)
				}
				vars[name] = value
			}
		case "./idemhook":
			args := fields[1:]
			ran = append(ran, args[0])
			switch args[0] {
			case "check":
				t.Chdir(root)
				var stdout, stderr strings.Builder
				if err := run(context.Background(), args, getenv, &stdout, &stderr); err != nil {
					t.Fatalf("README's %q, with the variables it exports (%v): %v\n%s", line, slices.Sorted(maps.Keys(vars)), err, stderr.String())
				}
				if stderr.Len() != 0 {
					t.Errorf("README's %q printed warnings:\n%s", line, stderr.String())
				}
			case "serve":
				if len(args) != 3 || args[1] != "--config" {
					t.Fatalf("README serves with %q; want serve --config FILE", line)
				}
				file := filepath.Join(root, args[2])
				text, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				free := string(text)
				for _, addr := range []string{"listen: 127.0.0.1:8080", "listen: 127.0.0.1:9090"} {
					if !strings.Contains(free, addr+" ") {
						t.Fatalf("%s has no %q: update this test", args[2], addr)
					}
					free = strings.Replace(free, addr+" ", "listen: 127.0.0.1:0 ", 1)
				}
				dir := t.TempDir()
				if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(args[2])), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, args[2]), []byte(free), 0o644); err != nil {
					t.Fatal(err)
				}
				t.Chdir(dir) // the store's idemhook.db is created there
				g := startGateway(t, args[2], startOpts{getenv: getenv})
				if r := do(t, "GET", g.adminURL("/healthz"), ""); r.Status != 200 {
					t.Errorf("README's serve: /healthz %d %s", r.Status, r.Body)
				}
			default:
				t.Fatalf("README runs %q: the test knows check and serve", line)
			}
		default:
			t.Fatalf("README's quick start has %q: the test doesn't know how to run it", line)
		}
	}
	if want := []string{"check", "serve"}; !slices.Equal(ran, want) {
		t.Fatalf("README ran %v; want %v", ran, want)
	}
}
