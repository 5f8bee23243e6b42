package collector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"github.com/nats-io/nats.go"
	"golang.org/x/mod/sumdb/note"
)

// hostMirror mirrors one host. Only its own goroutine (run) writes its
// mirror; status may be read from anywhere.
type hostMirror struct {
	opts      Options
	host, dir string
	l         *ledger.Ledger
	closer    io.Closer // closes l (Options.OpenMirror's)
	// client is the host's read-only API: peer, or bare for the rest of a
	// session once the host served no peer class (run's own).
	client, peer, bare *busclient.Client
	loggedBare         bool // the switch to bare was logged (run's own)

	mu          sync.Mutex
	st          HostStatus         // Head and Lag are filled in by status
	sub         *nats.Subscription // the live subscription, nil between sessions
	droppedBase uint64             // drops of earlier subscriptions
	heard       bool               // the host answered since it was last found unreachable
	headTime    headTime           // the mirrored head event's time, cached by seq

	verifier    note.Verifier       // of the host's checkpoints, nil: checked by the mirror only
	checkpoints []pendingCheckpoint // waiting for the mirror to reach their size (run's own)
	lastAsked   time.Time           // the last paced replay request (run's own)
}

// pendingCheckpoint is a checkpoint the host published, parsed (and
// verified by signature when the host has a verifier), kept until the
// mirror holds its size.
type pendingCheckpoint struct {
	cp       verify.Checkpoint
	signed   []byte
	verified bool // by the host's verifier
}

func newHostMirror(opts Options, host, dir string, l *ledger.Ledger) *hostMirror {
	return &hostMirror{opts: opts, host: host, dir: dir, l: l,
		peer:     busclient.NewClient(opts.Conn).WithPeerClass().WithHost(host),
		bare:     busclient.NewClient(opts.Conn).WithHost(host),
		st:       HostStatus{State: StateCatchingUp},
		verifier: opts.Verifiers[host]}
}

func (hm *hostMirror) refusedPath() string { return filepath.Join(hm.dir, RefusedFile) }

func (hm *hostMirror) status() HostStatus {
	hm.mu.Lock()
	s := hm.st
	if hm.sub != nil {
		if d, err := hm.sub.Dropped(); err == nil {
			s.Dropped = hm.droppedBase + uint64(d)
		}
	} else {
		s.Dropped = hm.droppedBase
	}
	hm.mu.Unlock()
	s.Head = hm.l.Head().Seq
	if s.HostHead > s.Head {
		s.Lag = uint64(s.HostHead - s.Head)
	}
	s.HeadTime = hm.mirroredHeadTime(s.Head)
	return s
}

// headTime is the time of the mirrored event at seq.
type headTime struct {
	seq events.Seq
	t   time.Time
}

// mirroredHeadTime is the time of the mirrored event at head (zero for an
// empty mirror or one that cannot be read), read once per head.
func (hm *hostMirror) mirroredHeadTime(head events.Seq) time.Time {
	if head == 0 {
		return time.Time{}
	}
	hm.mu.Lock()
	c := hm.headTime
	hm.mu.Unlock()
	if c.seq == head {
		return c.t
	}
	env, err := hm.l.Get(head)
	if err != nil {
		return time.Time{}
	}
	hm.mu.Lock()
	if head > hm.headTime.seq {
		hm.headTime = headTime{seq: head, t: env.Time.UTC()}
	}
	hm.mu.Unlock()
	return env.Time.UTC()
}

func (hm *hostMirror) setState(state string, err error) {
	hm.mu.Lock()
	defer hm.mu.Unlock()
	if hm.st.State == StateRefused {
		return
	}
	if state != hm.st.State {
		hm.opts.Logger.Info("collector: host state", "host", hm.host, "from", hm.st.State, "to", state, "err", err)
	}
	hm.st.State = state
	if state == StateUnreachable {
		hm.heard = false
	}
	if err != nil {
		hm.st.LastError = err.Error()
	} else if state == StateLive {
		hm.st.LastError = ""
	}
}

func (hm *hostMirror) sawHostHead(seq events.Seq) {
	hm.mu.Lock()
	hm.st.HostHead = max(hm.st.HostHead, seq)
	hm.heard = true
	hm.st.LastHeard = hm.opts.Now().UTC()
	hm.mu.Unlock()
}

