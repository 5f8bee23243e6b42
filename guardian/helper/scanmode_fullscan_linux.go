//go:build linux && guardianfullscan

package helper

// fullScanBaseline is true with the guardianfullscan build tag: the helper
// tracks descendants as it did before the children files, scanning all of
// /proc on every tick. BenchmarkIdleHelpers builds such a helper as its
// baseline; nothing ships with the tag.
const fullScanBaseline = true
