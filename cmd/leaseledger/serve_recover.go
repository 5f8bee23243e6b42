package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/live"
	"github.com/leaseledger/leaseledger/runtime"
)

// reasonHostLost is the lease.terminated reason recoverPrevious records:
// the serve that held the lease is gone (killed, crashed) and a new one
// started on its ledger.
const reasonHostLost = "host_lost"

// recoveryReport says what recoverPrevious recorded.
type recoveryReport struct {
	sessions, leases, lost int
}

// orphan is an activation a previous serve left unfinished: its lease
// still live (terminate), a guardian child of it without final evidence
// (lost, targetPID), or both.
type orphan struct {
	activation, server string
	terminate, lost    bool
	targetPID          int
}

// recoverPrevious records, before the runtime starts, what a previous
// serve left behind when it ended without shutting down (kill -9, a
// crash, power loss). The guardians saw that serve die and ended their
// servers, but nobody could receive the receipts. It covers:
//
//   - the MCP sessions the projection still shows open with transport
//     mcp_http: session.ended, after lease.terminated{host_lost} for each
//     live lease keyed by them;
//   - every activation of an mcp_http session, open or already ended (a
//     kill during the session's end, after session.ended and
//     lease.terminated but before the guardian's receipt), whose guardian
//     child has no final evidence: guardian.lost{helper_lost} (the link to
//     the helper was lost with its host);
//   - shared leases: every live shared lease gets lease.terminated
//     {host_lost}, and guardian.lost{helper_lost} when its guardian has no
//     final evidence, as do ended shared leases' pending guardians. Shared
//     leases are keyed by runtime.SharedSessionKey, not by the session that
//     acquired them, so the ledger cannot tell which host started one:
//     serve, whose runtime runs shared servers for its mcp_http sessions,
//     treats every shared lease of its data dir as its own.
//
// Nothing is confirmed by this: the activations stay unconfirmed, with the
// helper_lost reason, and their close was never run ("not_closed").
//
// Serve owns the mcp_http sessions and the shared leases of its data dir:
// only serve's gateway opens mcp_http sessions there. A host that embeds a
// gateway and appends over serve's bus (busclient.Appender) would have its
// mcp_http sessions and shared leases recorded host_lost by serve's next
// start; such a host must run its gateway on a ledger of its own (see
// docs/operations.md). Sessions of other transports are left alone: they
// may still be running elsewhere.
func recoverPrevious(ctx context.Context, proj *live.Projection) (recoveryReport, error) {
	open := map[string]bool{} // open mcp_http sessions
	bySession := map[string][]orphan{}
	var unknown []string // ended sessions with a pending guardian: transport read from the ledger
	err := proj.View(func(s *projector.State) {
		for _, se := range s.Sessions() {
			if se.Transport == events.SessionMCPHTTP {
				open[se.ID] = true
				bySession[se.ID] = nil
			}
		}
		live := map[string]projector.Lease{} // activation → its live lease
		for _, l := range s.Leases() {
			if l.Live() && (open[l.KeySession] || l.Shared) {
				live[l.Activation] = *l
			}
		}
		seenUnknown := map[string]bool{}
		// The activations in memory suffice: one with a live lease or an
		// unfrozen guardian is live, never retired to the snapshot's parts.
		for _, id := range s.ActivationIDs() {
			a, ok := s.Activation(id)
			if !ok {
				continue
			}
			l, isLive := live[id]
			o := orphan{activation: id, server: a.Server, terminate: isLive, targetPID: l.PID}
			for _, r := range a.Evidence.Tracked() {
				if r.Kind == projector.ResourceGuardianChild && r.Status != projector.StatusConfirmed && r.Status != projector.StatusLost {
					o.lost, o.targetPID = true, r.Facts.TargetPID
				}
			}
			if o.lost { // a frozen report takes no more evidence
				rep, _ := s.Report(id)
				o.lost = !rep.Frozen
			}
			if !o.terminate && !o.lost {
				continue
			}
			key := a.Session
			if isLive {
				key = l.KeySession
			}
			switch {
			case isLive, open[key], key == runtime.SharedSessionKey:
			case !open[key] && !seenUnknown[key]:
				if _, other := s.Session(key); other { // open, another transport
					continue
				}
				seenUnknown[key] = true
				unknown = append(unknown, key)
			}
			bySession[key] = append(bySession[key], o)
		}
	})
	if err != nil {
		return recoveryReport{}, err
	}
	l := proj.Ledger()
	for _, session := range unknown {
		mcp, err := openedOverMCP(ctx, l, session)
		if err != nil {
			return recoveryReport{}, err
		}
		if !mcp {
			delete(bySession, session)
		}
	}
	keys := make([]string, 0, len(bySession))
	for k := range bySession {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var rep recoveryReport
	for _, session := range keys {
		var drafts []events.Draft
		terminated := 0
		for _, o := range bySession[session] {
			d := events.Draft{Activation: o.activation, Session: session, Server: o.server}
			if o.terminate {
				d.Payload = &events.LeaseTerminated{Reason: reasonHostLost}
				drafts = append(drafts, d)
				terminated++
			}
			if o.lost {
				d.Payload = &events.GuardianLost{Reason: events.LostHelper, TargetPID: o.targetPID}
				drafts = append(drafts, d)
				rep.lost++
			}
		}
		if open[session] {
			drafts = append(drafts, events.Draft{Session: session, Payload: &events.SessionEnded{LeasesTerminated: terminated}})
		}
		if len(drafts) == 0 {
			continue
		}
		if _, err := l.Append(ctx, drafts...); err != nil {
			return rep, fmt.Errorf("recording what a previous serve left (session %s): %w", session, err)
		}
		if open[session] {
			rep.sessions++
		}
		rep.leases += terminated
	}
	return rep, nil
}

// openedOverMCP reports whether the ledger records session as opened by
// an MCP gateway (session.opened with transport mcp_http).
func openedOverMCP(ctx context.Context, l *ledger.Ledger, session string) (bool, error) {
	for x, err := range l.Events(ctx, ledger.Query{Session: session, Kind: "session.opened"}) {
		if err != nil {
			return false, err
		}
		p, err := x.Payload()
		if err != nil {
			return false, err
		}
		if o, ok := p.(*events.SessionOpened); ok && o.Transport == events.SessionMCPHTTP {
			return true, nil
		}
	}
	return false, nil
}

// any reports whether recoverPrevious recorded anything.
func (r recoveryReport) any() bool { return r.sessions+r.leases+r.lost > 0 }

func (r recoveryReport) String() string {
	return strconv.Itoa(r.sessions) + " MCP session(s) and " + strconv.Itoa(r.leases) + " lease(s) a previous serve left open recorded as ended (host_lost; " +
		strconv.Itoa(r.lost) + " guardian(s) helper_lost, unconfirmed)"
}