// run mirrors the host until ctx ends or the host is refused. A session
// that fails (the mirror's ledger refused a write, the subscription could
// not be made) is retried after PollInterval; an unreachable host does
// not end a session.
func (hm *hostMirror) run(ctx context.Context) {
	for {
		err := hm.session(ctx)
		if ctx.Err() != nil || errors.Is(err, ErrRefused) {
			return
		}
		hm.setState(StateUnreachable, err)
		hm.opts.Logger.Warn("collector: host session failed; retrying", "host", hm.host, "err", err)
		if !sleep(ctx, hm.opts.PollInterval) {
			return
		}
	}
}

// errHole: an Import found the mirror not where the batch starts (a seq
// was skipped); the caller fills by replay. Not a refusal.
var errHole = errors.New("collector: hole before the batch")

func (hm *hostMirror) session(ctx context.Context) error {
	hm.client = hm.peer
	ch := make(chan *nats.Msg, hm.opts.BufferLen)
	subject := busclient.HostSubject(hm.host, busclient.EventSubjects())
	sub, err := hm.opts.Conn.ChanSubscribe(subject, ch)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", subject, err)
	}
	hm.mu.Lock()
	hm.sub = sub
	hm.mu.Unlock()
	defer func() {
		hm.mu.Lock()
		if d, err := sub.Dropped(); err == nil {
			hm.droppedBase += uint64(d)
		}
		hm.sub = nil
		hm.mu.Unlock()
		_ = sub.Unsubscribe()
	}()
	var cpCh chan *nats.Msg
	if hm.verifier != nil || hm.opts.OnCheckpoint != nil {
		cpCh = make(chan *nats.Msg, MaxPendingCheckpoints)
		cpSubject := busclient.HostSubject(hm.host, busclient.CheckpointSubject)
		cpSub, err := hm.opts.Conn.ChanSubscribe(cpSubject, cpCh)
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", cpSubject, err)
		}
		defer cpSub.Unsubscribe()
	}
	// The subscription is in place before the head is asked, so an event
	// committed after the answer arrives live or leaves a hole that the
	// next live event or poll finds (interest reaches the host's server
	// over the route a moment after the flush: the same hole).
	if err := hm.opts.Conn.FlushTimeout(busclient.DefaultRequestTimeout); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	// The head is polled PollInterval after the last poll or confirmed
	// import: live messages that import nothing (junk anyone may publish
	// on the host's subjects) do not put the poll off, so a host that went
	// away is found unreachable (TestJunkLiveDoesNotHoldStoppedHostLive).
	idle := time.NewTimer(0) // the first poll: catch up at once
	defer idle.Stop()
	batch := make([]*nats.Msg, 0, hm.opts.ImportBatchEvents)
	for {
		polled, before := false, hm.l.Head().Seq
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-idle.C:
			polled = true
			if err := hm.catchUp(ctx); err != nil {
				return err
			}
		case m := <-ch:
			batch = append(batch[:0], m)
			// Messages arriving while the pace holds join this batch:
			// one confirmation covers them all.
			if !hm.paceWait(ctx) {
				return ctx.Err()
			}
		drain:
			for len(batch) < cap(batch) {
				select {
				case m := <-ch:
					batch = append(batch, m)
				default:
					break drain
				}
			}
			if err := hm.live(ctx, batch); err != nil {
				return err
			}
			clear(batch)
		case m := <-cpCh:
			hm.takeCheckpoint(m.Data)
		}
		if err := hm.checkCheckpoints(ctx); err != nil {
			return err
		}
		if !polled && hm.l.Head().Seq == before {
			continue // nothing confirmed: the poll stays due
		}
		if !idle.Stop() {
			select {
			case <-idle.C:
			default:
			}
		}
		idle.Reset(hm.opts.PollInterval)
	}
}

