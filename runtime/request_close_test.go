//go:build linux

package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// workersBarrier returns the connection.barrier{workers} of act, if any.
func workersBarrier(p *policyEnv, act string) *events.ConnectionBarrier {
	for _, x := range p.events() {
		if b, ok := x.Payload.(*events.ConnectionBarrier); ok && x.Activation == act && b.Obligation == events.ObligationWorkers {
			return b
		}
	}
	return nil
}

// heldWorkers is session s1 of a policyEnv with one owner, whose handle
// workers park in a hook (holdWorkers) until release is closed.
type heldWorkers struct {
	p       *policyEnv
	capa    LeaseCapability
	ctx     context.Context
	o       *Owner
	parked  chan *ResourceHandle // each parked worker's handle
	release chan struct{}
}

// holdWorkers opens the session and its owner and arms the hook (set by
// arm) that parks the workers.
func holdWorkers(t *testing.T, arm func(p *policyEnv, hook func(*ResourceHandle))) heldWorkers {
	w := heldWorkers{p: newPolicyEnv(t, nil), ctx: ctxT(t, 30*time.Second),
		parked: make(chan *ResourceHandle, 1), release: make(chan struct{})}
	w.capa = w.p.open("s1").Capability()
	var err error
	if w.o, err = w.capa.NewOwner(w.ctx); err != nil {
		t.Fatal(err)
	}
	arm(w.p, func(h *ResourceHandle) {
		w.parked <- h
		<-w.release
	})
	return w
}

// releaseAndConfirm releases the parked worker of h, waits for the
// termination's result on term and the worker's exit, and requires the
// workers barrier confirmed.
func releaseAndConfirm(t *testing.T, p *policyEnv, h *ResourceHandle, release chan struct{}, term <-chan error) {
	t.Helper()
	close(release)
	if err := <-term; err != nil {
		t.Fatalf("TerminateAll: %v", err)
	}
	<-h.workerDone
	if b := workersBarrier(p, h.Activation()); b == nil || b.Outcome != events.BarrierOK {
		t.Fatalf("workers barrier %+v", b)
	}
}

// holdWorkerThenTerminate parks a handle's worker in a hook (set by arm)
// and runs TerminateAll meanwhile: the termination's workers obligation
// must not be confirmed while the worker is parked; once released, the
// worker ends and the termination completes.
func holdWorkerThenTerminate(t *testing.T, arm func(p *policyEnv, hook func(*ResourceHandle)), uri string, openGate bool) {
	w := holdWorkers(t, arm)
	p, capa, ctx, o, parked, release := w.p, w.capa, w.ctx, w.o, w.parked, w.release
	type started struct {
		h   *ResourceHandle
		err error
	}
	st := make(chan started, 1)
	go func() {
		h, err := capa.ReadResource(ctx, o, "fs", uri, RequestOptions{Budget: 10 * time.Second})
		st <- started{h, err}
	}()
	if openGate {
		p.w.openGate(uri)
	}
	var h *ResourceHandle
	select {
	case h = <-parked:
	case <-ctx.Done():
		t.Fatal("the hook never ran")
	}
	act := h.Activation()
	term := make(chan error, 1)
	go func() { term <- p.m.TerminateAll(context.Background()) }()
	select {
	case err := <-term:
		t.Fatalf("TerminateAll returned while the worker was held (workers barrier %+v, err %v)", workersBarrier(p, act), err)
	case <-time.After(700 * time.Millisecond):
	}
	if b := workersBarrier(p, act); b != nil {
		t.Fatalf("workers barrier recorded while the worker was held: %+v", b)
	}
	releaseAndConfirm(t, p, h, release, term)
	if r := <-st; r.err != nil {
		t.Fatalf("start: %v", r.err)
	}
	<-h.Done()
	if _, err := h.Await(ctx); err != nil && !errors.Is(err, ErrRequestFailed) {
		t.Fatalf("await after close: %v", err)
	}
}

