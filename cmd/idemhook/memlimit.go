package main

import (
	"bufio"
	"bytes"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// setMemoryLimit gives the Go runtime a memory limit of 90% of the
// container's when it has none (GOMEMLIMIT unset) and the container has
// one, so that the collector works harder before the kernel's OOM killer
// ends the process (and every delivery in flight). The gateway's body
// budget is a quarter of that limit by default (limits.body_memory).
func setMemoryLimit(logger *slog.Logger) {
	if debug.SetMemoryLimit(-1) != math.MaxInt64 {
		return // GOMEMLIMIT, read by the runtime at start, or set before
	}
	self, _ := os.ReadFile("/proc/self/cgroup")
	limit, file := cgroupMemoryLimit("/sys/fs/cgroup", self)
	if limit <= 0 {
		return
	}
	debug.SetMemoryLimit(limit / 10 * 9)
	logger.Info("idemhook memory limit set from the container's", "cgroup_limit", limit, "file", file, "gomemlimit", limit/10*9)
}

// cgroupMemoryLimit returns the memory limit of the cgroup that self (the
// text of /proc/self/cgroup) names, under the cgroup file systems mounted at
// root, and the file it read; 0 when none sets one. cgroup v2 keeps it in
// memory.max ("max": none), v1 in memory/memory.limit_in_bytes (a figure
// near MaxInt64: none). The process's own cgroup is read first, then the
// root of the mount (what a container with its own cgroup namespace sees).
func cgroupMemoryLimit(root string, self []byte) (int64, string) {
	var files []string
	sc := bufio.NewScanner(bytes.NewReader(self))
	for sc.Scan() { // hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			files = append(files, filepath.Join(root, parts[2], "memory.max"))
		case strings.Contains(","+parts[1]+",", ",memory,"):
			files = append(files, filepath.Join(root, "memory", parts[2], "memory.limit_in_bytes"))
		}
	}
	files = append(files, filepath.Join(root, "memory.max"), filepath.Join(root, "memory", "memory.limit_in_bytes"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 { // "max", or v1's page-rounded MaxInt64
			continue
		}
		return n, f
	}
	return 0, ""
}
