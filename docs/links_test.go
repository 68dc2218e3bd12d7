// Package docs checks the links of the repository's Markdown files: that
// every relative link names a file or directory that exists, and that every
// fragment (#anchor), in the same file or another Markdown file, names a
// heading or an explicit anchor there. Its test runs [Check] on the
// repository, so "go test ./..." (and so .ci/run) fails on a broken link.
//
// Anchors follow GitHub's rules for headings: the heading's text as rendered
// (inline code, emphasis and link markup removed), lowercased, every
// character that is not a letter, a digit, a mark, '-', '_' or a space
// dropped, and each space turned into '-'; a heading whose anchor was already
// taken gets "-1", "-2", ... An <a id="..."> or <a name="..."> is an anchor too.
//
// Not checked: links with a scheme (https:, mailto:, ...), since CI has no
// network; links inside fenced code blocks and code spans, which GitHub does
// not render as links; fragments of files other than Markdown (a line of a
// source file, #L10).
package docs

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// Broken is a link that does not resolve.
type Broken struct {
	File   string // the Markdown file holding the link, slash-separated, relative to the root
	Line   int    // 1-based
	Link   string // the link's destination as written
	Reason string
}

func (b Broken) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", b.File, b.Line, b.Link, b.Reason)
}

// doc is what one Markdown file offers and asks for.
type doc struct {
	anchors map[string]bool
	links   []link
}

type link struct {
	line int
	dest string
}

// Report is what [Check] found.
type Report struct {
	Files  int      // Markdown files read
	Links  int      // links found, checked or not
	Broken []Broken // in file and line order
}

// Check reads every Markdown file (*.md) under root, skipping .git and
// node_modules (the npm packages that provider/testdata/node installs,
// whose documents are not the repository's), and reports the links that do
// not resolve.
func Check(root string) (Report, error) {
	docs := map[string]*doc{} // by slash-separated path relative to root
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == ".git" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil // a worktree's .git file
		}
		if d.IsDir() && d.Name() == "node_modules" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.EqualFold(filepath.Ext(p), ".md") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		docs[filepath.ToSlash(rel)] = parse(string(data))
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	r := Report{Files: len(docs)}
	for _, name := range slices.Sorted(mapKeys(docs)) {
		for _, l := range docs[name].links {
			r.Links++
			if reason := resolve(root, docs, name, l.dest); reason != "" {
				r.Broken = append(r.Broken, Broken{File: name, Line: l.line, Link: l.dest, Reason: reason})
			}
		}
	}
	return r, nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// resolve says why dest, a link of the file from, does not resolve, or ""
// when it does (or is not checked).
func resolve(root string, docs map[string]*doc, from, dest string) string {
	if dest == "" || scheme.MatchString(dest) || strings.HasPrefix(dest, "//") {
		return ""
	}
	target, fragment, _ := strings.Cut(dest, "#")
	target, _, _ = strings.Cut(target, "?")
	name := from
	if target != "" {
		unescaped, err := url.PathUnescape(target)
		if err != nil {
			return fmt.Sprintf("bad escape in the path: %v", err)
		}
		if strings.HasPrefix(unescaped, "/") { // GitHub: from the repository's root
			name = path.Clean(strings.TrimPrefix(unescaped, "/"))
		} else {
			name = path.Join(path.Dir(from), unescaped)
		}
		if name == ".." || strings.HasPrefix(name, "../") {
			return "points outside the repository"
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(name))); err != nil {
			return fmt.Sprintf("no file or directory %s", name)
		}
	}
	if fragment == "" {
		return ""
	}
	d, ok := docs[name]
	if !ok {
		return "" // a fragment of a file that is not Markdown: not checked
	}
	anchor, err := url.PathUnescape(fragment)
	if err != nil {
		return fmt.Sprintf("bad escape in the fragment: %v", err)
	}
	if d.anchors[anchor] {
		return ""
	}
	reason := fmt.Sprintf("no heading or anchor %q in %s", anchor, name)
	if near := nearest(d.anchors, anchor); len(near) > 0 {
		reason += fmt.Sprintf(" (did you mean %s?)", strings.Join(near, ", "))
	}
	return reason
}

// nearest returns the anchors that contain want or are contained in it, as
// "#anchor", sorted; at most three.
func nearest(anchors map[string]bool, want string) []string {
	var out []string
	for _, a := range slices.Sorted(mapKeys(anchors)) {
		if strings.Contains(a, want) || strings.Contains(want, a) && len(a) > 2 {
			out = append(out, "#"+a)
		}
	}
	if len(out) > 3 {
		out = out[:3]
	}
	return out
}

