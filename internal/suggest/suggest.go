// Package suggest finds the name a user probably meant: for an unknown
// command, flag or RLS_ variable, the "did you mean" of the error or
// warning.
package suggest

import "strings"

// Nearest returns the candidate closest to word, if one is close enough
// to be a slip: one that word begins (at least two letters), else one
// within an edit distance of a third of word's length (at least 1, at
// most 2), counting a swap of neighbours as one edit. Ties go to the
// earlier candidate.
func Nearest(word string, candidates []string) (string, bool) {
	if len(word) >= 2 {
		var prefixed []string
		for _, c := range candidates {
			if strings.HasPrefix(c, word) {
				prefixed = append(prefixed, c)
			}
		}
		if len(prefixed) == 1 {
			return prefixed[0], true
		}
	}
	limit := min(max(len(word)/3, 1), 2)
	best, bestD := "", limit+1
	for _, c := range candidates {
		if d := editDistance(word, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best, best != ""
}

// editDistance is the optimal string alignment distance between a and b,
// by bytes: insertions, deletions, substitutions and swaps of neighbours
// each cost one.
func editDistance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j]; three rows suffice.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
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
