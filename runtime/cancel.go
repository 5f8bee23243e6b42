package runtime

import (
	"context"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// Settlement is what a cancel found.
type Settlement string

// Settlements of a CancelReport.
const (
	// SettlementSettled: this cancel (or the owner's end) settled the
	// handle; its result, if one arrives, is discarded.
	SettlementSettled Settlement = "settled"
	// SettlementAlreadyCompleted: the request had completed first; the
	// result stays available to Await.
	SettlementAlreadyCompleted Settlement = "already_completed"
	// SettlementNotSent: the registration failed; nothing was sent.
	SettlementNotSent Settlement = "not_sent"
)

// CancelReport keeps apart what a cancel can know: the local settlement,
// whether the transport accepted the go-sdk's notifications/cancelled for
// the current wire id (it was handed to the runtime's connection), whether
// it was delivered to the stream (written to the child's stdin without
// error), and the server's side, which is never claimed: Remote is always
// unknown. Accepted and delivered are no when nothing needed cancelling
// on the wire (never dispatched, or the response came first), unknown when
// not observed within CancelObserveWait.
type CancelReport struct {
	Handle                string
	Reason                string
	Settlement            Settlement
	LocalSettled          bool
	WireID                string // the wire id the notification targets, when one was sent
	TransportAccepted     events.Delivery
	NotificationDelivered events.Delivery
	Remote                events.Remote
}

// Cancel settles this handle unless it is already settled: the worker's
// request is abandoned (the go-sdk retires it and sends
// notifications/cancelled for the current wire id), the worker's exit is
// awaited, and request.cancelled records the report. On a handle that
// completed first it returns SettlementAlreadyCompleted (the result stays
// available; request.cancelled{local_settled: false} records the
// attempt, once: a later Cancel returns the same report with
// ErrHandleSettled and records nothing); on a handle already cancelled
// ErrHandleSettled with the stored report, and ErrOwnerEnded when its
// owner's end settled it.
func (h *ResourceHandle) Cancel(ctx context.Context) (CancelReport, error) {
	return h.cancelAs(ctx, reasonCallerCancelled, settleCancelled)
}

// CancelWithReason is Cancel recording the caller's own reason (a code,
// events.ValidCode: "host_cancelled", "user_abort") in request.cancelled
// and the report instead of "caller_cancelled". A reason that is not a
// code, or is "owner_ended" (the owner's end's own), is ErrInvalidRequest
// and cancels nothing.
func (h *ResourceHandle) CancelWithReason(ctx context.Context, reason string) (CancelReport, error) {
	if !events.ValidCode(reason) || reason == reasonOwnerEnded {
		return CancelReport{}, h.errorOf(ErrInvalidRequest, nil)
	}
	return h.cancelAs(ctx, reason, settleCancelled)
}

// cancelAs settles h by cancel or owner end (kind).
func (h *ResourceHandle) cancelAs(ctx context.Context, reason string, kind settleKind) (CancelReport, error) {
	h.mu.Lock()
	switch h.settle {
	case settleNone:
		h.settle = kind
		h.mu.Unlock()
	case settleCompleted:
		h.mu.Unlock()
		<-h.done
		rep := CancelReport{Handle: h.id, Reason: reason, Settlement: SettlementAlreadyCompleted,
			TransportAccepted: events.DeliveryNo, NotificationDelivered: events.DeliveryNo, Remote: events.RemoteUnknown}
		if kind == settleCancelled && !h.owner.isEnded() {
			// The first attempt is recorded; a repeated one is refused.
			h.logMu.Lock()
			again := h.cancelTried
			if !again {
				h.cancelTried = true
				h.l.m.keep(h.l.m.emitFact(ctx, h.draft(rep.payload())))
			}
			h.logMu.Unlock()
			if again {
				return rep, h.errorOf(ErrHandleSettled, nil)
			}
		}
		return rep, nil
	default:
		done := h.done
		h.mu.Unlock()
		<-done
		h.mu.Lock()
		rep, ended := *h.report, h.settle == settleOwnerEnded
		h.mu.Unlock()
		if ended {
			return rep, h.errorOf(ErrOwnerEnded, nil)
		}
		return rep, h.errorOf(ErrHandleSettled, nil)
	}
	// This call settles h. Wait for the registration's outcome first, so
	// the cancellation is recorded after it.
	<-h.regDone
	h.mu.Lock()
	registered := h.registered
	h.mu.Unlock()
	if h.cancel != nil {
		h.cancel()
	}
	rep := CancelReport{Handle: h.id, Reason: reason, Settlement: SettlementSettled, LocalSettled: true,
		TransportAccepted: events.DeliveryUnknown, NotificationDelivered: events.DeliveryUnknown, Remote: events.RemoteUnknown}
	t := time.NewTimer(CancelObserveWait)
	defer t.Stop()
	exited := true
	select {
	case <-h.workerDone:
	case <-t.C:
		exited = false
	}
	h.mu.Lock()
	nwires, got := len(h.wires), h.gotResult
	if nwires > 0 {
		rep.WireID = h.wires[nwires-1]
	}
	h.mu.Unlock()
	switch {
	case !exited:
	case nwires == 0 || got:
		// Nothing was on the wire, or its response came first: the go-sdk
		// sends no notification.
		rep.WireID = ""
		rep.TransportAccepted, rep.NotificationDelivered = events.DeliveryNo, events.DeliveryNo
	default:
		select {
		case <-h.note.ch:
		case <-t.C:
		}
		h.mu.Lock()
		if h.note.seen {
			rep.TransportAccepted = events.DeliveryYes
			select {
			case <-h.note.ch:
				rep.NotificationDelivered = events.DeliveryNo
				if h.note.delivered {
					rep.NotificationDelivered = events.DeliveryYes
				}
			default:
			}
		}
		h.mu.Unlock()
	}
	h.logMu.Lock()
	var err error
	if registered { // a registration that never became durable is not settled in the events
		drafts := append(h.wireDraftsLocked(), h.draft(rep.payload()))
		err = h.l.m.emitFact(ctx, drafts...)
	}
	h.final = true
	h.logMu.Unlock()
	h.mu.Lock()
	h.report = &rep
	h.closeProgressLocked()
	h.mu.Unlock()
	h.l.reqs.untrack(h)
	close(h.done)
	if kind == settleCancelled {
		h.owner.remove(h)
	}
	return rep, err
}

func (r CancelReport) payload() *events.RequestCancelled {
	return &events.RequestCancelled{Handle: r.Handle, Reason: r.Reason, LocalSettled: r.LocalSettled,
		TransportAccepted: r.TransportAccepted, NotificationDelivered: r.NotificationDelivered, Remote: r.Remote}
}
