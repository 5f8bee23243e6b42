// Package runtime is what a host calls to run MCP servers for its sessions:
// session-scoped, exact runtime leases over the verified-stdio guardian (or,
// for a config entry with "cleanup": "direct", started by the host itself:
// no receipt, a verdict that is never confirmed; see direct.go and
// ServerConfig.Cleanup), on the official go-sdk client, with every decision appended as an event
// through an Appender (a *ledger.Ledger, or anything that appends durably;
// this package names no ledger type).
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
// most MaxLiveLeases entries per pass (ReapScanMax for the default cap),
// and by an optional background reaper (Options.ReapInterval; Close stops
// it). A session's leases end when the last owner of its SessionScope
// releases it; shared leases survive session end and are ended by a reap,
// RevokeShared or TerminateAll. Deny revokes and refuses a server to a
// session until Allow.
//
// Hosts name servers by their config name; events and keys carry the
// server id ServerID derives from it. A child that died while idle never
// fails the next call (it is replaced, and a call sent to it is retried
// once when its cleanup facts prove the request never reached it). Server
// stderr is kept per lease (Manager.Stderr, Options.StderrLog), never in
// events or errors.
//
// Cleanup never stops at a failed append: Release, ReapIdle, Revoke,
// TerminateAll and Close end their leases and return errors.Join of what
// failed to record (nil when everything was recorded). Failures of work no
// caller waited for (background reaps, a session end run by a call's own
// release) are returned by the next TerminateAll or Close.
//
// Every lease's child is an owned connection of its activation. Hosts may
// open one with their own activation id and as one-shot (never replaced
// once its child ended: ErrOneShotEnded), close it under one budget shared
// by the transport, workers and supervisor steps (CloseConnection), and
// read its retained version-1 report (ConnectionStatus); a repeated close
// returns the stored report without a second cleanup.
//
// Errors are *LeaseError values, shaped like *os.PathError (Op, identities,
// Err: one of the Err* sentinels, matched with errors.Is), and carry only
// static text, local identities and numbers — never text from an MCP
// server.
//
// The package examples (Example for a whole host: ledger, manager, session,
// listing, call, release, close; ExampleToolDigest, ExampleParseConfig,
// ExampleServerConfig_Fingerprint, ExampleLeaseError) are in
// example_test.go, ExampleLoadConfig (${VAR} expansion, VS Code's
// "servers") in example_config_test.go, ExampleLeaseCapability_GetPrompt
// (a prompt and a resource subscription through caller-owned request
// handles) in example_prompts_test.go; `go doc -http` shows them. See
// docs/runtime.md.
package runtime
