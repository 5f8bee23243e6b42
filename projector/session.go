package projector

import "github.com/leaseledger/leaseledger/events"

// Session is an open session scope: recorded by session.opened and not
// ended yet. session.ended drops it, so the table is bounded by the open
// sessions, not by history (an ended session's detail stays in the log).
// A session whose end was never recorded (its host died) stays open here
// until a session.ended or a new session.opened of the same id.
type Session struct {
	ID string `json:"session"`
	// Principal is the access token or tenant name that opened the
	// session; empty when the host had none.
	Principal string                  `json:"principal,omitempty"`
	Transport events.SessionTransport `json:"transport"`
	OpenedSeq uint64                  `json:"opened_seq"`
	OpenedAt  events.Instant          `json:"opened_at"`
	// Reopened counts session.opened events of this id that arrived while
	// it was open (its earlier end was never recorded); the fields above
	// are the latest opening's.
	Reopened uint64 `json:"reopened,omitempty"`
	// LogLevel is the MCP logging level the session set last
	// (session.log_level) since its latest opening; absent when none.
	LogLevel events.LogLevel `json:"log_level,omitempty"`
	// Access counts the decisions of the access policy made for the
	// session since its latest opening (access.decided, and its tool calls
	// decided under a policy set), by action, outcome and deciding policy;
	// absent before the first. They leave with the session, like its row:
	// each activation keeps its own, and the log every decision.
	Access *AccessCounts `json:"access,omitempty"`
}

// Session returns the open session id.
func (s *State) Session(id string) (Session, bool) {
	x, ok := s.sessions[id]
	if !ok {
		return Session{}, false
	}
	return *x, true
}

// Sessions returns every open session, sorted by id.
func (s *State) Sessions() []Session {
	out := make([]Session, 0, len(s.sessions))
	for _, k := range sortedKeys(s.sessions) {
		out = append(out, *s.sessions[k])
	}
	return out
}

// sessionOpened records an open session (e.session); an event without a
// session is unattributable.
func (s *State) sessionOpened(e *event, p *events.SessionOpened) {
	if e.session == "" {
		s.anomalies.Unattributed++
		return
	}
	x := &Session{ID: e.session, Principal: p.Principal, Transport: p.Transport, OpenedSeq: e.seq, OpenedAt: events.Instant{Time: e.time}}
	if old, ok := s.sessions[e.session]; ok {
		x.Reopened = old.Reopened + 1
	}
	s.sessions[e.session] = x
}

// sessionLogLevel records the level a session set (e.session): on the
// session when it is open, and on its own live leases (the runtime sends
// it to those, and to every lease acquired for the session later:
// leaseAcquiring copies it; shared leases are never sent it). An event
// without a session is unattributable.
func (s *State) sessionLogLevel(e *event, p *events.SessionLogLevel) {
	if e.session == "" {
		s.anomalies.Unattributed++
		return
	}
	if x := s.sessions[e.session]; x != nil {
		x.LogLevel = p.Level
	}
	for k, l := range s.leases {
		if k.Session == e.session && !l.Shared && l.Live() {
			l.LogLevel = p.Level
		}
	}
}