var (
	atxHeading   = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextLine   = regexp.MustCompile(`^ {0,3}(?:=+|-+)[ \t]*$`)
	fence        = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	explicitName = regexp.MustCompile(`(?i)<a\s[^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']`)
	htmlLink     = regexp.MustCompile(`(?i)<(?:a|img)\s[^>]*?\b(?:href|src)\s*=\s*["']([^"']+)["']`)
	notParagraph = regexp.MustCompile(`^\s*(?:[|>]|(?:[-*+]|\d+[.)])(?:\s|$))`) // a list item, a quote, a table row: never a setext heading's text
	refDef       = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:[ \t]*<?([^\s>]+)>?`)
)

// parse returns the anchors and links of a Markdown text.
func parse(text string) *doc {
	d := &doc{anchors: map[string]bool{}}
	// GitHub numbers a heading whose slug another heading took (explicit
	// anchors don't count): seen holds, for each slug taken, how many times
	// it was asked for again.
	seen := map[string]int{}
	addHeading := func(title string) {
		base := Slug(title)
		slug := base
		for {
			if _, taken := seen[slug]; !taken {
				break
			}
			seen[base]++
			slug = fmt.Sprintf("%s-%d", base, seen[base])
		}
		seen[slug] = 0
		d.anchors[slug] = true
	}
	var fenceMark string // the opening fence while inside a fenced block
	prev := ""           // the previous line, if it could be a setext heading's text
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSuffix(line, "\r")
		if fenceMark != "" {
			if m := fence.FindStringSubmatch(line); m != nil && m[1][0] == fenceMark[0] &&
				len(m[1]) >= len(fenceMark) && strings.TrimSpace(line[len(m[0]):]) == "" {
				fenceMark = ""
			}
			continue
		}
		if m := fence.FindStringSubmatch(line); m != nil {
			fenceMark = m[1]
			prev = ""
			continue
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			addHeading(m[2])
			prev = ""
		} else if setextLine.MatchString(line) && prev != "" {
			addHeading(prev)
			prev = ""
			continue
		}
		prose := stripCodeSpans(line)
		for _, m := range explicitName.FindAllStringSubmatch(prose, -1) {
			d.anchors[m[1]] = true
		}
		for _, dest := range destinations(prose) {
			d.links = append(d.links, link{line: i + 1, dest: dest})
		}
		if m := refDef.FindStringSubmatch(prose); m != nil {
			d.links = append(d.links, link{line: i + 1, dest: m[1]})
		}
		for _, m := range htmlLink.FindAllStringSubmatch(prose, -1) {
			d.links = append(d.links, link{line: i + 1, dest: m[1]})
		}
		if strings.TrimSpace(line) == "" || atxHeading.MatchString(line) || notParagraph.MatchString(line) {
			prev = ""
		} else {
			prev = strings.TrimSpace(line)
		}
	}
	return d
}

// stripCodeSpans blanks the code spans of a line (`...`, “...“), which
// hold no links.
func stripCodeSpans(line string) string {
	var b strings.Builder
	for {
		start := strings.IndexByte(line, '`')
		if start < 0 {
			b.WriteString(line)
			return b.String()
		}
		n := start
		for n < len(line) && line[n] == '`' {
			n++
		}
		ticks := line[start:n]
		end := strings.Index(line[n:], ticks)
		if end < 0 { // no closing run: the backticks are literal
			b.WriteString(line[:n])
			line = line[n:]
			continue
		}
		b.WriteString(line[:start])
		b.WriteString(strings.Repeat(" ", n-start+end+len(ticks)))
		line = line[n+end+len(ticks):]
	}
}

// destinations returns the destinations of the inline links and images of a
// line: [text](dest), [text](<dest> "title"), ![alt](dest).
func destinations(line string) []string {
	var out []string
	for {
		i := strings.Index(line, "](")
		if i < 0 {
			return out
		}
		rest := line[i+2:]
		var dest string
		if strings.HasPrefix(rest, "<") {
			end := strings.IndexByte(rest, '>')
			if end < 0 {
				return out
			}
			dest, rest = rest[1:end], rest[end+1:]
		} else {
			depth, end := 0, len(rest)
		scan:
			for j, r := range rest {
				switch {
				case r == '(':
					depth++
				case r == ')' && depth == 0, r == ' ' || r == '\t':
					end = j
					break scan
				case r == ')':
					depth--
				}
			}
			dest, rest = rest[:end], rest[end:]
		}
		out = append(out, dest)
		line = rest
	}
}

// Slug returns the anchor GitHub gives a heading whose Markdown text is
// title, before duplicates are numbered.
func Slug(title string) string {
	text := renderedText(title)
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.M, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

var (
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]*>`)
)

// renderedText is the text of a heading as GitHub renders it: links reduced
// to their text, HTML tags gone, code spans literal, and outside them the
// underscores of emphasis (a run of them at a word's edge) gone. Backticks,
// '*' and '~' are left: they are punctuation, which the slug drops.
func renderedText(title string) string {
	title = inlineLink.ReplaceAllString(title, "$1")
	title = htmlTag.ReplaceAllString(title, "")
	var b strings.Builder
	for i, part := range strings.Split(title, "`") {
		if i%2 == 1 { // inside a code span
			b.WriteString(part)
			continue
		}
		rs := []rune(part)
		for j := 0; j < len(rs); {
			if rs[j] != '_' {
				b.WriteRune(rs[j])
				j++
				continue
			}
			k := j
			for k < len(rs) && rs[k] == '_' {
				k++
			}
			if j > 0 && isWord(rs[j-1]) && k < len(rs) && isWord(rs[k]) {
				b.WriteString(string(rs[j:k])) // snake_case: not emphasis
			}
			j = k
		}
	}
	return strings.TrimSpace(b.String())
}

func isWord(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// The repository's own Markdown files: every relative link and every anchor
// must resolve. This is the check .ci/run gets from "go test ./...".
func TestRepositoryLinks(t *testing.T) {
	root := ".."
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the repository root is not one level up: %v", err)
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
