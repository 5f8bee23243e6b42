// Package helper is the guardian helper process: the program behind
// cmd/leaseledger-guardian that becomes the MCP server's actual parent.
//
// It owns the target's lifetime and the evidence about it: it starts the
// target only when the host asks, relays its stdio as bounded frames, is the
// one and only reaper of its direct child, signals that child only through
// the pidfd Go's os.Process holds and only while it is unreaped, acts as
// child subreaper so orphaned descendants become visible, and ends every
// session with a Receipt of observed facts.
//
// Guarantees of the stdin relay (relay_linux_test.go):
//   - the target reads the host's stdin bytes in order, whether a frame was
//     written straight from the host reader (the fast path) or through the
//     bounded queue (TestRelayDirectAndQueuedKeepOrder);
//   - once a write into the target's stdin fails, even transiently, every
//     later byte is dropped and counted (TestRelayDropsASuffixOnceStdinBreaks);
//   - once a chunk is dropped because the host hung up on a full queue,
//     every later byte is dropped and counted (TestRelayHangupDropIsSticky);
//   - no chunk is queued after the writer's last drain: it is dropped and
//     counted instead (TestRelayNoChunkQueuedAfterLastDrain);
//
// so the dropped bytes are always a suffix of the stream.
//
// Files: helper_linux.go starts the session and the target; relay_linux.go
// relays stdio (host frames to the target's stdin, its stdout and stderr to
// host frames); serve_linux.go waits for a cleanup trigger and ranks
// simultaneous ones; cleanup_linux.go is the numbered cleanup sequence;
// descendants_linux.go tracks orphaned descendants, which children_linux.go
// lists from the helper's threads' children files. The frame protocol is
// package guardian/internal/wire; this package does not import the host
// side (package guardian).
package helper
