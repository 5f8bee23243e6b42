// Package control owns the runtime control, projection and proof APIs on
// the ledger's NATS bus: their subjects, request and reply types, their server
// handlers (bus services, see package bus) and a client.
//
// The control API (leaseledger.api.runtime.…) lists the live leases,
// revokes a lease (optionally denying it), ends a session, reaps idle
// leases now and reloads the server configuration; only the bus's control user may call it (bus.AccessControl:
// for anyone else its subjects are a permission violation at the server).
// The projection API (leaseledger.api.projection.…) answers from the live
// projection: the lease table, one activation's audit (the JSON of
// `leaseledger audit --json <activation>`, package projector/audit) and
// the audit summary (that of `leaseledger audit --all --json`); every bus
// user may call it (bus.AccessRead), anonymous clients too unless the bus
// denies them. The proof API (leaseledger.api.proof.…, bus.AccessRead,
// proof.go) hands out signed checkpoints (a Checkpointer also publishes
// them at an interval) and inclusion and consistency proofs.
//
// Every request and reply is JSON with a JSON Schema in package schemas
// (schemas/api/<name>.request.json and .reply.json, name being the
// subject after "leaseledger.api."); requests are parsed strictly. Every
// reply is bounded by MaxReplyBytes: lists are paged (the lease table) or
// cut with the number left out reported next to them, never silently.
// Refusals carry a code (busclient.HeaderErrorCode: busclient's codes and
// the Code constants here) and static text that never echoes the request.
package control

import (
	"strings"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
)

// Subjects of the control API (control user only).
const (
	// LiveLeasesSubject answers LiveLeasesRequest with a LeasesReply of
	// the leases not terminated.
	LiveLeasesSubject = "leaseledger.api.runtime.leases"
	// RevokeSubject answers RevokeRequest with RevokeReply.
	RevokeSubject = "leaseledger.api.runtime.revoke"
	// AllowSubject answers AllowRequest with Done.
	AllowSubject = "leaseledger.api.runtime.allow"
	// EndSessionSubject answers EndSessionRequest with Done.
	EndSessionSubject = "leaseledger.api.runtime.end_session"
	// ReapSubject answers ReapRequest with ReapReply.
	ReapSubject = "leaseledger.api.runtime.reap"
	// ReloadSubject answers ReloadRequest with ReloadReply.
	ReloadSubject = "leaseledger.api.runtime.reload"
)

// Subjects of the projection API (every bus user).
const (
	// LeasesSubject answers LeasesRequest with a LeasesReply.
	LeasesSubject = "leaseledger.api.projection.leases"
	// ActivationSubject answers ActivationRequest with an audit.Activation.
	ActivationSubject = "leaseledger.api.projection.activation"
	// AuditSubject answers AuditRequest with an audit.Summary.
	AuditSubject = "leaseledger.api.projection.audit"
)

// Subjects lists every subject of both APIs.
var Subjects = []string{LiveLeasesSubject, RevokeSubject, AllowSubject, EndSessionSubject, ReapSubject, ReloadSubject, LeasesSubject, ActivationSubject, AuditSubject,
	ProofCheckpointSubject, InclusionSubject, ConsistencySubject}

// Name is the subject after "leaseledger.api.", e.g. "runtime.revoke":
// the name of its schemas (schemas/api/<name>.request.json and
// <name>.reply.json).
func Name(subject string) string {
	return strings.TrimPrefix(subject, strings.TrimSuffix(busclient.APISubjects, ">"))
}

// Refusal codes of these APIs (busclient.HeaderErrorCode), besides
// busclient.CodeBadRequest (a malformed or invalid request),
// busclient.CodeRateLimited and bus.CodeBusy (every service slot of the
// caller's class was taken: retry later).
const (
	// CodeNotFound: no such activation (projection), open session, or
	// lease to revoke (runtime).
	CodeNotFound = "not-found"
	// CodeTooLarge: the answer cannot be given within the API's bounds
	// (an activation with more than MaxActivationEvents events, or whose
	// report alone exceeds MaxReplyBytes): use `leaseledger audit`.
	CodeTooLarge = "too-large"
	// CodeUnavailable: the projection failed or the runtime is closed.
	CodeUnavailable = "unavailable"
	// CodeConfigNotLoaded: a reload's configuration failed to load;
	// nothing changed, the previous configuration stays in force (the
	// cause is in serve's log, never in the refusal).
	CodeConfigNotLoaded = "config-not-loaded"
)

