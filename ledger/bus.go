package ledger

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Subjects and headers of the bus.
const (
	// ReplaySubject answers replay requests (see ReplayRequest).
	ReplaySubject = "leaseledger.api.replay"
	// HeadSubject answers with the durable head as JSON {"seq":N,"hash":"…"}.
	HeadSubject = "leaseledger.api.head"
	// AppendSubject accepts JSON Lines of events in the input form (see
	// events.Input) and appends them in one Append call; the reply holds
	// "<seq> <ulid>" per event once they are durable. Writers only.
	AppendSubject = "leaseledger.api.append"
	// APISubjects matches every request subject.
	APISubjects = "leaseledger.api.>"
	// EventSubjects matches every event subject.
	EventSubjects = events.SubjectPrefix + ">"

	// HeaderMsgID carries the event ULID (NATS de-duplication header).
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderSeq carries the event seq in decimal.
	HeaderSeq = "Ledger-Seq"
	// HeaderNext, on a replay chunk, is the From of the next request.
	HeaderNext = "Ledger-Next"
	// HeaderEnd, on a replay chunk, is "true" on the last chunk.
	HeaderEnd = "Ledger-End"
	// HeaderHead, on a replay chunk, is the durable head when it was read.
	HeaderHead = "Ledger-Head"
	// HeaderError, on a reply, carries a request error (static text).
	HeaderError = "Ledger-Error"
)

// Replay chunk bounds. A chunk holds at least one event, so MaxEventBytes
// must fit: NATS' default max payload is 1 MiB.
const (
	// DefaultReplayChunkEvents bounds events per replay reply.
	DefaultReplayChunkEvents = 1024
	// DefaultReplayChunkBytes bounds the body of one replay reply.
	DefaultReplayChunkBytes = 512 << 10
	// DefaultBusPort is the client port `serve` listens on by default.
	DefaultBusPort = 4248
	// RandomPort asks the bus to pick a free port (tests).
	RandomPort = -1
)

// BusOptions configures StartBus.
type BusOptions struct {
	// Host to listen on; 127.0.0.1 when empty. Loopback by default: the bus
	// is for the local host and its dashboards.
	Host string
	// Port to listen on; DefaultBusPort when zero, RandomPort for any free port.
	Port int
	// WebSocketPort, when non-zero, also serves NATS over WebSocket (for
	// browser dashboards) on Host; RandomPort for any free port.
	WebSocketPort int
	// ReadOnlyUser and ReadOnlyPassword, when set, add a named user that may
	// subscribe to events and call the replay/head API but publish nothing
	// else.
	ReadOnlyUser, ReadOnlyPassword string
	// WriterUser and WriterPassword, when set, add a named user that may
	// also append through AppendSubject. Nobody else may append over NATS.
	WriterUser, WriterPassword string
	// MaxConcurrentAppends bounds append requests served at once;
	// DefaultMaxConcurrentAppends when zero. More wait (NATS buffers them).
	MaxConcurrentAppends int
	// DenyAnonymous refuses unauthenticated clients. By default they are
	// admitted with the same read-only permissions: only the ledger itself
	// ever publishes on event subjects.
	DenyAnonymous bool
	// ReplayChunkEvents and ReplayChunkBytes bound one replay reply.
	ReplayChunkEvents, ReplayChunkBytes int
	// Logger receives publication failures; slog.Default when nil.
	Logger *slog.Logger
}

// Bus is the embedded NATS server of a ledger: it publishes every committed
// event after its fsync and serves the replay and head APIs.
type Bus struct {
	srv     *server.Server
	nc      *nats.Conn
	l       *Ledger
	opts    BusOptions
	unwatch func()
	subs    []*nats.Subscription

	ctx         context.Context // ends when the bus closes
	cancel      context.CancelFunc
	appendSlots chan struct{} // semaphore: appends being served
	appends     sync.WaitGroup
}

// DefaultMaxConcurrentAppends bounds append requests served at once. Each
// waits for its own fsync, so concurrency is what lets them share one.
const DefaultMaxConcurrentAppends = 256

