// Package spelling finds the word a user meant among the ones that
// exist: the nearest run name to a mistyped one, the nearest flag to a
// wrong key of a settings file.
package spelling

// Distance is the Levenshtein distance between a and b, in bytes: the
// fewest insertions, deletions and substitutions that turn one into the
// other.
func Distance(a, b string) int {
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
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Nearest returns the word among words closest to w and its distance;
// the first of equally close ones. It returns "" and -1 for no words.
func Nearest(w string, words []string) (string, int) {
	best, bestD := "", -1
	for _, c := range words {
		if d := Distance(w, c); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	return best, bestD
}
