// Package helper is the guardian helper process: the program behind
// cmd/leaseledger-guardian that becomes the MCP server's actual parent.
//
// It owns the target's lifetime and the evidence about it: it starts the
// target only when the host asks, relays its stdio as bounded frames, is the
// one and only reaper of its direct child, signals that child only through
// the pidfd Go's os.Process holds and only while it is unreaped, acts as
// child subreaper so orphaned descendants become visible, and ends every
// session with a Receipt of observed facts. The host side lives in package
// guardian; the frame protocol is defined there.
package helper
