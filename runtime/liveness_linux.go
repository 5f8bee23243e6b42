//go:build linux

package runtime

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strconv"
)

// sigkillBit is SIGKILL's bit in /proc/<pid>/status's pending-signal masks.
const sigkillBit = 1 << (9 - 1)

// dying reports whether the guardian's target is gone or on its way out:
// no longer in /proc, a zombie, or with a SIGKILL pending (killed from
// outside, not yet exited). The kernel marks a SIGKILL pending when kill(2)
// returns, while the process may still hold its stdin open for a while:
// a request written then would be lost with it, and the guardian reports
// the exit only after the reap. Checking before admission lets a call on a
// child killed while idle go to a fresh lease instead. A pid reused after
// the reap reads as alive, which only defers to the checks after a
// failure.
func (g guardianChild) dying() bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(g.s.TargetPID()) + "/status")
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	for line := range bytes.Lines(b) {
		k, v, _ := bytes.Cut(bytes.TrimSpace(line), []byte(":"))
		v = bytes.TrimSpace(v)
		switch string(k) {
		case "State":
			if len(v) > 0 && (v[0] == 'Z' || v[0] == 'X') {
				return true
			}
		case "SigPnd", "ShdPnd":
			if m, err := strconv.ParseUint(string(v), 16, 64); err == nil && m&sigkillBit != 0 {
				return true
			}
		}
	}
	return false
}
