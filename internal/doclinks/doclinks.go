// Package doclinks checks the links of the repository's Markdown files: that
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
package doclinks

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
