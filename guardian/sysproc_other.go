//go:build !linux

package guardian

import "syscall"

// Without Linux's parent-death signal the helper learns of our death from
// EOF on its stdin and its periodic parent check (macOS). Where there is no
// helper at all (Windows), it reports itself unsupported before its hello,
// so Launch fails with ErrHelperUnsupported.
func helperSysProcAttr() *syscall.SysProcAttr { return nil }
