// Package helper is the guardian helper process: the program behind
// cmd/leaseledger-guardian that becomes the MCP server's actual parent.
//
// It owns the target's lifetime and the evidence about it: it starts the
// target only when the host asks, relays its stdio as bounded frames, is the
// one and only reaper of its direct child, signals that child only while it
// is unreaped (so never a process that reused its pid), tracks the target's
// descendants, and ends every session with a Receipt of observed facts.
//
// It runs on Linux and macOS. What differs between them is behind procOS
// and type descendants (proc.go): on Linux the helper holds the child by
// pidfd, is the child subreaper of its orphans and the target dies with it
// (PR_SET_PDEATHSIG); on macOS the child's exit is seen with kqueue and its
// descendants are the members of its own process group. The protocol, the
// relay, the trigger rank and the numbered cleanup sequence are shared, so
// the tests here on Linux cover them for both; docs/guardian.md lists what
// is untested on macOS. Elsewhere Main reports the helper unsupported.
//
// Guarantees of the stdin relay (relay_test.go):
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
// Files: helper.go starts the session and the target; relay.go relays
// stdio (host frames to the target's stdin, its stdout and stderr to host
// frames); serve.go waits for a cleanup trigger and ranks simultaneous
// ones; cleanup.go is the numbered cleanup sequence; proc.go declares what
// each system provides: proc_linux.go and proc_darwin.go. On Linux,
// descendants_linux.go tracks orphaned descendants, which children_linux.go
// lists from the helper's threads' children files; on macOS
// proc_darwin.go lists the target's process group. The frame protocol is
// package guardian/internal/wire; this package does not import the host
// side (package guardian).
package helper