// catchUp asks the host's head and fills the mirror up to it by replay.
// An unreachable host sets StateUnreachable and is not an error: the
// session waits for the next poll or live event.
func (hm *hostMirror) catchUp(ctx context.Context) error {
	var h busclient.HeadReply
	// Bounded by PollTimeout: a host that died or hangs is unreachable
	// after one unanswered poll, not after the client's request timeout.
	pctx, cancel := context.WithTimeout(ctx, hm.opts.PollTimeout)
	defer cancel()
	err := hm.peerOrBare(func(c *busclient.Client) (bool, error) {
		var err error
		h, err = c.Head(pctx)
		return false, err
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		hm.setState(StateUnreachable, err)
		return nil
	}
	hm.sawHostHead(h.Seq)
	mh := hm.l.Head()
	if h.Seq <= mh.Seq {
		return hm.checkHead(h)
	}
	hm.setState(StateCatchingUp, nil)
	if err := hm.fill(ctx, h.Seq, nil); err != nil {
		return err
	}
	hm.settle()
	return nil
}

// peerOrBare runs req in hm.client's class. When that is the peer class
// and the host has no responder there (nats.ErrNoResponders) and req got
// no answer at all, req is run again in the bare anonymous class (a host
// from before the peer class refuses the peer's reply prefix instead, so
// hosts are upgraded before the collector: docs/fleet.md); when the host
// answers there, the session keeps to that class (logged once per host)
// (TestHostWithoutPeerClassMirrored). A host that is down answers in
// neither and stays in the peer class.
func (hm *hostMirror) peerOrBare(req func(c *busclient.Client) (answered bool, err error)) error {
	answered, err := req(hm.client)
	if hm.client != hm.peer || answered || !errors.Is(err, nats.ErrNoResponders) {
		return err
	}
	if _, berr := req(hm.bare); !errors.Is(berr, nats.ErrNoResponders) {
		hm.client = hm.bare
		if !hm.loggedBare {
			hm.loggedBare = true
			hm.opts.Logger.Warn("collector: host serves no peer class (an older host?): read in the anonymous class for this session", "host", hm.host)
		}
		return berr
	}
	return err
}

// checkHead compares a host head at or below the mirror's head with the
// mirrored event at that seq: a different hash means the host re-sealed
// history the mirror already holds.
func (hm *hostMirror) checkHead(h busclient.HeadReply) error {
	if h.Seq == 0 {
		hm.setState(StateLive, nil)
		return nil
	}
	env, err := hm.l.Get(h.Seq)
	if err != nil {
		return fmt.Errorf("read mirrored seq %d: %w", h.Seq, err)
	}
	if env.Hash.String() != h.Hash {
		return hm.refuse(&Finding{Seq: h.Seq, Stored: env.Hash.String(), Offered: h.Hash, Reason: ReasonForked,
			Detail: fmt.Sprintf("the host's head at seq %d has another hash than the mirrored event", h.Seq)})
	}
	hm.setState(StateLive, nil)
	return nil
}

// fill imports the host's events after the mirror's head through to by
// replay, in batches of
// ImportBatchEvents. With hint — live events for the seqs right after the
// mirror's head — the replay starts at the hint's last seq instead: the
// host's event there must be the hint's last byte for byte (its hash seals
// the whole hint, which Import checks chains onto the mirror), then the
// hint is imported as one run and the replay goes on; otherwise fill
// returns errLiveRejected, the hint unstored.
func (hm *hostMirror) fill(ctx context.Context, to events.Seq, hint [][]byte) error {
	from := hm.l.Head().Seq + 1
	if len(hint) > 0 {
		from += events.Seq(len(hint) - 1)
	}
	if to < from {
		return nil
	}
	var run [][]byte
	err := hm.peerOrBare(func(c *busclient.Client) (answered bool, err error) {
		_, err = c.Replay(ctx, from, to, busclient.TailFilter{}, func(seq events.Seq, raw []byte) error {
			answered = true
			hm.sawHostHead(seq)
			if hint != nil {
				h := hint
				hint = nil
				if seq != from || !bytes.Equal(raw, h[len(h)-1]) {
					return errLiveRejected
				}
				return hm.importRun(ctx, h, false)
			}
			run = append(run, raw)
			if len(run) < hm.opts.ImportBatchEvents {
				return nil
			}
			err := hm.importRun(ctx, run, true)
			run = run[:0]
			return err
		})
		return answered, err
	})
	if err == nil && hint != nil {
		err = errLiveRejected // the host has no event at the hint's last seq
	}
	if err == nil && len(run) > 0 {
		err = hm.importRun(ctx, run, true)
	}
	switch {
	case err == nil, errors.Is(err, errHole):
		return nil // a hole is found again by the next poll
	case errors.Is(err, ErrRefused), errors.Is(err, errLiveRejected), ctx.Err() != nil:
		return err
	}
	var be *busclient.Error
	if errors.As(err, &be) {
		hm.setState(StateUnreachable, err) // the host stopped answering mid-replay
		return nil
	}
	return err
}

// settle marks the host live once the mirror holds every event the host
// reported; otherwise the state stays (catching up, or unreachable after a
// replay that failed) until a poll or a live event says more. An
// unreachable host stays so until it answers again: live messages alone
// (anyone may publish them) do not make it live
// (TestJunkLiveDoesNotHoldStoppedHostLive).
func (hm *hostMirror) settle() {
	hm.mu.Lock()
	behind := hm.st.HostHead > hm.l.Head().Seq
	unheard := hm.st.State == StateUnreachable && !hm.heard
	hm.mu.Unlock()
	if !behind && !unheard {
		hm.setState(StateLive, nil)
	}
}

// refuseOffered refuses the host for offering, through its replay,
// another event than the mirrored one at seq.
func (hm *hostMirror) refuseOffered(seq events.Seq, stored, offered []byte) error {
	f := &Finding{Seq: seq, Reason: ReasonForked, Detail: fmt.Sprintf("the host offers another event at mirrored seq %d", seq)}
	if e, err := events.Decode(stored); err == nil {
		f.Stored = e.Hash.String()
	}
	if e, err := events.Decode(offered); err == nil {
		f.Offered = e.Hash.String()
	}
	return hm.refuse(f)
}

// importRun checks the run's host.bound events and imports it. A fork, a
// broken chain or a foreign host.bound refuses the host when the run is
// the host's own (trusted: its replay); a run of live events is only
// errLiveRejected then, for the replay to judge. A hole is errHole.
func (hm *hostMirror) importRun(ctx context.Context, run [][]byte, trusted bool) error {
	judge := hm.refuse
	if !trusted {
		judge = func(*Finding) error { return errLiveRejected }
	}
	for _, raw := range run {
		if err := hm.checkHostBound(raw, judge); err != nil {
			return err
		}
	}
	before := hm.l.Head().Seq
	// Not cancelled by Close: an import whose batch may already be
	// committed is waited for, so the count below is exact and Close
	// leaves no import in flight. A local fsync bounds the wait.
	h, err := hm.l.Import(context.WithoutCancel(ctx), run)
	if err == nil {
		hm.mu.Lock()
		hm.st.Imported += uint64(h.Seq - before)
		hm.mu.Unlock()
		return nil
	}
	first, _ := events.PeekSeq(run[0])
	var fe *ledger.ForkError
	switch {
	case errors.As(err, &fe):
		return judge(&Finding{Seq: fe.Seq, Stored: fe.Stored.String(), Offered: fe.Offered.String(), Reason: ReasonForked, Detail: err.Error()})
	case errors.Is(err, ledger.ErrForked):
		return judge(&Finding{Seq: first, Reason: ReasonForked, Detail: err.Error()})
	case errors.Is(err, ledger.ErrChainBroken):
		seq := first
		var le *ledger.Error
		if errors.As(err, &le) && le.Seq != 0 {
			seq = le.Seq
		}
		return judge(&Finding{Seq: seq, Reason: ReasonChainBroken, Detail: err.Error()})
	case errors.Is(err, ledger.ErrImportGap):
		return fmt.Errorf("%w: %w", errHole, err)
	}
	return fmt.Errorf("import seq %d..: %w", first, err)
}

// checkHostBound judges (refuses, for a trusted run) raw when it is a
// host.bound event naming another host.
func (hm *hostMirror) checkHostBound(raw []byte, judge func(*Finding) error) error {
	kind, err := events.PeekKind(raw)
	if err != nil || kind != events.KindHostBound {
		return nil // Import judges malformed events
	}
	env, err := events.Decode(raw)
	if err != nil {
		return nil
	}
	var p events.HostBound
	if err := json.Unmarshal(env.Data, &p); err != nil || p.Host != hm.host {
		return judge(&Finding{Seq: env.Seq, Reason: ReasonHostMismatch,
			Detail: fmt.Sprintf("host.bound at seq %d names host %q, this chain is mirrored as %q", env.Seq, p.Host, hm.host)})
	}
	return nil
}

// refuse persists f, stops the host's mirroring and returns ErrRefused.
func (hm *hostMirror) refuse(f *Finding) error {
	f.Host = hm.host
	f.Time = hm.opts.Now().UTC()
	werr := writeFinding(hm.dir, f)
	hm.mu.Lock()
	hm.st.State, hm.st.Finding = StateRefused, f
	if werr != nil {
		hm.st.LastError = fmt.Sprintf("persist %s: %v", RefusedFile, werr)
	}
	hm.mu.Unlock()
	hm.opts.Logger.Error("collector: host REFUSED", "host", hm.host, "reason", f.Reason, "seq", f.Seq,
		"stored", f.Stored, "offered", f.Offered, "detail", f.Detail, "persist_err", werr)
	return fmt.Errorf("%w: %s: %s at seq %d", ErrRefused, hm.host, f.Reason, f.Seq)
}

// takeCheckpoint keeps a checkpoint whose signature verifies (or, for a
// host without a verifier, that parses) until the mirror reaches its size;
// others are counted and ignored.
func (hm *hostMirror) takeCheckpoint(signed []byte) {
	var cp verify.Checkpoint
	var err error
	if hm.verifier != nil {
		cp, err = verify.ParseCheckpoint(signed, hm.verifier)
	} else {
		cp, err = verify.ParseCheckpointUnverified(signed)
	}
	hm.mu.Lock()
	defer hm.mu.Unlock()
	if err != nil || cp.Size == 0 {
		hm.st.CheckpointsRejected++
		hm.opts.Logger.Warn("collector: checkpoint rejected", "host", hm.host, "err", err)
		return
	}
	if len(hm.checkpoints) == MaxPendingCheckpoints {
		hm.checkpoints = hm.checkpoints[1:]
		hm.st.CheckpointsDropped++
	}
	hm.checkpoints = append(hm.checkpoints, pendingCheckpoint{cp: cp, signed: bytes.Clone(signed), verified: hm.verifier != nil})
}

// checkCheckpoints compares every kept checkpoint the mirror has reached
// with the mirror: root and chain hash at its size. One that differs
// refuses the host when its signature was verified, and is counted and
// ignored otherwise. One that matches and is larger than any before is
// handed to Options.OnCheckpoint, untouched.
func (hm *hostMirror) checkCheckpoints(ctx context.Context) error {
	head := hm.l.Head().Seq
	keep := hm.checkpoints[:0]
	for _, p := range hm.checkpoints {
		cp := p.cp
		if cp.Size > head {
			keep = append(keep, p)
			continue
		}
		root, err := hm.l.TreeRoot(ctx, cp.Size)
		if err != nil {
			return fmt.Errorf("mirror root at %d: %w", cp.Size, err)
		}
		env, err := hm.l.Get(cp.Size)
		if err != nil {
			return fmt.Errorf("mirror event %d: %w", cp.Size, err)
		}
		if !bytes.Equal(root, cp.Root) || env.Hash != cp.Head {
			if !p.verified {
				hm.mu.Lock()
				hm.st.CheckpointsRejected++
				hm.mu.Unlock()
				hm.opts.Logger.Warn("collector: checkpoint rejected: not the mirror's", "host", hm.host, "size", cp.Size)
				continue
			}
			return hm.refuse(&Finding{Seq: cp.Size, Stored: env.Hash.String(), Offered: cp.Head.String(), Reason: ReasonCheckpoint,
				Detail: fmt.Sprintf("checkpoint %s of size %d signed by the host: root %x, the mirror's %x", cp.Origin, cp.Size, cp.Root, root)})
		}
		hm.mu.Lock()
		if p.verified {
			hm.st.CheckpointsVerified++
			hm.st.VerifiedSize = max(hm.st.VerifiedSize, cp.Size)
		}
		latest := cp.Size > hm.st.CheckpointSize
		if latest {
			hm.st.CheckpointSize = cp.Size
		}
		hm.mu.Unlock()
		if latest && hm.opts.OnCheckpoint != nil {
			hm.opts.OnCheckpoint(hm.host, p.signed)
		}
	}
	clear(hm.checkpoints[len(keep):])
	hm.checkpoints = keep
	return nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
