// Package busclient is the client side of the ledger's NATS bus and the one
// owner of its protocol: the API subjects, the headers, the request and
// reply bodies, the user options and the append limit. Client reads a
// running bus (head, replay, tail) and sends raw JSON Lines appends;
// Appender is the ledger's Append, remotely.
//
// It links neither the log (package ledger, Pebble) nor the NATS server: a
// host that embeds the runtime and appends to a running `serve` needs only
// this package, package events and the NATS client. The server side is
// package bus, which speaks this protocol.
//
// Every subject of the protocol exists in the bare space of a single host
// and in the host-qualified space of each host of a fleet (host.go:
// HostSubject, Client.WithHost); the bare space is the one without a host
// id, byte for byte.
package busclient

import (
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/nats-io/nats.go"
)

// Subjects of the request/reply API.
const (
	// ReplaySubject answers replay requests (see ReplayRequest).
	ReplaySubject = "leaseledger.api.replay"
	// HeadSubject answers with the durable head (see HeadReply).
	HeadSubject = "leaseledger.api.head"
	// AppendSubject accepts JSON Lines of events in the input form (see
	// events.Input) and appends them in one Append call; the reply holds
	// "<seq> <ulid>" per event once they are durable. Writers only.
	AppendSubject = "leaseledger.api.append"
	// APISubjects matches every request subject.
	APISubjects = "leaseledger.api.>"
	// CheckpointSubject carries the signed checkpoints serve publishes
	// (a C2SP signed note, package ledger/verify) when it has a checkpoint
	// key: every bus user may subscribe, only the bus publishes.
	CheckpointSubject = "leaseledger.checkpoints"
)

// UserSubject is the request subject of API subject for a bus user: the
// subject itself for anonymous clients (user ""), subject + "." + user for
// a named user. The bus lets each named user publish only to its own
// subjects (and anonymous clients only to the bare ones), so the subject a
// request arrives on — never its reply subject, which NATS does not check —
// tells the bus who sent it and so its limits. A request whose reply inbox
// is not that of the subject's user is refused (CodeBadRequest). Client
// uses the subject of the user it was connected as (see NewClient).
func UserSubject(subject, user string) string {
	if user == "" {
		return subject
	}
	return subject + "." + user
}

// EventSubjects returns the subject that matches every event subject:
// events.Subject with every token a wildcard (event subjects always have
// three tokens after events.SubjectPrefix).
func EventSubjects() string { return events.Subject("", events.Wildcard) }

// Headers of published events and of API replies.
const (
	// HeaderMsgID, on an event, carries its ULID (NATS de-duplication header).
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderSeq, on an event, carries its seq in decimal.
	HeaderSeq = "Ledger-Seq"
	// HeaderNext, on a replay chunk, is the From of the next request.
	HeaderNext = "Ledger-Next"
	// HeaderEnd, on a replay chunk, is "true" on the last chunk.
	HeaderEnd = "Ledger-End"
	// HeaderHead, on a replay chunk, is the durable head when it was read.
	HeaderHead = "Ledger-Head"
	// HeaderError, on a reply, carries a request error (static text).
	HeaderError = "Ledger-Error"
	// HeaderInDoubt, on an append reply that carries HeaderError, is "true"
	// when the ledger cannot say whether the events were written (its
	// storage failed: ledger.ErrFailed, or the append was not acknowledged:
	// ledger.ErrUnacknowledged). Clients report such a reply as ErrInDoubt,
	// never as a refusal.
	HeaderInDoubt = "Ledger-In-Doubt"
	// HeaderIdempotencyKey, on an append request, names the request (see
	// MaxIdempotencyKeyLen for its form): the bus records it with the
	// events, in the same batch, and answers a request carrying a
	// remembered key with the seqs it first assigned, writing nothing.
	HeaderIdempotencyKey = "Ledger-Idempotency-Key"
	// HeaderFirstSent, on a retried append request, is when its first
	// attempt was sent (Unix milliseconds): a retry whose key may have left
	// the bus's remembered window is refused (CodeIdempotencyExpired)
	// instead of being written again.
	HeaderFirstSent = "Ledger-First-Sent"
	// HeaderReplayed, on an append reply, is "true" when the request's key
	// was remembered: the acknowledged events were written by an earlier
	// attempt.
	HeaderReplayed = "Ledger-Idempotent-Replay"
	// HeaderErrorCode, on a reply carrying HeaderError, classifies the
	// refusal for clients (one of the Code constants).
	HeaderErrorCode = "Ledger-Error-Code"
)

