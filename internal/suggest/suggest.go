// Package suggest finds the name a misspelt one was meant to be, for the
// "did you mean" of configuration errors.
package suggest

import (
	"fmt"
	"strings"
)

// Nearest returns the name of known nearest to name, a misspelt one, and
// whether it is near enough to be the one meant: a few edits (an
// insertion, a deletion, a substitution or two neighbours swapped), fewer
// for short names. Case does not count.
func Nearest(name string, known []string) (string, bool) {
	best, bestDist := "", 0
	for _, k := range known {
		d := Distance(strings.ToLower(name), strings.ToLower(k))
		if best == "" || d < bestDist {
			best, bestDist = k, d
		}
	}
	if best == "" || bestDist > max(1, min(3, len(best)/3)) {
		return "", false
	}
	return best, true
}

// DidYouMean returns `: did you mean "x"?` for the name of known nearest
// to name (see [Nearest]), or "" when none is near enough.
func DidYouMean(name string, known []string) string {
	if best, ok := Nearest(name, known); ok {
		return fmt.Sprintf(": did you mean %q?", best)
	}
	return ""
}

// Distance is the optimal string alignment distance between a and b: the
// fewest insertions, deletions, substitutions and swaps of two neighbouring
// bytes that turn a into b.
func Distance(a, b string) int {
	// prev2, prev and cur are rows i-2, i-1 and i of the usual table.
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
