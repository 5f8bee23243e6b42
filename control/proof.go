package control

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"golang.org/x/mod/sumdb/note"
)

// The proof API (leaseledger.api.proof.…, every bus user) hands out what
// an auditor or a witness needs to check the log without its data
// directory: a signed checkpoint of the head (also published on
// busclient.CheckpointSubject), the RFC 6962 inclusion proof of one event
// and the consistency proof between two tree sizes (see package
// ledger/verify for their verification). A relay (NewCheckpointRelay)
// signs nothing and hands out, byte for byte, the latest checkpoint
// another signed — the collector's fleet bus serves each host's own so
// (TestCheckpointRelay).

// Subjects of the proof API (every bus user).
const (
	// ProofCheckpointSubject answers CheckpointRequest with a
	// CheckpointReply: a checkpoint of the head, signed and published now.
	ProofCheckpointSubject = "leaseledger.api.proof.checkpoint"
	// InclusionSubject answers InclusionRequest with an InclusionReply.
	InclusionSubject = "leaseledger.api.proof.inclusion"
	// ConsistencySubject answers ConsistencyRequest with a ConsistencyReply.
	ConsistencySubject = "leaseledger.api.proof.consistency"
)

// ProofTimeout bounds one proof call on the server (a proof reads
// O(log n) stored nodes, or recomputes from events on a ledger whose node
// index is short).
const ProofTimeout = 30 * time.Second

// An inclusion reply carries one event (base64) and its proof: it fits.
const _ = uint(MaxReplyBytes - (events.MaxEventBytes*4/3 + 4 + 2*64*48 + 1024))

// CheckpointRequest asks for a signed checkpoint of the durable head.
type CheckpointRequest struct{}

// CheckpointReply is a signed checkpoint (verify.ParseCheckpoint).
type CheckpointReply struct {
	// Checkpoint is the C2SP signed note text.
	Checkpoint string `json:"checkpoint"`
}

// InclusionRequest asks for the proof that event Seq is in the tree of
// Size events (1 ≤ Seq ≤ Size ≤ the head).
type InclusionRequest struct {
	Seq  uint64 `json:"seq"`
	Size uint64 `json:"size"`
}

// InclusionReply is an event's canonical bytes and its inclusion proof
// (verify.VerifyInclusion against a checkpoint of Size).
type InclusionReply struct {
	Seq    uint64   `json:"seq"`
	Size   uint64   `json:"size"`
	Event  []byte   `json:"event"`
	Hashes [][]byte `json:"hashes"`
}

// ConsistencyRequest asks for the proof that the tree of From events is a
// prefix of the tree of To events (1 ≤ From ≤ To ≤ the head).
type ConsistencyRequest struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// ConsistencyReply is a consistency proof (verify.VerifyConsistency
// between checkpoints of From and To).
type ConsistencyReply struct {
	From   uint64   `json:"from"`
	To     uint64   `json:"to"`
	Hashes [][]byte `json:"hashes"`
}

// Checkpointer signs checkpoints of a ledger's durable head under one
// origin and publishes them — or, made by NewCheckpointRelay, signs
// nothing and hands out the checkpoints someone else signed. It is safe
// for concurrent use: one checkpoint is signed (or relayed) and published
// at a time, so they go out in order of size.
type Checkpointer struct {
	l      *ledger.Ledger // nil: a relay
	origin string
	signer note.Signer

	turn chan struct{} // held by the one Publish at a time
	mu   sync.Mutex    // guards publish, last and any
	// publish sends a signed checkpoint (nil until SetPublish).
	publish func(signed []byte) error
	last    ledger.Seq // size of the last one published (with any)
	any     bool
	// lastSigned is the last one published (held by turn): re-sent while
	// the head has not moved.
	lastSigned []byte
}

// NewCheckpointer returns a Checkpointer of l's head under origin, signed
// by signer. It publishes nothing until SetPublish.
func NewCheckpointer(l *ledger.Ledger, origin string, signer note.Signer) *Checkpointer {
	return &Checkpointer{l: l, origin: origin, signer: signer, turn: make(chan struct{}, 1)}
}

// NewCheckpointRelay returns a Checkpointer that signs nothing: Publish
// (and so the proof API's checkpoint requests, ProofServices) hands out
// the latest checkpoint given to Relay, its signer's bytes untouched —
// the collector's fleet bus serves each host's own signed checkpoints so.
// Until the first Relay, Publish fails and the proof API refuses with
// CodeUnavailable. Run does nothing on a relay.
func NewCheckpointRelay() *Checkpointer {
	return &Checkpointer{turn: make(chan struct{}, 1)}
}

// ErrNotRelay: Relay on a Checkpointer that signs its own checkpoints
// (NewCheckpointer).
var ErrNotRelay = errors.New("control: Relay on a signing checkpointer")

// Relay makes signed the checkpoint a relay (NewCheckpointRelay) hands
// out and publishes it (once SetPublish was called; before, it is only
// kept). The caller vouches for it — that it is a signed checkpoint of
// the ledger the proof API answers from, not smaller than the last one
// relayed: the relay checks nothing, so that it never alters another's
// signature. On a signing Checkpointer it returns ErrNotRelay.
func (c *Checkpointer) Relay(ctx context.Context, signed []byte) error {
	if c.l != nil {
		return ErrNotRelay
	}
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.turn }()
	c.lastSigned = bytes.Clone(signed)
	c.mu.Lock()
	publish := c.publish
	c.mu.Unlock()
	if publish == nil {
		return nil
	}
	return publish(c.lastSigned)
}

// SetPublish sets where checkpoints go (the bus's PublishCheckpoint: the
// bus must exist first, and its services already hold the Checkpointer).
func (c *Checkpointer) SetPublish(fn func(signed []byte) error) {
	c.mu.Lock()
	c.publish = fn
	c.mu.Unlock()
}

