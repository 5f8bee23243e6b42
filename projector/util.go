package projector

import (
	"cmp"
	"slices"
)

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sortStrings(s []string) { slices.Sort(s) }
