package runtime

import (
	"context"
	"errors"
	"sync"

	"github.com/leaseledger/leaseledger/events"
)

// Owner owns resource request handles for one agent turn or task. The host
// creates it (NewOwner) and ends it explicitly (End); the end of the
// context given to NewOwner ends it too. Its end settles exactly its
// unsettled handles through the same path as Cancel (reason owner_ended),
// without closing the lease's client: other owners' handles on the same
// lease go on. It is safe for concurrent use.
type Owner struct {
	m       *Manager
	session string
	id      string

	mu      sync.Mutex
	stop    func() bool // the AfterFunc's stop, set under mu (nil until then)
	handles map[string]*ResourceHandle
	ended   bool

	endOnce sync.Once
	endDone chan struct{}
	endRep  OwnerReport
	endErr  error
}

// OwnerReport is what an owner's end did: the cancel report of every
// handle it settled (handles completed before are not listed).
type OwnerReport struct {
	Owner   string
	Settled []CancelReport
}

// NewOwner creates an owner of this session's resource requests; ctx is
// the turn's (or task's) context: when it ends, the owner ends as if End
// had been called (observed with context.AfterFunc: no goroutine waits
// for it). The session must not have ended (ErrSessionEnded).
func (c LeaseCapability) NewOwner(ctx context.Context) (*Owner, error) {
	c.m.mu.Lock()
	ended, closed := c.st.ended, c.m.closed
	c.m.mu.Unlock()
	switch {
	case closed:
		return nil, newErr("owner", &leaseKey{session: c.st.id}, ErrClosed, nil)
	case ended:
		return nil, newErr("owner", &leaseKey{session: c.st.id}, ErrSessionEnded, nil)
	}
	a := newActivationID()
	o := &Owner{m: c.m, session: c.st.id, id: "own-" + a[4:], handles: map[string]*ResourceHandle{}, endDone: make(chan struct{})}
	// With ctx already done the callback runs at once, concurrently with
	// this assignment: End reads stop under o.mu (nil: not assigned yet).
	stop := context.AfterFunc(ctx, func() { _, _ = o.End(context.WithoutCancel(ctx)) })
	o.mu.Lock()
	o.stop = stop
	o.mu.Unlock()
	return o, nil
}

// ID is the owner id recorded in request.registered and
// request.owner_ended.
func (o *Owner) ID() string { return o.id }

// Ended is closed once the owner's end is recorded.
func (o *Owner) Ended() <-chan struct{} { return o.endDone }

// Handle returns the owner's unsettled handle with id; ErrUnknownHandle
// when it has none (never started, another owner's, or already settled).
func (o *Owner) Handle(id string) (*ResourceHandle, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if h := o.handles[id]; h != nil {
		return h, nil
	}
	return nil, newErr("request", &leaseKey{session: o.session}, ErrUnknownHandle, nil)
}

func (o *Owner) isEnded() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ended
}

// add registers h with o unless o ended or holds MaxOwnerHandles.
func (o *Owner) add(h *ResourceHandle) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.ended:
		return h.errorOf(ErrOwnerEnded, nil)
	case len(o.handles) >= MaxOwnerHandles:
		e := h.errorOf(ErrTooManyRequests, nil)
		e.Count = MaxOwnerHandles
		return e
	}
	o.handles[h.id] = h
	return nil
}

// remove forgets a settled handle (the owner's end keeps its snapshot).
func (o *Owner) remove(h *ResourceHandle) {
	o.mu.Lock()
	if !o.ended {
		delete(o.handles, h.id)
	}
	o.mu.Unlock()
}

// End ends the owner once: every unsettled handle is settled through the
// cancel path (reason owner_ended), in parallel, each with its report;
// handles already completing are awaited until their completion is
// recorded; then request.owner_ended{handles_settled} is recorded. Later
// calls return the same report. The error joins what failed to record.
func (o *Owner) End(ctx context.Context) (OwnerReport, error) {
	o.endOnce.Do(func() {
		defer close(o.endDone)
		o.mu.Lock()
		if o.stop != nil {
			o.stop()
		}
		o.ended = true
		hs := make([]*ResourceHandle, 0, len(o.handles))
		for _, h := range o.handles {
			hs = append(hs, h)
		}
		o.mu.Unlock()
		reps := make([]CancelReport, len(hs))
		errs := make([]error, len(hs))
		var wg sync.WaitGroup
		for i, h := range hs {
			wg.Go(func() { reps[i], errs[i] = h.cancelAs(ctx, reasonOwnerEnded, settleOwnerEnded) })
		}
		wg.Wait()
		o.endRep.Owner = o.id
		var failed []error
		for i := range hs {
			if reps[i].Settlement == SettlementSettled && reps[i].Reason == reasonOwnerEnded {
				o.endRep.Settled = append(o.endRep.Settled, reps[i])
			}
			if errs[i] != nil && errors.Is(errs[i], ErrLedger) {
				failed = append(failed, errs[i])
			}
		}
		err := o.m.emitFact(ctx, events.Draft{Session: o.session, Payload: &events.RequestOwnerEnded{Owner: o.id, HandlesSettled: len(o.endRep.Settled)}})
		o.endErr = errors.Join(append(failed, err)...)
		o.mu.Lock()
		o.handles = nil
		o.mu.Unlock()
	})
	<-o.endDone
	return o.endRep, o.endErr
}
