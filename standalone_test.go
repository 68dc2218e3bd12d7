package idemhook_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// The repository stands alone: a user has a clone and nothing beside it.
// These two tests prove it, one by reading every file, one by running a
// fresh clone.

// outsideNames are names of files that exist only beside the repository
// where idemhook was first written (written split so that this file does
// not name them itself).
var outsideNames = []string{"../" + "shared", "shared" + "/reference", "DESIGN" + ".md", "STYLE" + ".md", "DESIGN" + " section", "DESIGN" + "'s"}

// inFreshClone is set in the environment of the tests TestFreshClone runs.
const inFreshClone = "IDEMHOOK_IN_FRESH_CLONE"

var (
	// goParentPath is a Go string literal starting with ../
	goParentPath = regexp.MustCompile(`"((?:\.\./)+[A-Za-z0-9_][^"\s]*)"`)
	// mdLink is the target of a Markdown link or image.
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// theSeed is how the description idemhook was first written from is
	// called beside the repository; a reader of the clone has no such
	// thing, so the docs name what they mean (the NestJS guard). A fuzz
	// test's seed corpus is another thing.
	theSeed = regexp.MustCompile(`(?i)\bthe ` + `seed\b( corpus)?`)
)

// TestNoReferenceOutsideRepository reads every file of the checkout: no
// test, doc or comment may name a file outside it, a Go string literal
// "../..." must stay inside the repository, and every relative Markdown
// link must name a file of the repository.
func TestNoReferenceOutsideRepository(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = fs.WalkDir(os.DirFS(root), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// node_modules: the npm packages provider/testdata/node installs
			// (git-ignored), not the repository's files.
			if name != "." && (strings.HasPrefix(d.Name(), ".") && d.Name() != ".ci" || d.Name() == "tmp" || d.Name() == "node_modules") {
				return fs.SkipDir
			}
			return nil
		}
		if !slices.Contains([]string{".go", ".md", ".yaml", ".yml", ".js", ".json", ".sh", ""}, path.Ext(name)) {
			return nil
		}
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || bytes.IndexByte(data, 0) >= 0 {
			return err // binary files (a built ./idemhook) are skipped
		}
		checked++
		text := string(data)
		for i, line := range strings.Split(text, "\n") {
			for _, bad := range outsideNames {
				if strings.Contains(line, bad) {
					t.Errorf("%s:%d names %q, a file outside the repository: %s", name, i+1, bad, strings.TrimSpace(line))
				}
			}
			for _, m := range theSeed.FindAllStringSubmatch(line, -1) {
				if m[1] == "" {
					t.Errorf("%s:%d says %q, which a reader of the repository has not got (say what it is, e.g. the NestJS guard): %s", name, i+1, m[0], strings.TrimSpace(line))
				}
			}
		}
		dir := path.Dir(name)
		if path.Ext(name) == ".go" {
			for _, m := range goParentPath.FindAllStringSubmatch(text, -1) {
				if p := path.Join(dir, m[1]); p == ".." || strings.HasPrefix(p, "../") {
					t.Errorf("%s: the path %q leaves the repository", name, m[1])
				}
			}
		}
		if path.Ext(name) == ".md" {
			for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
				target, _, _ := strings.Cut(m[1], "#")
				if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				p := path.Join(dir, target)
				if p == ".." || strings.HasPrefix(p, "../") {
					t.Errorf("%s: the link %q leaves the repository", name, m[1])
				} else if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					t.Errorf("%s: the link %q names no file of the repository", name, m[1])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d files: not the repository root?", checked)
	}
}

// TestFreshClone clones the committed repository alone into an empty
// directory and runs the README's plain test command there, "go test
// ./...", as a new user has it: no sibling folders and no test server
// configured (the tests needing one skip). An uncommitted or ignored file
// the tests need, or a path leaving the repository, fails it. It then builds
// the gateway in the clone and checks that "idemhook version" names the
// clone's commit (a git worktree records no revision, a clone does).
//
// The nested run is cheap next to the enclosing one: without servers and
// without the race detector, "go test -count=1 ./..." in a fresh clone took
// 17 s on the project's 2-core machine, and this whole test 21 s and 43 s in
// two runs, while .ci/run (race detector, real servers, this test included)
// took 69 s and 98 s. So it runs the whole suite rather than a few packages.
// Inside it, this test skips itself. Skipped when git is missing and with
// -short.
func TestFreshClone(t *testing.T) {
	if testing.Short() {
		t.Skip("clones and tests the repository: skipped with -short")
	}
	if os.Getenv(inFreshClone) != "" {
		t.Skip("already running inside the fresh clone")
	}
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	run := func(dir string, env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), dir, err, out)
		}
		return string(out)
	}
	base := os.Environ()
	head := strings.TrimSpace(run(root, base, gitBin, "rev-parse", "HEAD"))

	parent := t.TempDir()
	clone := filepath.Join(parent, "idemhook")
	run(parent, base, gitBin, "clone", "--quiet", "--no-checkout", root, clone)
	run(clone, base, gitBin, "checkout", "--quiet", "--detach", head)
	if entries, _ := os.ReadDir(parent); len(entries) != 1 {
		t.Fatalf("the clone has siblings: %v", entries)
	}

	// A new user's environment: no test servers, and a build that records
	// the VCS revision whatever GOFLAGS the machine sets.
	var env []string
	for _, kv := range base {
		if !strings.HasPrefix(kv, "IDEMHOOK_") && !strings.HasPrefix(kv, "GOFLAGS=") {
			env = append(env, kv)
		}
	}
	env = append(env, "GOFLAGS=-buildvcs=true", inFreshClone+"=1")

	out := run(clone, env, "go", "test", "-count=1", "./...")
	t.Logf("go test ./... in the clone:\n%s", out)

	bin := filepath.Join(parent, "idemhook-bin")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	run(clone, env, "go", "build", "-o", bin, "./cmd/idemhook")
	version := run(clone, env, bin, "version")
	when := strings.TrimSpace(run(clone, env, gitBin, "show", "-s", "--format=%cd", "--date=format-local:%Y-%m-%dT%H:%M:%SZ", head))
	if !strings.Contains(version, " rev "+head[:12]+" ("+when+")") {
		t.Errorf("idemhook version in the clone = %q, want the commit %s of %s", version, head[:12], when)
	}
}
