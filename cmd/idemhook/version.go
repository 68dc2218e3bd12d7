package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// versionString is what "idemhook version" prints: the module version, the
// VCS revision and commit time the binary was built from, and the Go version
// and platform, e.g.
//
//	idemhook v1.2.0 rev 3f2a9c1d0b7e (2026-11-30T10:00:00Z) go1.26.8 linux/amd64
//	idemhook (devel) rev 3f2a9c1d0b7e+dirty (2026-11-30T10:00:00Z) go1.26.8 linux/amd64
//
// Everything comes from the build info the Go toolchain embeds: "go install
// module@version" records the version, and a "go build" inside a git checkout
// records the revision (vcs.revision), its time (vcs.time) and whether the
// tree had uncommitted changes (vcs.modified, shown as +dirty). What the build
// did not record is printed as "unknown" rather than guessed. A version set
// at link time (main.version, as deploy/Dockerfile sets it) comes first. bi
// may be nil (a binary without build info).
func versionString(bi *debug.BuildInfo) string {
	v, rev, when, dirty := "(devel)", "unknown", "unknown", false
	if bi != nil {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if len(rev) > 12 && !strings.Contains(rev, " ") {
		rev = rev[:12]
	}
	if dirty {
		rev += "+dirty"
	}
	if version != "" {
		v = version
	}
	return fmt.Sprintf("idemhook %s rev %s (%s) %s %s/%s", v, rev, when, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
