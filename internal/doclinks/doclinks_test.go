package doclinks

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The repository's own Markdown files: every relative link and every anchor
// must resolve. This is the check .ci/run gets from "go test ./...".
func TestRepositoryLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the repository root is not two levels up: %v", err)
	}
	r, err := Check(root)
	if err != nil {
		t.Fatal(err)
	}
	// A check that finds nothing to check passes for the wrong reason.
	if r.Files < 5 || r.Links < 50 {
		t.Errorf("read %d Markdown files and %d links: the walk missed the docs", r.Files, r.Links)
	}
	for _, b := range r.Broken {
		t.Errorf("%s", b)
	}
}

func TestSlug(t *testing.T) {
	tests := []struct {
		give string
		want string
	}{
		{"Web console", "web-console"},
		{"Stores, issue 11 second part", "stores-issue-11-second-part"},
		{"memstore: 128 bytes per key", "memstore-128-bytes-per-key"},
		{"PostgreSQL: group commit (`pgstore.Config{Batch: true}`)", "postgresql-group-commit-pgstoreconfigbatch-true"},
		{"SQLite: the audit trail in a file of its own (measured, not kept)", "sqlite-the-audit-trail-in-a-file-of-its-own-measured-not-kept"},
		{"Quick start: the middleware", "quick-start-the-middleware"},
		{"What's new?", "whats-new"},
		{"C++ & Go", "c--go"},
		{"two  spaces", "two--spaces"},
		{"snake_case_name and kebab-case", "snake_case_name-and-kebab-case"},
		{"_emphasis_ and __strong__ and *star*", "emphasis-and-strong-and-star"},
		{"`__init__` in code", "__init__-in-code"},
		{"A [link](other.md#x) in it", "a-link-in-it"},
		{"An <em>HTML</em> tag", "an-html-tag"},
		{"Ça va — déjà vu", "ça-va--déjà-vu"},
		{"Emoji 🎉 party", "emoji--party"},
		{"1.0x and 2.5x", "10x-and-25x"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			if got := Slug(tt.give); got != tt.want {
				t.Errorf("Slug(%q) = %q, want %q", tt.give, got, tt.want)
			}
		})
	}
}

func TestParseAnchors(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []string
	}{
		{"atx levels and closing hashes", "# One\n## Two ##\n###### Six\n####### seven is no heading\n", []string{"one", "six", "two"}},
		{"duplicates numbered", "## Results\n## Results\n### Results\n", []string{"results", "results-1", "results-2"}},
		{"a heading named like a numbered one", "# Foo\n# Foo\n# Foo-1\n", []string{"foo", "foo-1", "foo-1-1"}},
		{"explicit anchors do not number headings", "<a id=\"intro\"></a>\n# Intro\n", []string{"intro"}},
		{"explicit id and name", "<a id=\"x-1\"></a> text <a name='legacy'>old</a>\n", []string{"legacy", "x-1"}},
		{"setext headings", "Title\n=====\n\nSub title\n---\n", []string{"sub-title", "title"}},
		{"a thematic break is no heading", "text\n\n---\n\n- item\n---\n", nil},
		{"headings in code blocks are not anchors", "```\n# not\n```\n~~~~\n# nor\n~~~\n~~~~\n# Yes\n", []string{"yes"}},
		{"a fence closes only with its own kind", "````md\n```\n# inside\n````\n# After\n", []string{"after"}},
		{"an indented hash is text", "    # code\n# Real\n", []string{"real"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := slices.Sorted(mapKeys(parse(tt.give).anchors))
			if !slices.Equal(got, tt.want) {
				t.Errorf("anchors = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseLinks(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []link
	}{
		{"inline links and images", "See [a](a.md), ![b](img/b.png \"title\") and [c](<c d.md>).\n",
			[]link{{1, "a.md"}, {1, "img/b.png"}, {1, "c d.md"}}},
		{"fragments and parentheses", "[x](#x) [y](y.md#z) [p](f(1).md)\n", []link{{1, "#x"}, {1, "y.md#z"}, {1, "f(1).md"}}},
		{"a link inside a link", "[![badge](b.svg)](docs/x.md)\n", []link{{1, "b.svg"}, {1, "docs/x.md"}}},
		{"reference definitions", "[ref]: docs/a.md#b\n  [other]: <c.md>\n", []link{{1, "docs/a.md#b"}, {2, "c.md"}}},
		{"html links", `<a href="a.md">a</a> <img src="i.png">` + "\n", []link{{1, "a.md"}, {1, "i.png"}}},
		{"code spans are skipped", "`[no](x.md)` and ``[nor](y.md)`` but [yes](z.md)\n", []link{{1, "z.md"}}},
		{"code blocks are skipped", "```go\n[no](x.md)\n```\n[yes](y.md)\n", []link{{4, "y.md"}}},
		{"an unclosed backtick is literal", "a ` then [yes](y.md)\n", []link{{1, "y.md"}}},
		{"line numbers", "\n\ntext [a](a.md)\n", []link{{3, "a.md"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parse(tt.give).links; !slices.Equal(got, tt.want) {
				t.Errorf("links = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"README.md": strings.Join([]string{
			"# Top",
			"[ok](docs/gateway.md#web-console) [ok](#top) [ok](docs/) [ok](main.go#L10) [ok](https://example.com/x.md#nope)",
			"[broken](docs/gateway.md#console)",
			"[missing](docs/nothing.md) [missing image](img.png)",
			"[outside](../elsewhere.md)",
			"[ok](/docs/gateway.md#caf%C3%A9) [ok](mailto:a@example.com) [ok](docs/gateway.md?plain=1#admin-api)",
			"[self](#nope)",
			"```",
			"[code](docs/nothing.md)",
			"```",
		}, "\n"),
		"docs/gateway.md": "# Gateway\n## Web console\n## Café\n## Admin API\n[up](../README.md#top) [anchor](#explicit)\n<a id=\"explicit\"></a>\n",
		"main.go":         "package main\n",
	}
	for name, text := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A .git directory is skipped, whatever it holds.
	if err := os.MkdirAll(filepath.Join(root, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, ".git", "x.md"), []byte("[x](nothing.md)"), 0o644); err != nil {
		t.Fatal(err)
	}
	// So is node_modules, anywhere: npm packages' own documents.
	if err := os.MkdirAll(filepath.Join(root, "tools", "node_modules", "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "tools", "node_modules", "pkg", "README.md"), []byte("[x](nothing.md)"), 0o644); err != nil {
		t.Fatal(err)
	}

	r, err := Check(root)
	if err != nil {
		t.Fatal(err)
	}
	if r.Files != 2 || r.Links != 15 {
		t.Errorf("Check() read %d files and %d links, want 2 and 15", r.Files, r.Links)
	}
	want := []string{
		`README.md:3: docs/gateway.md#console: no heading or anchor "console" in docs/gateway.md (did you mean #web-console?)`,
		`README.md:4: docs/nothing.md: no file or directory docs/nothing.md`,
		`README.md:4: img.png: no file or directory img.png`,
		`README.md:5: ../elsewhere.md: points outside the repository`,
		`README.md:7: #nope: no heading or anchor "nope" in README.md`,
	}
	var gotText []string
	for _, b := range r.Broken {
		gotText = append(gotText, b.String())
	}
	if !slices.Equal(gotText, want) {
		t.Errorf("Check() =\n%s\nwant\n%s", strings.Join(gotText, "\n"), strings.Join(want, "\n"))
	}
}
