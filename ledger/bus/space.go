package bus

import (
	"strconv"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/busclient"
	"github.com/nats-io/nats.go"
)

// A space is one ledger a server carries in its host's subject space
// (busclient.HostSubject): the watch that publishes its commits there, the
// replay and head API answered from it, and the services of that space. A
// Bus (Start) carries one, writable; a Fleet (StartFleet) one per host,
// read-only, plus the bare space of its fleet-level services.
type space struct {
	b        *Bus
	host     string         // "" for the bare space
	l        *ledger.Ledger // nil: services only (a fleet's bare space)
	services []Service
	unwatch  func() // set once its publication starts
	// logHost: its log records name its host (a fleet's spaces; a Bus's
	// records stay as they were before fleets).
	logHost bool
}

// subject is subject in the space (busclient.HostSubject).
func (sp *space) subject(subject string) string { return busclient.HostSubject(sp.host, subject) }

// spaceHandlers adds the request subjects of sp — replay and head (and
// append, for a writer) when it has a ledger, and its services — for every
// route of the bus; on a clustered bus also the peer class's replay and
// head (busclient.PeerClass, limits.go), and nothing else of it.
func (b *Bus) spaceHandlers(sp *space, handlers map[string]nats.MsgHandler) {
	if sp.l != nil {
		for _, r := range b.routes() {
			handlers[busclient.UserSubject(sp.subject(busclient.ReplaySubject), r.user)] = func(m *nats.Msg) { b.serveReplay(m, r, sp) }
			handlers[busclient.UserSubject(sp.subject(busclient.HeadSubject), r.user)] = func(m *nats.Msg) { b.serveHead(m, r, sp) }
			if r.class == classWriter {
				handlers[busclient.UserSubject(sp.subject(busclient.AppendSubject), r.user)] = func(m *nats.Msg) { b.serveAppend(m, r) }
			}
		}
		if r, ok := b.peerRoute(); ok {
			handlers[busclient.UserSubject(sp.subject(busclient.ReplaySubject), busclient.PeerClass)] = func(m *nats.Msg) { b.serveReplay(m, r, sp) }
			handlers[busclient.UserSubject(sp.subject(busclient.HeadSubject), busclient.PeerClass)] = func(m *nats.Msg) { b.serveHead(m, r, sp) }
		}
	}
	b.serviceHandlers(sp, handlers)
}

// Committed implements ledger.Observer: it publishes each event on its
// subject in the space with a message of its own, so any goroutine may
// call it (Bus.Committed); a failure is logged, and subscribers recover
// through replay.
func (sp *space) Committed(batch []ledger.Record) { sp.publish(batch, newPubMsg()) }

// spaceWatch is the observer a space's Watch runs (Bus.watch): the
// space's publication reusing one message and its header map for every
// event. Only its Watch goroutine calls it, and PublishMsg copies
// subject, header and data into the connection's buffer before it
// returns (TestCommittedConcurrentWithWatch).
type spaceWatch struct {
	sp  *space
	msg *nats.Msg
}

// Committed implements ledger.Observer on the Watch goroutine.
func (w *spaceWatch) Committed(batch []ledger.Record) { w.sp.publish(batch, w.msg) }

// Lagged implements ledger.Lagger (see Bus.Lagged).
func (w *spaceWatch) Lagged(from, to ledger.Seq) { w.sp.Lagged(from, to) }

// newPubMsg is a message with the two headers publish sets per event.
func newPubMsg() *nats.Msg {
	return &nats.Msg{Header: nats.Header{busclient.HeaderMsgID: {""}, busclient.HeaderSeq: {""}}}
}

// publish publishes each event of batch on its subject in the space
// through msg (from newPubMsg), which the caller owns for the call; a
// failure is logged, and subscribers recover through replay.
func (sp *space) publish(batch []ledger.Record, msg *nats.Msg) {
	id, seq := msg.Header[busclient.HeaderMsgID], msg.Header[busclient.HeaderSeq]
	for i := range batch {
		r := &batch[i]
		msg.Subject, msg.Data = sp.subject(r.Env.Subject()), r.Raw
		id[0], seq[0] = r.Env.ID.String(), strconv.FormatUint(uint64(r.Env.Seq), 10)
		if err := sp.b.nc.PublishMsg(msg); err != nil {
			sp.b.opts.Logger.Warn("bus: publish failed", sp.logAttrs("seq", r.Env.Seq, "err", err)...)
		}
	}
	msg.Data = nil // keep no event alive between batches
}

// Lagged implements ledger.Lagger (see Bus.Lagged).
func (sp *space) Lagged(from, to ledger.Seq) {
	sp.b.opts.Logger.Warn("bus: publication fell behind; events left to replay", sp.logAttrs("from", from, "to", to)...)
}

// publishCheckpoint publishes signed on the space's CheckpointSubject.
func (sp *space) publishCheckpoint(signed []byte) error {
	if err := sp.b.nc.Publish(sp.subject(busclient.CheckpointSubject), signed); err != nil {
		return &Error{Op: "publish checkpoint", Subject: sp.subject(busclient.CheckpointSubject), Err: err}
	}
	return nil
}

// logAttrs are a log record's attributes, with the space's host first
// on a fleet.
func (sp *space) logAttrs(attrs ...any) []any {
	if !sp.logHost || sp.host == "" {
		return attrs
	}
	return append([]any{"host", sp.host}, attrs...)
}