// A request admitted (registration durable) whose worker has not started
// yet counts in the workers obligation of a concurrent termination.
func TestRequestWorkerCountedFromAdmission(t *testing.T) {
	holdWorkerThenTerminate(t, func(p *policyEnv, hook func(*ResourceHandle)) {
		p.m.testHookRequestAdmitted = hook
	}, "fake://gate/admitted", false)
}

// A worker whose request settled counts until its releases (which may
// record session.ended and end leases) returned.
func TestRequestWorkerCountedUntilReleased(t *testing.T) {
	holdWorkerThenTerminate(t, func(p *policyEnv, hook func(*ResourceHandle)) {
		p.m.testHookWorkerReleasing = hook
	}, "fake://gate/released", true)
}

// A worker whose releases end the session (the scope was released while
// the request ran) ends its own lease: that close does not wait for the
// worker running it, and its workers obligation is confirmed.
func TestRequestWorkerEndsItsOwnLease(t *testing.T) {
	p := newPolicyEnv(t, nil)
	ctx := ctxT(t, 30*time.Second)
	s, err := p.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	capa := s.Capability()
	o, err := capa.NewOwner(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := capa.ReadResource(ctx, o, "fs", "fake://gate/self", RequestOptions{Budget: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.w.openGate("fake://gate/self")
	<-h.Done()
	testproc.Eventually(t, "the workers barrier recorded", func() bool { return workersBarrier(p, h.Activation()) != nil })
	// A close that waited for the worker running it would wait on
	// itself: its workers barrier would time out, not be OK.
	if b := workersBarrier(p, h.Activation()); b.Outcome != events.BarrierOK {
		t.Fatalf("workers barrier %+v", b)
	}
	if _, err := h.Await(ctx); err != nil {
		t.Fatal(err)
	}
}

// A worker whose release ends its revoked lease while another caller
// (here TerminateAll, as in a shutdown) already runs that lease's close
// waits for that close, and the close does not wait for it: its workers
// barrier is confirmed, not timed out at the deadline.
func TestRequestWorkerEndsItsLeaseUnderAnotherClose(t *testing.T) {
	w := holdWorkers(t, func(p *policyEnv, hook func(*ResourceHandle)) { p.m.testHookWorkerReleasing = hook })
	p, capa, ctx, o, parked, release := w.p, w.capa, w.ctx, w.o, w.parked, w.release
	const uri = "fake://gate/revoked"
	h, err := capa.ReadResource(ctx, o, "fs", uri, RequestOptions{Budget: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Revoked with the request in flight: the worker's release of the
	// lease is the one that ends it.
	if err := p.m.Revoke(ctx, "s1", "fs", "test"); err != nil {
		t.Fatal(err)
	}
	p.w.openGate(uri)
	select {
	case <-parked:
	case <-ctx.Done():
		t.Fatal("the hook never ran")
	}
	term := make(chan error, 1)
	go func() { term <- p.m.TerminateAll(context.Background()) }()
	act := h.Activation()
	testproc.Eventually(t, "TerminateAll began the lease's close", func() bool {
		for _, x := range p.events() {
			if _, ok := x.Payload.(*events.LeaseTerminated); ok && x.Activation == act {
				return true
			}
		}
		return false
	})
	releaseAndConfirm(t, p, h, release, term)
	if _, err := h.Await(ctx); err != nil {
		t.Fatal(err)
	}
}

// An owner created with an already-ended context ends at once (its
// AfterFunc runs concurrently with NewOwner's return): no race, no panic.
func TestOwnerNewWithEndedContext(t *testing.T) {
	p := newPolicyEnv(t, nil)
	capa := p.open("s1").Capability()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o, err := capa.NewOwner(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-o.Ended():
	case <-time.After(10 * time.Second):
		t.Fatal("owner not ended")
	}
	if _, err := o.End(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := capa.ReadResource(context.Background(), o, "fs", "fake://gate/x", DefaultRequestOptions()); !errors.Is(err, ErrOwnerEnded) {
		t.Fatalf("start under ended owner: %v", err)
	}
}

// Cancel on a completed handle records the attempt once; a second Cancel
// is ErrHandleSettled and records nothing.
func TestRequestCancelCompletedOnce(t *testing.T) {
	p := newPolicyEnv(t, nil)
	capa := p.open("s1").Capability()
	ctx := ctxT(t, 30*time.Second)
	o, err := capa.NewOwner(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.w.openGate("fake://gate/done")
	h, err := capa.ReadResource(ctx, o, "fs", "fake://gate/done", RequestOptions{Budget: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Await(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := h.Cancel(ctx)
	if err != nil || rep.Settlement != SettlementAlreadyCompleted {
		t.Fatalf("first cancel %+v %v", rep, err)
	}
	for range 3 {
		rep, err = h.Cancel(ctx)
		if !errors.Is(err, ErrHandleSettled) || rep.Settlement != SettlementAlreadyCompleted {
			t.Fatalf("repeated cancel %+v %v", rep, err)
		}
	}
	n := 0
	for _, x := range p.events() {
		if c, ok := x.Payload.(*events.RequestCancelled); ok && c.Handle == h.ID() {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d request.cancelled recorded, want 1", n)
	}
}

// A registration append that outlives RegisterTimeout: the start fails
// with ErrRegisterTimeout and nothing is sent; once the append returns,
// a durable registration is followed by request.cancelled{register_timeout},
// and a failed one leaves neither.
func TestRequestRegisterTimeout(t *testing.T) {
	for _, fails := range []bool{false, true} {
		t.Run(map[bool]string{false: "durable_late", true: "failed_late"}[fails], func(t *testing.T) {
			p := newPolicyEnv(t, nil)
			capa := p.open("s1").Capability()
			ctx := ctxT(t, 30*time.Second)
			o, err := capa.NewOwner(ctx)
			if err != nil {
				t.Fatal(err)
			}
			hold := make(chan struct{})
			p.l.setBefore(func(ds []events.Draft) {
				if _, ok := ds[0].Payload.(*events.RequestRegistered); ok {
					<-hold
				}
			})
			hs := make(chan *ResourceHandle, 1)
			p.m.testHookRegister = func(h *ResourceHandle) { hs <- h }
			_, err = capa.ReadResource(ctx, o, "fs", "fake://gate/late", RequestOptions{Budget: 10 * time.Second, RegisterTimeout: 100 * time.Millisecond})
			if !errors.Is(err, ErrRegisterTimeout) {
				t.Fatalf("start: %v", err)
			}
			h := <-hs
			if fails {
				e := errors.New("append refused")
				p.l.fail.Store(&e)
			}
			close(hold)
			<-h.Done()
			p.l.fail.Store(nil)
			p.l.setBefore(func([]events.Draft) {})
			var reg, canc events.Seq
			for _, x := range p.events() {
				switch pl := x.Payload.(type) {
				case *events.RequestRegistered:
					if pl.Handle == h.ID() {
						reg = x.Seq
					}
				case *events.RequestCancelled:
					if pl.Handle == h.ID() {
						if pl.Reason != "register_timeout" || !pl.LocalSettled {
							t.Fatalf("settlement %+v", pl)
						}
						canc = x.Seq
					}
				case *events.RequestDispatched, *events.RequestCompleted:
					t.Fatalf("something was sent: %T", pl)
				}
			}
			switch {
			case fails && (reg != 0 || canc != 0):
				t.Fatalf("failed registration: registered at %d, cancelled at %d", reg, canc)
			case !fails && (reg == 0 || canc <= reg):
				t.Fatalf("late registration: registered at %d, cancelled at %d", reg, canc)
			}
			if len(h.WireIDs()) != 0 {
				t.Fatal("wire ids on a request never sent")
			}
			if _, err := o.End(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
