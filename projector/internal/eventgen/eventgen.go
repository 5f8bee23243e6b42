// Package eventgen builds sealed events for the projector's tests and
// benchmarks: a chain sealer (what the ledger's committer does, without
// storage) and a realistic workload of owned HTTP requests, guardian
// receipts, calls and close barriers.
package eventgen

import (
	"fmt"
	"strings"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/oklog/ulid/v2"
)

// Digest is a valid SHA-256 hex digest for payload fields.
var Digest = strings.Repeat("ab", 32)

// Chain seals drafts into consecutive envelopes, as the ledger does.
type Chain struct {
	seq  uint64
	prev events.Hash
	t    time.Time
}

// NewChain starts a chain at seq 1 whose event times begin at start and
// advance by a millisecond per event.
func NewChain(start time.Time) *Chain { return &Chain{t: start.UTC()} }

// Seal validates and seals d as the next event. It panics on an invalid
// draft: generators must only produce valid ones.
func (c *Chain) Seal(d events.Draft) (events.Envelope, []byte) {
	p, err := events.Prepare(d)
	if err != nil {
		panic(fmt.Sprintf("eventgen: invalid draft %T: %v", d.Payload, err))
	}
	c.seq++
	c.t = c.t.Add(time.Millisecond)
	var id ulid.ULID
	id[15] = byte(c.seq)
	id[14] = byte(c.seq >> 8)
	id[13] = byte(c.seq >> 16)
	id[12] = byte(c.seq >> 24)
	env, raw := events.Seal(p, events.Seq(c.seq), id, c.t, c.prev)
	c.prev = env.Hash
	return env, raw
}

// D is shorthand for a draft of activation a (session s-1, server srv).
func D(a string, p events.Payload) events.Draft {
	return events.Draft{Activation: a, Session: "s-1", Server: "srv", Payload: p}
}

// ConfirmedRequest returns the four events of one HTTP request of scope
// that ends confirmed: registered, completed, barrier ok, worker down.
func ConfirmedRequest(a, ref, scope string) []events.Draft {
	return []events.Draft{
		D(a, &events.HTTPRegistered{Ref: ref, Scope: scope, Method: events.HTTPPost, Origin: "https://mcp.example.com"}),
		D(a, &events.HTTPCompleted{Ref: ref, Status: 200, Outcome: events.HTTPOK, BodyBytes: 512}),
		D(a, &events.HTTPBarrier{Ref: ref, Outcome: events.HTTPBarrierOK}),
		D(a, &events.HTTPWorkerDown{Ref: ref, Worker: "w-" + ref, Reason: "normal"}),
	}
}

// Workload returns about n drafts spread over activations: each
// activation acquires a lease, opens a connection, makes HTTP requests and
// tool calls, and at its end closes with all barriers and a guardian
// receipt. It is the replay benchmark's log.
func Workload(n, activations int) []events.Draft {
	out := make([]events.Draft, 0, n+activations*16)
	per := max(n/activations, 32)
	for ai := 0; ai < activations && len(out) < n; ai++ {
		a := fmt.Sprintf("act-%06d", ai)
		sess := fmt.Sprintf("s-%d", ai%97)
		d := func(p events.Payload) events.Draft {
			return events.Draft{Activation: a, Session: sess, Server: "github", Payload: p}
		}
		pid := 1000 + ai
		out = append(out,
			d(&events.LeaseAcquiring{KeySession: sess, Fingerprint: Digest}),
			d(&events.LeaseChildStarted{PID: pid, GuardianPID: pid + 1, Cleanup: events.CleanupVerified}),
			d(&events.GuardianStarted{GuardianPID: pid + 1, TargetPID: pid, HelperVersion: "leaseledger-guardian/1", PIDFD: true}),
			d(&events.LeaseListingPinned{ToolCount: 12, Pages: 1, ListingBytes: 4096, ListingDigest: Digest}),
			d(&events.LeaseAcquired{Fingerprint: Digest, DurationNS: 1000}),
			d(&events.ConnectionOpened{Transport: events.TransportHTTP, Cleanup: events.CleanupVerified, OneShot: true}),
		)
		body := per - 16
		for i := 0; i < body; {
			switch i % 12 {
			case 0, 4:
				ref := fmt.Sprintf("h-%d", i)
				for _, x := range ConfirmedRequest(a, ref, "request") {
					x.Session = sess
					x.Server = "github"
					out = append(out, x)
				}
				i += 4
			default:
				call := fmt.Sprintf("c-%d", i)
				out = append(out,
					d(&events.CallAdmitted{CallID: call, Tool: "search_issues", Digest: Digest}),
					d(&events.CallFinished{CallID: call, Tool: "search_issues", Outcome: events.CallOK, DurationNS: 1000,
						ArgsBytes: 10, ArgsSHA256: Digest, ResultBytes: 100, ResultSHA256: Digest}))
				i += 2
			}
		}
		now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
		out = append(out,
			d(&events.ConnectionPhase{Phase: events.PhaseClosing, BudgetNS: 5e9}),
			d(&events.GuardianSignal{TargetPID: pid, Signal: events.SignalTERM, At: events.At(now), Alive: true}),
			d(&events.GuardianReaped{TargetPID: pid, ExitCode: -1, Signal: string(events.SignalTERM), At: events.At(now)}),
			d(&events.GuardianReceipt{HelperVersion: "leaseledger-guardian/1", TargetPID: pid, Reaped: true, ExitCode: -1,
				Signal: string(events.SignalTERM), StdinClosedAt: events.At(now), StdoutClosedAt: events.At(now), StderrClosedAt: events.At(now),
				EOFGraceNS: 1e9, TermSentAt: events.At(now), HelperExitCode: 0}),
			d(&events.ConnectionBarrier{Obligation: events.ObligationTransport, Outcome: events.BarrierOK, ElapsedNS: 10}),
			d(&events.ConnectionBarrier{Obligation: events.ObligationWorkers, Outcome: events.BarrierOK, ElapsedNS: 10}),
			d(&events.ConnectionBarrier{Obligation: events.ObligationSupervisor, Outcome: events.BarrierOK, ElapsedNS: 10}),
			d(&events.ConnectionBarrier{Obligation: events.ObligationHTTPRequests, Outcome: events.BarrierOK, ElapsedNS: 10}),
			d(&events.ConnectionPhase{Phase: events.PhaseClosed}),
			d(&events.ConnectionClosed{ElapsedNS: 100}),
			d(&events.LeaseTerminated{Reason: events.TerminatedSessionEnded}),
		)
	}
	return out
}
