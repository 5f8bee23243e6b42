package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/live"
)

// reasonHostLost is the lease.terminated reason recoverPrevious records:
// the serve that held the lease is gone (killed, crashed) and a new one
// started on its ledger.
const reasonHostLost = "host_lost"

// recoveryReport says what recoverPrevious recorded.
type recoveryReport struct {
	sessions, leases, lost int
}

// orphan is a live lease of an MCP session a previous serve left open.
type orphan struct {
	lease    projector.Lease
	guardian bool // a guardian child of its activation has no final evidence
}

// recoverPrevious records, before the runtime starts, what a previous
// serve left behind when it ended without shutting down (kill -9, a
// crash, power loss): its MCP sessions (session.opened with transport
// mcp_http — only serve's gateway opens those) that the projection still
// shows open, and their live leases. The guardians saw that serve die and
// ended their servers, but nobody could receive the receipts: for each
// such lease it appends lease.terminated{host_lost} and, when a guardian
// child of the activation has no final evidence, guardian.lost{helper_lost}
// (the link to the helper was lost with its host); then session.ended.
// Nothing is confirmed by this: the activations stay unconfirmed, with the
// helper_lost reason, and their close was never run ("not_closed").
//
// Sessions of other hosts (embedded sessions appending over the bus) and
// shared leases are left alone: they may still be running elsewhere.
func recoverPrevious(ctx context.Context, proj *live.Projection) (recoveryReport, error) {
	var sessions []string
	bySession := map[string][]orphan{}
	err := proj.View(func(s *projector.State) {
		for _, se := range s.Sessions() {
			if se.Transport == events.SessionMCPHTTP {
				sessions = append(sessions, se.ID)
				bySession[se.ID] = nil
			}
		}
		for _, l := range s.Leases() {
			if _, ours := bySession[l.KeySession]; !ours || !l.Live() {
				continue
			}
			o := orphan{lease: *l}
			if a, ok := s.Activation(l.Activation); ok {
				for _, r := range a.Evidence.Tracked() {
					if r.Kind == projector.ResourceGuardianChild && r.Status != projector.StatusConfirmed && r.Status != projector.StatusLost {
						o.guardian = true
					}
				}
			}
			bySession[l.KeySession] = append(bySession[l.KeySession], o)
		}
	})
	if err != nil {
		return recoveryReport{}, err
	}
	l := proj.Ledger()
	var rep recoveryReport
	for _, session := range sessions {
		var drafts []events.Draft
		for _, o := range bySession[session] {
			d := events.Draft{Activation: o.lease.Activation, Session: session, Server: o.lease.Server}
			d.Payload = &events.LeaseTerminated{Reason: reasonHostLost}
			drafts = append(drafts, d)
			if o.guardian {
				d.Payload = &events.GuardianLost{Reason: events.LostHelper, TargetPID: o.lease.PID}
				drafts = append(drafts, d)
				rep.lost++
			}
		}
		drafts = append(drafts, events.Draft{Session: session, Payload: &events.SessionEnded{LeasesTerminated: len(bySession[session])}})
		if _, err := l.Append(ctx, drafts...); err != nil {
			return rep, fmt.Errorf("recording what a previous serve left (session %s): %w", session, err)
		}
		rep.sessions++
		rep.leases += len(bySession[session])
	}
	return rep, nil
}

func (r recoveryReport) String() string {
	return strconv.Itoa(r.sessions) + " MCP session(s) and " + strconv.Itoa(r.leases) + " lease(s) a previous serve left open recorded as ended (host_lost; " +
		strconv.Itoa(r.lost) + " guardian(s) helper_lost, unconfirmed)"
}
