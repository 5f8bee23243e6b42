//go:build !linux

package guardian

import "syscall"

// On other platforms the helper itself reports itself unsupported (it exits
// before its hello), so Launch fails with ErrHelperUnsupported.
func helperSysProcAttr() *syscall.SysProcAttr { return nil }
