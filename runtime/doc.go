// Package runtime is what a host calls to run MCP servers for its sessions:
// session-scoped, exact runtime leases (seed 002) over the verified-stdio
// guardian, on the official go-sdk client, with every decision appended to
// the ledger as an event.
//
// A lease is one child MCP server, keyed by (session, server) — or by
// SharedSessionKey for servers configured "shared": true — and pinned to
// the fingerprint of the server's config entry it was acquired under and to
// the tool listing it pinned once at acquisition. Acquisition is
// single-flight per key: concurrent first calls wait on one placeholder
// (a closed channel wakes them, so no wake-up is lost) and exactly one
// child is started. The manager's map lock is never held across process,
// pipe, disk or network I/O.
//
// Every call names the exact tool and the schema digest the host authorized;
// both are checked against the pinned listing before tools/call is sent,
// and a mismatch poisons the lease (it is terminated and the server never
// sees the call). Revocation marks a lease cancelled under its per-lease
// call gate: calls already past the gate may complete, no call passes after
// Revoke returns, and the last completing call kills the child.
//
// Idle leases are reaped opportunistically on acquire and call, scanning at
// most ReapScanMax entries per pass; there is no background goroutine. A
// session's leases end when the last owner of its SessionScope releases it;
// shared leases survive session end and are ended by ReapIdle or
// TerminateAll.
//
// Errors are typed (*LeaseError, matched with errors.Is against the Err*
// sentinels) and carry only static text, local identities and numbers —
// never text from an MCP server. See docs/runtime.md.
package runtime
