package bus

import (
	"strconv"
	"unsafe"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
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
// space's publication reusing one message, its header map and its scratch
// buffer for every event. Only its Watch goroutine calls it, and
// PublishMsg copies subject, header and data into the connection's buffer
// before it returns (TestCommittedConcurrentWithWatch).
type spaceWatch struct {
	sp  *space
	msg *pubMsg
}

// Committed implements ledger.Observer on the Watch goroutine.
func (w *spaceWatch) Committed(batch []ledger.Record) { w.sp.publish(batch, w.msg) }

// Lagged implements ledger.Lagger (see Bus.Lagged).
func (w *spaceWatch) Lagged(from, to ledger.Seq) { w.sp.Lagged(from, to) }

// pubMsg is a message with the two headers publish sets per event, and
// the scratch buffer that holds, for one event at a time, the bytes of
// its subject and header values.
type pubMsg struct {
	msg     *nats.Msg
	id, seq []string // the header values, msg.Header's own slices
	buf     []byte
}

// newPubMsg is a message with the two headers publish sets per event.
func newPubMsg() *pubMsg {
	m := &nats.Msg{Header: nats.Header{busclient.HeaderMsgID: {""}, busclient.HeaderSeq: {""}}}
	return &pubMsg{msg: m, id: m.Header[busclient.HeaderMsgID], seq: m.Header[busclient.HeaderSeq]}
}

// set makes the message r's: the subject prefix (sp.subject of
// events.SubjectPrefix) then r's kind and activation, as
// sp.subject(r.Env.Subject()) is, the ULID and the seq as headers, the
// stored bytes as data. Subject and header values are views of m.buf,
// built without allocating (TestPubMsgTwin, TestPubMsgAllocs): they are
// valid until the next set or clear, which is enough for PublishMsg,
// which copies them before it returns.
func (m *pubMsg) set(prefix string, r *ledger.Record) {
	act := r.Env.Activation
	if act == "" {
		act = events.NoActivation
	}
	b := events.AppendSubjectTokens(append(m.buf[:0], prefix...), r.Env.Kind, act)
	subj := len(b)
	var id [ulid.EncodedSize]byte
	_ = r.Env.ID.MarshalTextTo(id[:]) // never fails: the buffer is EncodedSize long
	b = append(b, id[:]...)
	b = strconv.AppendUint(b, uint64(r.Env.Seq), 10)
	m.buf = b
	m.msg.Subject = unsafe.String(&b[0], subj)
	m.id[0] = unsafe.String(&b[subj], ulid.EncodedSize)
	m.seq[0] = unsafe.String(&b[subj+ulid.EncodedSize], len(b)-subj-ulid.EncodedSize)
	m.msg.Data = r.Raw
}

// clear leaves no view of the scratch buffer in the message, and keeps no
// event alive between batches.
func (m *pubMsg) clear() {
	m.msg.Subject, m.id[0], m.seq[0], m.msg.Data = "", "", "", nil
}

// publish publishes each event of batch on its subject in the space
// through msg (from newPubMsg), which the caller owns for the call; a
// failure is logged, and subscribers recover through replay.
func (sp *space) publish(batch []ledger.Record, msg *pubMsg) {
	prefix := sp.subject(events.SubjectPrefix)
	for i := range batch {
		r := &batch[i]
		msg.set(prefix, r)
		if err := sp.b.nc.PublishMsg(msg.msg); err != nil {
			sp.b.opts.Logger.Warn("bus: publish failed", sp.logAttrs("seq", r.Env.Seq, "err", err)...)
		}
	}
	msg.clear()
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
