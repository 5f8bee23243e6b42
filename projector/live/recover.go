package live

// Crash recovery: what a host's previous run left open when it ended
// without shutting down, recorded by the next run before it starts its
// runtime.

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
)

// Ownership is the contract by which a restarted host tells which of its
// ledger's sessions and leases a previous run of it left: the ledger does
// not record which process opened a session, so the host says which
// sessions are its own by their transport (session.opened's), and whether
// the ledger's shared leases are its own (shared leases are keyed by
// events.SharedSessionKey, not by the session that acquired them, so the
// ledger cannot tell which host started one).
//
// A host must claim only what no other process appends to its ledger:
// whatever it claims, Recover ends. A gateway host (serve, or a host that
// embeds runtime and gateway) owns its mcp_http sessions and its shared
// leases only when it runs its gateway on a ledger of its own — one that
// embeds a gateway and appends over serve's bus (busclient.Appender) would
// have its sessions and shared leases ended by serve's next start.
type Ownership struct {
	// Transports are the session transports whose sessions the host owns:
	// every session opened with one of them and still open is the
	// previous run's. Sessions of other transports are left alone: they
	// may still be running elsewhere.
	Transports []events.SessionTransport
	// Shared says whether the host owns the ledger's shared leases.
	Shared bool
}

// GatewayOwnership is the ownership of a host that runs a gateway on a
// ledger of its own, as `leaseledger serve` does: its mcp_http sessions
// (only its gateway opens those there) and its shared leases (its runtime
// runs the shared servers of its mcp_http sessions).
func GatewayOwnership() Ownership {
	return Ownership{Transports: []events.SessionTransport{events.SessionMCPHTTP}, Shared: true}
}

// owns reports whether sessions of transport t are the host's.
func (o Ownership) owns(t events.SessionTransport) bool { return slices.Contains(o.Transports, t) }

// RecoveryReport says what Recover recorded.
type RecoveryReport struct {
	// Sessions counts the open sessions ended (session.ended).
	Sessions int
	// Leases counts the live leases ended (lease.terminated{host_lost}).
	Leases int
	// Lost counts the guardian children recorded lost
	// (guardian.lost{helper_lost}).
	Lost int
}

// Any reports whether Recover recorded anything.
func (r RecoveryReport) Any() bool { return r.Sessions+r.Leases+r.Lost > 0 }

// orphan is an activation a previous run left unfinished: its lease still
// live (terminate), a guardian child of it without final evidence (lost,
// targetPID), or both.
type orphan struct {
	activation, server string
	terminate, lost    bool
	targetPID          int
}

// Recover records, before the host starts its runtime on p's ledger, what
// a previous run of the host left behind when it ended without shutting
// down (kill -9, a crash, power loss). The guardians saw that host die and
// ended their servers, but nobody could receive the receipts. With own
// naming what the host owns (see Ownership), it records:
//
//   - for every owned session the projection still shows open:
//     lease.terminated{host_lost} for each live lease keyed by it, then
//     session.ended;
//   - for every activation of an owned session, open or already ended (a
//     kill during the session's end, after session.ended and
//     lease.terminated but before the guardian's receipt), whose guardian
//     child has no final evidence: guardian.lost{helper_lost} (the link to
//     the helper was lost with its host);
//   - when own.Shared: lease.terminated{host_lost} for every live shared
//     lease, and guardian.lost{helper_lost} for every shared activation,
//     live or ended, whose guardian has no final evidence.
//
// Nothing is confirmed by this: the activations stay unconfirmed, with the
// helper_lost reason, and their close was never run ("not_closed"). Each
// session's events are one append, in session order. A second Recover
// finds nothing left and records nothing. Recover must run before the
// host's runtime appends: a session the new run opened would be ended.
func Recover(ctx context.Context, p *Projection, own Ownership) (RecoveryReport, error) {
	open := map[string]bool{} // open owned sessions
	bySession := map[string][]orphan{}
	var unknown []string // ended sessions with a pending guardian: transport read from the ledger
	err := p.View(func(s *projector.State) {
		for _, se := range s.Sessions() {
			if own.owns(se.Transport) {
				open[se.ID] = true
				bySession[se.ID] = nil
			}
		}
		live := map[string]projector.Lease{} // activation → its live lease
		for _, l := range s.Leases() {
			if l.Live() && (open[l.KeySession] || l.Shared && own.Shared) {
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
			case isLive, open[key]:
			case key == events.SharedSessionKey:
				if !own.Shared {
					continue
				}
			case !seenUnknown[key]:
				if _, other := s.Session(key); other { // open, a transport not owned
					continue
				}
				seenUnknown[key] = true
				unknown = append(unknown, key)
			}
			bySession[key] = append(bySession[key], o)
		}
	})
	if err != nil {
		return RecoveryReport{}, err
	}
	l := p.Ledger()
	for _, session := range unknown {
		owned, err := openedOwned(ctx, l, session, own)
		if err != nil {
			return RecoveryReport{}, err
		}
		if !owned {
			delete(bySession, session)
		}
	}
	keys := make([]string, 0, len(bySession))
	for k := range bySession {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var rep RecoveryReport
	for _, session := range keys {
		var drafts []events.Draft
		terminated := 0
		for _, o := range bySession[session] {
			d := events.Draft{Activation: o.activation, Session: session, Server: o.server}
			if o.terminate {
				d.Payload = &events.LeaseTerminated{Reason: events.TerminatedHostLost}
				drafts = append(drafts, d)
				terminated++
			}
			if o.lost {
				d.Payload = &events.GuardianLost{Reason: events.LostHelper, TargetPID: o.targetPID}
				drafts = append(drafts, d)
				rep.Lost++
			}
		}
		if open[session] {
			drafts = append(drafts, events.Draft{Session: session, Payload: &events.SessionEnded{LeasesTerminated: terminated}})
		}
		if len(drafts) == 0 {
			continue
		}
		if _, err := l.Append(ctx, drafts...); err != nil {
			return rep, fmt.Errorf("live: recording what a previous run left (session %s): %w", session, err)
		}
		if open[session] {
			rep.Sessions++
		}
		rep.Leases += terminated
	}
	return rep, nil
}

// openedOwned reports whether the ledger records session as opened with a
// transport own names (its session.opened events).
func openedOwned(ctx context.Context, l *ledger.Ledger, session string, own Ownership) (bool, error) {
	for x, err := range l.Events(ctx, ledger.Query{Session: session, Kind: "session.opened"}) {
		if err != nil {
			return false, fmt.Errorf("live: reading session %s: %w", session, err)
		}
		pl, err := x.Payload()
		if err != nil {
			return false, fmt.Errorf("live: session %s: %w", session, err)
		}
		if o, ok := pl.(*events.SessionOpened); ok && own.owns(o.Transport) {
			return true, nil
		}
	}
	return false, nil
}
