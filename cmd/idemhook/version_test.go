package main

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestVersionString(t *testing.T) {
	tail := " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	settings := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	tests := []struct {
		name string
		give *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "idemhook (devel) rev unknown (unknown)"},
		{"go run in a worktree: nothing recorded", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			"idemhook (devel) rev unknown (unknown)"},
		{"go install module@version", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}},
			"idemhook v1.2.0 rev unknown (unknown)"},
		{"go build in a clean checkout", &debug.BuildInfo{
			Main: debug.Module{Version: "v0.0.0-20261130055605-cf1276bb0701"},
			Settings: settings("vcs", "git", "vcs.revision", "cf1276bb0701c12716d9bf6f79e735255946969d",
				"vcs.time", "2026-11-30T05:56:05Z", "vcs.modified", "false"),
		}, "idemhook v0.0.0-20261130055605-cf1276bb0701 rev cf1276bb0701 (2026-11-30T05:56:05Z)"},
		{"go build with uncommitted changes", &debug.BuildInfo{
			Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs.revision", "cf1276bb0701c12716d9bf6f79e735255946969d",
				"vcs.time", "2026-11-30T05:56:05Z", "vcs.modified", "true"),
		}, "idemhook (devel) rev cf1276bb0701+dirty (2026-11-30T05:56:05Z)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := versionString(tt.give); got != tt.want+tail {
				t.Errorf("versionString() = %q, want %q", got, tt.want+tail)
			}
		})
	}
}