// Bounds of the APIs.
const (
	// MaxReplyBytes bounds one reply body (below the bus's own bound,
	// bus.MaxServiceReplyBytes).
	MaxReplyBytes = 512 << 10
	// DefaultLeasesPage and MaxLeasesPage: rows of one lease table page
	// (fewer when MaxReplyBytes is reached first; Next says where to go on).
	DefaultLeasesPage = 100
	MaxLeasesPage     = 1000
	// MaxCursorBytes bounds a page cursor (a lease key "<session>/<server>").
	MaxCursorBytes = 2*128 + 1
	// MaxActivationEvents bounds the events one activation request folds;
	// a longer activation is refused (CodeTooLarge).
	MaxActivationEvents = 1 << 20
	// MaxTimeline bounds ActivationRequest.Timeline.
	MaxTimeline = audit.DefaultTimeline
	// MaxUnconfirmed bounds AuditRequest.Limit.
	MaxUnconfirmed = 1000
	// SummaryMaxAge is how old a served audit summary may be: it is
	// computed under the projection's read lock, which holds appends'
	// acknowledgements up for a walk of every activation ever recorded
	// (about 400 ms at 200k activations), so one at a time and at most
	// once per SummaryMaxAge; a request arriving while one is computed is
	// refused with bus.CodeBusy.
	SummaryMaxAge = time.Second
	// MaxServerBytes bounds a server (config) name, as the runtime does
	// (runtime.MaxServerNameBytes).
	MaxServerBytes = 256
	// MaxReloadNames bounds each of ReloadReply's Added and Removed: the
	// gateway's bound on the servers of one configuration
	// (gateway.MaxServers; serve refuses to load a file naming more), so
	// serve's lists are never cut. Names beyond it are left out and
	// counted in AddedOmitted and RemovedOmitted.
	MaxReloadNames = 64
	// RuntimeTimeout bounds one control call on the server (a revoke
	// waits for the lease's child to end); ProjectionTimeout one
	// projection call.
	RuntimeTimeout    = 60 * time.Second
	ProjectionTimeout = 30 * time.Second
)

// The API's replies fit the bus's bound.
const _ = uint(bus.MaxServiceReplyBytes - MaxReplyBytes)

// LeasesRequest asks the projection for a page of the lease table, sorted
// by key ("<key session>/<server>").
type LeasesRequest struct {
	// After is the Next of the previous page ("" for the first).
	After string `json:"after,omitempty"`
	// Limit is the page size, 1 to MaxLeasesPage; 0 means DefaultLeasesPage.
	Limit int `json:"limit,omitempty"`
	// Session keeps only the leases of this key session (a session id,
	// or "_shared" for shared leases).
	Session string `json:"session,omitempty"`
	// Live keeps only leases not terminated.
	Live bool `json:"live,omitempty"`
}

// LiveLeasesRequest asks the control API for a page of the live leases
// (those not terminated), like LeasesRequest with Live.
type LiveLeasesRequest struct {
	// After is the Next of the previous page ("" for the first).
	After string `json:"after,omitempty"`
	// Limit is the page size, 1 to MaxLeasesPage; 0 means DefaultLeasesPage.
	Limit int `json:"limit,omitempty"`
	// Session keeps only the leases of this key session (a session id,
	// or "_shared" for shared leases).
	Session string `json:"session,omitempty"`
}

// LeasesReply is one page of the lease table.
type LeasesReply struct {
	// Seq is the projection's seq the page was read at.
	Seq uint64 `json:"seq"`
	// Total counts the leases matching the request's filters in the
	// whole table.
	Total int `json:"total"`
	// Leases are the rows after the cursor, in key order.
	Leases []projector.Lease `json:"leases"`
	// Next is the cursor of the next page; "" on the last page.
	Next string `json:"next,omitempty"`
}

