package config

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/parse.golden from the current Parse")

// goldenFiles are the configuration files of the repository: the examples,
// the deployment's and every yaml block of the docs.
func goldenFiles(t *testing.T) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, pattern := range []string{"../../examples/*.yaml", "../../deploy/*.yaml"} {
		names, _ := filepath.Glob(pattern)
		for _, name := range names {
			data, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			files[filepath.ToSlash(name)] = data
		}
	}
	block := regexp.MustCompile("(?s)```yaml\n(.*?)```")
	docs, _ := filepath.Glob("../../docs/*.md")
	for _, name := range docs {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range block.FindAllSubmatch(data, -1) {
			files[fmt.Sprintf("%s#%d", filepath.ToSlash(name), i)] = m[1]
		}
	}
	return files
}

// mutations are the variants of a file that the golden file records: the
// file itself, each line removed, and each value replaced by a few wrong ones.
func mutations(data []byte) [][]byte {
	out := [][]byte{data}
	lines := strings.Split(string(data), "\n")
	bad := []string{"x", "-1", "0", "[a]", "{a: b}", "''", "1h", "99999999999999999999", "${NOPE}"}
	for i, line := range lines {
		without := append(append([]string{}, lines[:i]...), lines[i+1:]...)
		out = append(out, []byte(strings.Join(without, "\n")))
		k := strings.Index(line, ": ")
		if k < 0 || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, b := range bad {
			changed := append([]string{}, lines...)
			changed[i] = line[:k+2] + b
			out = append(out, []byte(strings.Join(changed, "\n")))
		}
	}
	return out
}

var pointer = regexp.MustCompile("0x[0-9a-f]+")

// render is what Parse made of a file: its errors, or its warnings and its
// configuration.
func render(name string, data []byte) string {
	env := envOf("X", "1", "STRIPE_WEBHOOK_SECRET", "whsec_x", "ADYEN_HMAC_KEY", "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056", "META_APP_SECRET", "meta", "SHOPIFY_WEBHOOK_SECRET", "shpss_x", "GITHUB_WEBHOOK_SECRET", "gh", "REDIS_URL", "redis://127.0.0.1:6379/0",
		"AUDIT_URL", "postgres://postgres@127.0.0.1:5432/test", "IDEMHOOK_ADMIN_TOKEN", "t",
		"IDEMHOOK_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test", "STRIPE_SECRET", "whsec_x")
	cfg, err := Parse(name, data, env)
	var b strings.Builder
	if err != nil {
		var errs Errors
		if !errors.As(err, &errs) {
			return "plain error: " + err.Error() + "\n"
		}
		for _, e := range errs {
			fmt.Fprintf(&b, "error %s|%d|%s|%s\n", e.File, e.Line, e.Field, e.Msg)
		}
		return b.String()
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(&b, "warn %s|%d|%s|%s\n", w.File, w.Line, w.Field, w.Msg)
	}
	cfg.Warnings = nil
	if host, _ := os.Hostname(); host != "" && cfg.Audit.Instance == host {
		cfg.Audit.Instance = "<hostname>"
	}
	b.WriteString(pointer.ReplaceAllString(fmt.Sprintf("config %+v\n", *cfg), "0x<pointer>"))
	return b.String()
}

// TestParseGolden compares what Parse makes of every configuration of the
// repository, and of thousands of its mutations, with what the schema
// written out field by field made of them before it was declared once.
func TestParseGolden(t *testing.T) {
	files := goldenFiles(t)
	if len(files) == 0 {
		t.Fatal("no configuration files found")
	}
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(files)) {
		for i, m := range mutations(files[name]) {
			fmt.Fprintf(&b, "== %s %d\n%s", name, i, render("c.yaml", m))
		}
	}
	const golden = "testdata/parse.golden"
	if *updateGolden {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	got := b.String()
	if got == string(want) {
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(gl) && i < len(wl); i++ {
		if gl[i] != wl[i] {
			t.Fatalf("line %d of %s:\n got %s\nwant %s", i+1, golden, gl[i], wl[i])
		}
	}
	t.Fatalf("%s: %d lines, want %d", golden, len(gl), len(wl))
}
