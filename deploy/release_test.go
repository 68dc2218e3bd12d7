package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// goreleaserConfig is the part of .goreleaser.yaml these tests check.
type goreleaserConfig struct {
	Version int `yaml:"version"`
	Builds  []struct {
		ID      string   `yaml:"id"`
		Main    string   `yaml:"main"`
		Binary  string   `yaml:"binary"`
		Env     []string `yaml:"env"`
		Goos    []string `yaml:"goos"`
		Goarch  []string `yaml:"goarch"`
		Flags   []string `yaml:"flags"`
		Ldflags []string `yaml:"ldflags"`
	} `yaml:"builds"`
	Archives []struct {
		IDs   []string `yaml:"ids"`
		Files []string `yaml:"files"`
	} `yaml:"archives"`
	Checksum struct {
		NameTemplate string `yaml:"name_template"`
	} `yaml:"checksum"`
	DockersV2 []struct {
		IDs        []string `yaml:"ids"`
		Dockerfile string   `yaml:"dockerfile"`
		ExtraFiles []string `yaml:"extra_files"`
		Platforms  []string `yaml:"platforms"`
	} `yaml:"dockers_v2"`
}

func readGoreleaserConfig(t *testing.T) goreleaserConfig {
	t.Helper()
	data, err := os.ReadFile("../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c goreleaserConfig
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	if c.Version != 2 {
		t.Fatalf(".goreleaser.yaml: version %d, want 2", c.Version)
	}
	if len(c.Builds) != 1 {
		t.Fatalf(".goreleaser.yaml: %d builds, want 1", len(c.Builds))
	}
	return c
}

// The release's build is the Dockerfile's: static, trimmed, for every
// platform users run, and every file it names exists.
func TestGoreleaserConfig(t *testing.T) {
	c := readGoreleaserConfig(t)
	b := c.Builds[0]
	for _, tt := range []struct {
		what string
		got  []string
		want []string
	}{
		{"main", []string{b.Main}, []string{"./cmd/idemhook"}},
		{"binary", []string{b.Binary}, []string{"idemhook"}},
		{"env", b.Env, []string{"CGO_ENABLED=0"}},
		{"goos", b.Goos, []string{"linux", "darwin", "windows"}},
		{"goarch", b.Goarch, []string{"amd64", "arm64"}},
	} {
		if !slices.Equal(tt.got, tt.want) {
			t.Errorf("builds[0].%s = %q, want %q", tt.what, tt.got, tt.want)
		}
	}
	if !slices.Contains(b.Flags, "-trimpath") {
		t.Errorf("builds[0].flags = %q: no -trimpath", b.Flags)
	}
	if len(b.Ldflags) != 1 || !strings.Contains(b.Ldflags[0], "-X main.version=v{{ .Version }}") {
		t.Errorf("builds[0].ldflags = %q, want one entry setting -X main.version=v{{ .Version }}", b.Ldflags)
	}
	if c.Checksum.NameTemplate == "" {
		t.Error("checksum.name_template is empty")
	}
	var files []string
	for _, a := range c.Archives {
		if !slices.Equal(a.IDs, []string{b.ID}) {
			t.Errorf("archives ids = %q, want [%s]", a.IDs, b.ID)
		}
		files = append(files, a.Files...)
	}
	if len(c.DockersV2) != 1 {
		t.Fatalf("%d dockers_v2 images, want 1", len(c.DockersV2))
	}
	d := c.DockersV2[0]
	if !slices.Equal(d.IDs, []string{b.ID}) {
		t.Errorf("dockers_v2 ids = %q, want [%s]", d.IDs, b.ID)
	}
	if !slices.Equal(d.Platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("dockers_v2 platforms = %q, want linux/amd64 and linux/arm64", d.Platforms)
	}
	files = append(files, d.Dockerfile)
	files = append(files, d.ExtraFiles...)
	for _, f := range files {
		if _, err := os.Stat(filepath.Join("..", f)); err != nil {
			t.Errorf(".goreleaser.yaml names %s: %v", f, err)
		}
	}
}

// A release binary, built with the release's flags and ldflags, says its
// version as "go install ...@v1.2.3" would.
func TestGoreleaserBinaryVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway: not in -short")
	}
	b := readGoreleaserConfig(t).Builds[0]
	ldflags := strings.ReplaceAll(b.Ldflags[0], "{{ .Version }}", "1.2.3")
	if strings.Contains(ldflags, "{{") {
		t.Fatalf("ldflags %q: a template this test does not know", b.Ldflags[0])
	}
	bin := filepath.Join(t.TempDir(), "idemhook")
	args := append([]string{"build"}, b.Flags...)
	args = append(args, "-buildvcs=false", "-ldflags="+ldflags, "-o", bin, b.Main)
	build := exec.Command("go", args...)
	build.Dir = ".."
	build.Env = append(os.Environ(), b.Env...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("idemhook version: %v\n%s", err, out)
	}
	if want := "idemhook v1.2.3 rev "; !strings.HasPrefix(string(out), want) {
		t.Errorf("idemhook version = %q, want %q...", out, want)
	}
}

// The release image is deploy/Dockerfile's image: their final stages differ
// only in where the binary comes from.
func TestReleaseDockerfile(t *testing.T) {
	const binary = "COPY <the binary> /usr/local/bin/idemhook"
	finalStage := func(name string, binaryCopy string) []string {
		t.Helper()
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var stage []string
		for line := range strings.Lines(string(data)) {
			line = strings.TrimSpace(line)
			switch {
			case line == "" || strings.HasPrefix(line, "#") || line == "ARG TARGETPLATFORM":
			case strings.HasPrefix(line, "FROM "):
				stage = []string{line}
			case line == binaryCopy:
				stage = append(stage, binary)
			default:
				stage = append(stage, line)
			}
		}
		if !slices.Contains(stage, binary) {
			t.Fatalf("%s: the final stage has no %q", name, binaryCopy)
		}
		return stage
	}
	want := finalStage("Dockerfile", "COPY --from=build /out/idemhook /usr/local/bin/idemhook")
	got := finalStage("Dockerfile.release", "COPY ${TARGETPLATFORM}/idemhook /usr/local/bin/idemhook")
	if !slices.Equal(got, want) {
		t.Errorf("the final stage of Dockerfile.release differs from Dockerfile's:\n%s\nwant\n%s",
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