// errNoPublisher: Publish before SetPublish, or on a relay before the
// first Relay.
var errNoPublisher = errors.New("control: the checkpointer has no publisher yet")

// Publish signs a checkpoint of the durable head, publishes it and
// returns it. While the head has not moved since the last one, it
// re-sends that one (same bytes) instead of computing and signing again.
// A relay (NewCheckpointRelay) re-sends the last one relayed.
func (c *Checkpointer) Publish(ctx context.Context) ([]byte, error) {
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.turn }()
	c.mu.Lock()
	publish := c.publish
	c.mu.Unlock()
	if publish == nil {
		return nil, errNoPublisher
	}
	if c.l == nil {
		if c.lastSigned == nil {
			return nil, errNoPublisher
		}
		if err := publish(c.lastSigned); err != nil {
			return nil, err
		}
		return c.lastSigned, nil
	}
	head := c.l.Head().Seq
	c.mu.Lock()
	same := c.any && c.last == head
	c.mu.Unlock()
	if same {
		if err := publish(c.lastSigned); err != nil {
			return nil, err
		}
		return c.lastSigned, nil
	}
	cp, err := verify.CheckpointAt(ctx, c.l, c.origin, head)
	if err != nil {
		return nil, err
	}
	signed, err := cp.Sign(c.signer)
	if err != nil {
		return nil, err
	}
	if err := publish(signed); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.last, c.any = cp.Size, true
	c.mu.Unlock()
	c.lastSigned = signed
	return signed, nil
}

// Run publishes a checkpoint every interval when the head moved since
// the last one published (and at the first tick), until ctx ends. A
// failure is reported to logf and tried again at the next tick. On a
// relay it returns at once.
func (c *Checkpointer) Run(ctx context.Context, interval time.Duration, logf func(err error)) {
	if c.l == nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		moved := !c.any || c.l.Head().Seq != c.last
		c.mu.Unlock()
		if !moved {
			continue
		}
		if _, err := c.Publish(ctx); err != nil && ctx.Err() == nil {
			logf(err)
		}
	}
}

// ProofServices returns the proof API's services (bus.AccessRead) on l:
// inclusion and consistency proofs always, checkpoints through cp (nil:
// refused with CodeUnavailable, serve has no checkpoint key; a relay,
// NewCheckpointRelay: the last checkpoint relayed, refused with
// CodeUnavailable before the first).
func ProofServices(l *ledger.Ledger, cp *Checkpointer) []bus.Service {
	h := &proofs{l: l, cp: cp}
	return []bus.Service{
		{Subject: ProofCheckpointSubject, Access: bus.AccessRead, Timeout: ProofTimeout, Handle: bus.JSON(h.checkpoint)},
		{Subject: InclusionSubject, Access: bus.AccessRead, Timeout: ProofTimeout, Handle: bus.JSON(h.inclusion)},
		{Subject: ConsistencySubject, Access: bus.AccessRead, Timeout: ProofTimeout, Handle: bus.JSON(h.consistency)},
	}
}

type proofs struct {
	l  *ledger.Ledger
	cp *Checkpointer
}

func (h *proofs) checkpoint(ctx context.Context, _ string, _ *CheckpointRequest) (*CheckpointReply, error) {
	if h.cp == nil {
		return nil, bus.Refuse(CodeUnavailable, "this server signs no checkpoints (no checkpoint key)")
	}
	signed, err := h.cp.Publish(ctx)
	if errors.Is(err, errNoPublisher) {
		return nil, bus.Refuse(CodeUnavailable, "checkpoints are not published yet: retry later")
	} else if err != nil {
		return nil, err
	}
	return &CheckpointReply{Checkpoint: string(signed)}, nil
}

// beyondHead refuses a size the ledger does not hold (yet).
var beyondHead = bus.Refuse(CodeNotFound, "the size is beyond the durable head")

func (h *proofs) inclusion(ctx context.Context, _ string, r *InclusionRequest) (*InclusionReply, error) {
	if r.Seq < 1 || r.Seq > r.Size {
		return nil, badRequest("want 1 <= seq <= size")
	}
	if r.Size > uint64(h.l.Head().Seq) {
		return nil, beyondHead
	}
	hashes, err := h.l.InclusionProof(ctx, ledger.Seq(r.Seq), ledger.Seq(r.Size))
	if err != nil {
		return nil, proofError(err)
	}
	raw, err := h.l.GetRaw(ledger.Seq(r.Seq))
	if err != nil {
		return nil, err
	}
	return &InclusionReply{Seq: r.Seq, Size: r.Size, Event: raw, Hashes: nonNil(hashes)}, nil
}

func (h *proofs) consistency(ctx context.Context, _ string, r *ConsistencyRequest) (*ConsistencyReply, error) {
	if r.From < 1 || r.From > r.To {
		return nil, badRequest("want 1 <= from <= to")
	}
	if r.To > uint64(h.l.Head().Seq) {
		return nil, beyondHead
	}
	hashes, err := h.l.ConsistencyProof(ctx, ledger.Seq(r.From), ledger.Seq(r.To))
	if err != nil {
		return nil, proofError(err)
	}
	return &ConsistencyReply{From: r.From, To: r.To, Hashes: nonNil(hashes)}, nil
}

// proofError refuses the ledger's range error (the head cannot move
// back, so only a bug gets here) and passes anything else on.
func proofError(err error) error {
	if errors.Is(err, ledger.ErrTreeRange) {
		return bus.Refuse(CodeNotFound, "the size is beyond the durable head")
	}
	return fmt.Errorf("proof: %w", err)
}