// RevokeRequest revokes a lease: the session's own lease of Server, or
// with Shared the server's shared lease (exactly one of Session and
// Shared). With Deny the key stays denied afterwards (the runtime's
// Deny / DenyShared) until AllowRequest lifts it; a session's denial
// needs the session open and ends with it, and no denial survives a
// restart of serve (they are held in memory). Finding no lease to revoke
// (or, with Deny, neither a lease nor a configured server) is refused
// with CodeNotFound, as is denying a session that is not open.
type RevokeRequest struct {
	Session string `json:"session,omitempty"`
	Shared  bool   `json:"shared,omitempty"`
	// Server is the server's name in the configuration (mcp.json) or its
	// server id (as the lease table shows it).
	Server string `json:"server"`
	// Reason is recorded in lease.revoked: a code, [a-z0-9_]{1,64}.
	Reason string `json:"reason"`
	Deny   bool   `json:"deny,omitempty"`
}

// RevokeReply says what a revoke did.
type RevokeReply struct {
	// Done is always true.
	Done bool `json:"done"`
	// Revoked is how many leases were revoked: 1, or 0 for a denial of
	// a configured server that had no lease.
	Revoked int `json:"revoked"`
}

// AllowRequest lifts a denial (RevokeRequest.Deny): the session's, or
// with Shared the shared lease's (exactly one of Session and Shared), of
// Server (a config name or server id, as denied). Allowing what is not
// denied is not an error.
type AllowRequest struct {
	Session string `json:"session,omitempty"`
	Shared  bool   `json:"shared,omitempty"`
	Server  string `json:"server"`
}

// EndSessionRequest ends a session: its MCP session and its runtime scope
// (the runtime terminates its leases, sparing shared ones).
type EndSessionRequest struct {
	Session string `json:"session"`
}

// ReapRequest reaps now every lease idle (no call in flight) for at least
// IdleMaxNS nanoseconds; 0 means the runtime's configured idle bound.
type ReapRequest struct {
	IdleMaxNS int64 `json:"idle_max_ns,omitempty"`
}

// Done is the reply of a runtime operation that succeeded.
type Done struct {
	// Done is always true: a failed operation is a refusal, not a reply.
	Done bool `json:"done"`
}

// ReapReply says how many leases a reap ended. RecordFailed: some of
// their ending could not be recorded (the runtime's error; see its log).
type ReapReply struct {
	Reaped       int  `json:"reaped"`
	RecordFailed bool `json:"record_failed,omitempty"`
}

// ReloadRequest reads the server configuration (serve's --config) again
// and puts it in force, as SIGHUP does. It has no fields.
type ReloadRequest struct{}

// ReloadReply says what a reload put in force. A configuration that fails
// to load is not a reply but a refusal (CodeConfigNotLoaded): nothing
// changed.
type ReloadReply struct {
	// Servers is how many servers the configuration now in force names.
	Servers int `json:"servers"`
	// Added and Removed are the server names the reload added and
	// removed, sorted, at most MaxReloadNames each (never null); the
	// names left out are counted in AddedOmitted and RemovedOmitted.
	Added          []string `json:"added"`
	Removed        []string `json:"removed"`
	AddedOmitted   int      `json:"added_omitted,omitempty"`
	RemovedOmitted int      `json:"removed_omitted,omitempty"`
	// LeasesEnded is how many leases of the removed servers were ended
	// (lease.terminated, reason removed).
	LeasesEnded int `json:"leases_ended"`
	// RecordFailed: the configuration was put in force, but not all of
	// it was recorded (config.loaded or the leases' ending; see the
	// server's log).
	RecordFailed bool `json:"record_failed,omitempty"`
}

// ActivationRequest asks for one activation's audit.
type ActivationRequest struct {
	Activation string `json:"activation"`
	// Timeline is how many of its last events the timeline keeps, 0 to
	// MaxTimeline; 0 means audit.DefaultTimeline.
	Timeline int `json:"timeline,omitempty"`
}

// AuditRequest asks for the audit summary of every activation.
type AuditRequest struct {
	// Limit is how many unconfirmed activations are listed, 0 to
	// MaxUnconfirmed; 0 means audit.DefaultUnconfirmed.
	Limit int `json:"limit,omitempty"`
}