// Values of HeaderErrorCode.
const (
	// CodeBadRequest: the request is malformed (its text says how);
	// nothing was done.
	CodeBadRequest = "bad-request"
	// CodeRateLimited: the connection (or its class of users) sent
	// requests faster than the bus's rate limit; nothing was done, retry
	// later.
	CodeRateLimited = "rate-limited"
	// CodeIdempotencyConflict: the key is remembered for different events;
	// nothing was written.
	CodeIdempotencyConflict = "idempotency-conflict"
	// CodeIdempotencyExpired: a retry whose key may have left the
	// remembered window; nothing was written by it, whether its first
	// attempt was is unknown.
	CodeIdempotencyExpired = "idempotency-expired"
)

// MaxIdempotencyKeyLen bounds an idempotency key: 1 to MaxIdempotencyKeyLen
// bytes of [A-Za-z0-9._:-] (the ledger's rule, ledger.ValidIdempotencyKey;
// package bus checks at compile time that the bounds agree).
const MaxIdempotencyKeyLen = 128

// ReplayRequest is the JSON body of a request on ReplaySubject. From and To
// are inclusive (To 0: the head at the time of the request). Kind and
// Activation filter. The reply holds at most one chunk of stored events,
// one per line; ask again from HeaderNext until HeaderEnd is "true".
type ReplayRequest struct {
	From       events.Seq  `json:"from"`
	To         events.Seq  `json:"to,omitempty"`
	Kind       events.Kind `json:"kind,omitempty"`
	Activation string      `json:"activation,omitempty"`
	MaxEvents  int         `json:"max_events,omitempty"`
}

// HeadReply is the JSON body of a reply on HeadSubject.
type HeadReply struct {
	Seq  events.Seq `json:"seq"`
	Hash string     `json:"hash"` // hex, as events.Hash prints it
}

// MaxAppendEvents bounds the events of one append request: the ledger's
// own limit on one Append call (ledger.MaxAppendEvents, which package
// bus checks is the same), so that a request is one atomic append.
const MaxAppendEvents = 8192

// DefaultRequestTimeout bounds one bus request (one attempt of an append)
// when the caller's context has no earlier deadline, so a vanished
// responder cannot hang a client.
const DefaultRequestTimeout = 10 * time.Second

// Defaults of RetryPolicy: how long and how often an append in doubt is
// sent again under its idempotency key.
const (
	// DefaultAppendDeadline bounds all attempts of one append together.
	// It must stay well within the time the bus remembers keys (see
	// ledger.DefaultIdempotencyWindow and docs/operations.md).
	DefaultAppendDeadline = 2 * time.Minute
	// DefaultAppendAttempts bounds the attempts of one append.
	DefaultAppendAttempts = 30
	// DefaultAppendBackoff is the pause before the second attempt; it
	// doubles with each attempt up to DefaultMaxAppendBackoff.
	DefaultAppendBackoff = 100 * time.Millisecond
	// DefaultMaxAppendBackoff bounds the pause between attempts.
	DefaultMaxAppendBackoff = 3 * time.Second
)

// InboxPrefix is the reply-inbox prefix a named bus user must use
// (nats.CustomInboxPrefix(InboxPrefix(user))); "" gives the default _INBOX
// used by anonymous clients. Each named user may subscribe only to its own
// prefix, so no user can read another's replies.
func InboxPrefix(user string) string {
	if user == "" {
		return "_INBOX"
	}
	return "_INBOX_" + user
}

// ConnectOptions returns the options every leaseledger client connection
// is made with, followed by opts: the one place they are set (clients of
// cmd/leaseledger, the collector's in-process peer connection, the bus's
// own in-process connections, bustest). A connection stays with the
// servers it was given: it ignores the servers a cluster advertises to
// clients (nats.IgnoreDiscoveredServers), so when its server goes away it
// reconnects only to the URLs it was given (several may be given, comma
// separated). A host's subjects are served only by that host: a client
// that followed the cluster to another server would be refused there
// ("Permissions Violation") and stay there after its host came back
// (TestClientStaysWithItsServer).
func ConnectOptions(opts ...nats.Option) []nats.Option {
	return append([]nats.Option{nats.IgnoreDiscoveredServers()}, opts...)
}

// Connect connects to url (one or more comma-separated server URLs) with
// ConnectOptions(opts...).
func Connect(url string, opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(url, ConnectOptions(opts...)...)
}

// UserOptions returns the NATS options a named bus user connects with: its
// credentials and its own reply-inbox prefix (the bus lets each named user
// subscribe only to InboxPrefix(user)). An empty user means anonymous.
func UserOptions(user, password string) []nats.Option {
	if user == "" {
		return nil
	}
	return []nats.Option{nats.UserInfo(user, password), nats.CustomInboxPrefix(InboxPrefix(user))}
}
