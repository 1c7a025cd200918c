package jetstream

import "strings"

// subjectsOverlap reports whether some literal subject matches both
// patterns a and b, with NATS wildcards: "*" is one token, ">" one or more
// trailing tokens.
func subjectsOverlap(a, b string) bool {
	return tokensOverlap(strings.Split(a, "."), strings.Split(b, "."))
}

func tokensOverlap(a, b []string) bool {
	for i := 0; ; i++ {
		switch {
		case i == len(a) && i == len(b):
			return true
		case i == len(a) || i == len(b):
			return false
		case a[i] == ">" || b[i] == ">":
			return true
		case a[i] != "*" && b[i] != "*" && a[i] != b[i]:
			return false
		}
	}
}

// subjectMatches reports whether pattern (with wildcards) matches the
// literal subject.
func subjectMatches(pattern, subject string) bool {
	return subjectsOverlap(pattern, subject)
}
