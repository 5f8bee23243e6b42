//go:build linux

package guardian

// BuiltBinaries gives the examples (package guardian_test) the helper and
// the echo target that TestMain built; a real host ships the helper beside
// its executable and leaves Spec.HelperPath empty.
func BuiltBinaries() (helper, target string) { return helperBin.Out, targetBin.Out }
