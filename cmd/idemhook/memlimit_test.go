package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCgroupMemoryLimit(t *testing.T) {
	write := func(t *testing.T, root, name, text string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name     string
		files    map[string]string
		self     string
		want     int64
		wantFile string
	}{
		{"v2 own cgroup", map[string]string{"memory.max": "max\n", "svc/gw/memory.max": "536870912\n"},
			"0::/svc/gw\n", 512 << 20, "svc/gw/memory.max"},
		{"v2 namespaced: the root", map[string]string{"memory.max": "268435456\n"}, "0::/\n", 256 << 20, "memory.max"},
		{"v2 no limit", map[string]string{"memory.max": "max\n"}, "0::/\n", 0, ""},
		{"v1 own cgroup", map[string]string{
			"memory/memory.limit_in_bytes":            "9223372036854771712\n",
			"memory/docker/abc/memory.limit_in_bytes": "1073741824\n",
		}, "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n", 1 << 30, "memory/docker/abc/memory.limit_in_bytes"},
		{"v1 no limit", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"},
			"4:memory:/\n", 0, ""},
		{"nothing mounted", nil, "0::/\n", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for name, text := range tt.files {
				write(t, root, name, text)
			}
			got, file := cgroupMemoryLimit(root, []byte(tt.self))
			wantFile := ""
			if tt.wantFile != "" {
				wantFile = filepath.Join(root, tt.wantFile)
			}
			if got != tt.want || file != wantFile {
				t.Fatalf("got %d from %q, want %d from %q", got, file, tt.want, wantFile)
			}
		})
	}
}