// StartBus starts an embedded NATS server, connects the ledger to it and
// starts publishing every event committed from now on. Close it before the
// ledger.
func StartBus(l *Ledger, opts BusOptions) (*Bus, error) {
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Port == 0 {
		opts.Port = DefaultBusPort
	}
	if opts.ReplayChunkEvents <= 0 {
		opts.ReplayChunkEvents = DefaultReplayChunkEvents
	}
	if opts.ReplayChunkBytes <= 0 {
		opts.ReplayChunkBytes = DefaultReplayChunkBytes
	}
	if opts.ReplayChunkBytes < events.MaxEventBytes {
		opts.ReplayChunkBytes = events.MaxEventBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	internalPass, err := randomSecret()
	if err != nil {
		return nil, err
	}
	readOnly := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{ReplaySubject, HeadSubject}},
		Subscribe: &server.SubjectPermission{Allow: []string{EventSubjects, "_INBOX.>"}},
	}
	users := []*server.User{{Username: "leaseledger", Password: internalPass}}
	if opts.ReadOnlyUser != "" {
		users = append(users, &server.User{Username: opts.ReadOnlyUser, Password: opts.ReadOnlyPassword, Permissions: readOnly})
	}
	if opts.WriterUser != "" {
		if opts.WriterUser == opts.ReadOnlyUser {
			return nil, errors.New("ledger: bus: the writer and read-only users must differ")
		}
		users = append(users, &server.User{Username: opts.WriterUser, Password: opts.WriterPassword, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{APISubjects}},
			Subscribe: &server.SubjectPermission{Allow: []string{EventSubjects, "_INBOX.>"}},
		}})
	}
	if opts.MaxConcurrentAppends <= 0 {
		opts.MaxConcurrentAppends = DefaultMaxConcurrentAppends
	}
	sopts := &server.Options{
		Host: opts.Host, Port: opts.Port, NoSigs: true, NoLog: true,
		Users: users, MaxPayload: int32(max(opts.ReplayChunkBytes+64<<10, 1<<20)),
	}
	if !opts.DenyAnonymous {
		anonPass, err := randomSecret()
		if err != nil {
			return nil, err
		}
		users = append(users, &server.User{Username: "anonymous", Password: anonPass, Permissions: readOnly})
		sopts.Users = users
		sopts.NoAuthUser = "anonymous"
	}
	if opts.WebSocketPort != 0 {
		sopts.Websocket = server.WebsocketOpts{Host: opts.Host, Port: opts.WebSocketPort, NoTLS: true}
		if !opts.DenyAnonymous {
			sopts.Websocket.NoAuthUser = "anonymous"
		}
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("ledger: bus: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("ledger: bus: not ready to accept connections on %s:%d", opts.Host, opts.Port)
	}
	nc, err := nats.Connect("", nats.InProcessServer(srv), nats.UserInfo("leaseledger", internalPass), nats.Name("leaseledger-ledger"))
	if err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("ledger: bus: connect: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Bus{srv: srv, nc: nc, l: l, opts: opts, ctx: ctx, cancel: cancel, appendSlots: make(chan struct{}, opts.MaxConcurrentAppends)}
	for subj, h := range map[string]nats.MsgHandler{ReplaySubject: b.serveReplay, HeadSubject: b.serveHead, AppendSubject: b.serveAppend} {
		sub, err := nc.Subscribe(subj, h)
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("ledger: bus: subscribe %s: %w", subj, err)
		}
		b.subs = append(b.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		b.Close()
		return nil, fmt.Errorf("ledger: bus: flush: %w", err)
	}
	b.unwatch = l.Watch(b)
	return b, nil
}

func randomSecret() (string, error) {
	var b [16]byte
	if _, err := crand.Read(b[:]); err != nil {
		return "", fmt.Errorf("ledger: bus: random secret: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// ClientURL is the nats:// URL clients connect to.
func (b *Bus) ClientURL() string { return b.srv.ClientURL() }

// WebSocketURL is the ws:// URL, or "" when WebSocket is off.
func (b *Bus) WebSocketURL() string {
	if b.opts.WebSocketPort == 0 {
		return ""
	}
	return b.srv.WebsocketURL()
}

// Server exposes the embedded server (for in-process clients in tests and
// embedding hosts: nats.Connect("", nats.InProcessServer(b.Server()))).
func (b *Bus) Server() *server.Server { return b.srv }

// Committed implements Observer: it publishes each event on its subject.
// Core NATS publication buffers and never blocks the committer for long; a
// failure is logged, and subscribers recover through replay.
func (b *Bus) Committed(batch []Record) {
	for i := range batch {
		r := &batch[i]
		msg := &nats.Msg{Subject: r.Env.Subject(), Data: r.Raw, Header: nats.Header{
			HeaderMsgID: []string{r.Env.ID.String()},
			HeaderSeq:   []string{strconv.FormatUint(r.Env.Seq, 10)},
		}}
		if err := b.nc.PublishMsg(msg); err != nil {
			b.opts.Logger.Warn("ledger: bus: publish failed", "seq", r.Env.Seq, "err", err)
		}
	}
}

// Close stops publication and the server. It is idempotent.
func (b *Bus) Close() error {
	if b.cancel != nil {
		b.cancel()
		for _, sub := range b.subs {
			_ = sub.Unsubscribe()
		}
		b.appends.Wait() // no append may outlive the bus (the ledger closes next)
		b.cancel = nil
	}
	if b.unwatch != nil {
		b.unwatch()
		b.unwatch = nil
	}
	if b.nc != nil {
		_ = b.nc.Drain()
		b.nc.Close()
		b.nc = nil
	}
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
		b.srv = nil
	}
	return nil
}

// ReplayRequest is the JSON body of a request on ReplaySubject. From and To
// are inclusive (To 0: the head at the time of the request). Kind and
// Activation filter. The reply holds at most one chunk; ask again from
// HeaderNext until HeaderEnd is "true".
type ReplayRequest struct {
	From       uint64      `json:"from"`
	To         uint64      `json:"to,omitempty"`
	Kind       events.Kind `json:"kind,omitempty"`
	Activation string      `json:"activation,omitempty"`
	MaxEvents  int         `json:"max_events,omitempty"`
}

// errChunkFull stops a chunk's scan.
var errChunkFull = errors.New("chunk full")

func (b *Bus) serveReplay(m *nats.Msg) {
	reply := nats.NewMsg(m.Reply)
	var req ReplayRequest
	if err := strictJSON(m.Data, &req); err != nil {
		reply.Header.Set(HeaderError, "malformed replay request")
		_ = m.RespondMsg(reply)
		return
	}
	q := Query{From: Seq(req.From), To: Seq(req.To), Kind: req.Kind, Activation: req.Activation}
	if err := q.Validate(); err != nil {
		reply.Header.Set(HeaderError, "invalid replay request: "+err.Error())
		_ = m.RespondMsg(reply)
		return
	}
	head := b.l.Head().Seq
	if q.To == 0 || q.To > head {
		q.To = head
	}
	maxEvents := b.opts.ReplayChunkEvents
	if req.MaxEvents > 0 && req.MaxEvents < maxEvents {
		maxEvents = req.MaxEvents
	}
	var body bytes.Buffer
	count := 0
	next := q.From
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := b.l.Scan(ctx, q, func(seq Seq, raw []byte) error {
		if count == maxEvents || body.Len()+len(raw)+1 > b.opts.ReplayChunkBytes {
			return errChunkFull
		}
		body.Write(raw)
		body.WriteByte('\n')
		count++
		next = seq + 1
		return nil
	})
	end := err == nil
	if err != nil && !errors.Is(err, errChunkFull) {
		reply.Header.Set(HeaderError, "replay failed")
		b.opts.Logger.Error("ledger: bus: replay", "err", err)
		_ = m.RespondMsg(reply)
		return
	}
	if end {
		next = q.To + 1
	}
	reply.Data = body.Bytes()
	reply.Header.Set(HeaderNext, strconv.FormatUint(uint64(max(next, 1)), 10))
	reply.Header.Set(HeaderEnd, strconv.FormatBool(end))
	reply.Header.Set(HeaderHead, strconv.FormatUint(uint64(head), 10))
	_ = m.RespondMsg(reply)
}

// HeadReply is the JSON body of a reply on HeadSubject.
type HeadReply struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
}

func (b *Bus) serveHead(m *nats.Msg) {
	h := b.l.Head()
	data, _ := json.Marshal(HeadReply{Seq: uint64(h.Seq), Hash: h.Hash.String()})
	_ = m.Respond(data)
}

func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func (b *Bus) serveAppend(m *nats.Msg) {
	select {
	case b.appendSlots <- struct{}{}:
	case <-b.ctx.Done():
		return
	}
	b.appends.Add(1)
	go func() {
		defer b.appends.Done()
		defer func() { <-b.appendSlots }()
		reply := nats.NewMsg(m.Reply)
		acks, err := b.appendLines(m.Data)
		if err != nil {
			reply.Header.Set(HeaderError, err.Error())
		}
		var body bytes.Buffer
		for _, a := range acks {
			fmt.Fprintf(&body, "%d %s\n", a.Seq, a.ID)
		}
		reply.Data = body.Bytes()
		_ = m.RespondMsg(reply)
	}()
}

// appendLines parses JSON Lines of input-form events and appends them in one
// call: all or nothing. Error texts name the line and the field, never the
// offending value.
func (b *Bus) appendLines(data []byte) ([]Ack, error) {
	var drafts []events.Draft
	n := 0
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		n++
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if len(drafts) == MaxAppendEvents {
			return nil, fmt.Errorf("%w: limit MaxAppendEvents=%d", ErrTooManyEvents, MaxAppendEvents)
		}
		d, err := events.ParseInput(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		drafts = append(drafts, d)
	}
	return b.l.AppendAcks(b.ctx, drafts...)
}
