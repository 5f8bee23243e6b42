package projector

import "github.com/leaseledger/leaseledger/events"

// RelayCounts counts an activation's relays (relay.completed: the
// server→client requests of its lease relayed to a session's client, or
// refused) by outcome. Nothing of a relay's content is in the log, so
// nothing of it is here.
type RelayCounts struct {
	Accepted  uint64 `json:"accepted,omitempty"`
	Declined  uint64 `json:"declined,omitempty"`
	Cancelled uint64 `json:"cancelled,omitempty"`
	Error     uint64 `json:"error,omitempty"`
	TimedOut  uint64 `json:"timed_out,omitempty"`
	Refused   uint64 `json:"refused,omitempty"`
}

// Total is the number of relays counted.
func (c *RelayCounts) Total() uint64 {
	if c == nil {
		return 0
	}
	return c.Accepted + c.Declined + c.Cancelled + c.Error + c.TimedOut + c.Refused
}

// add counts one relay that ended with outcome o.
func (c *RelayCounts) add(o events.RelayOutcome) {
	switch o {
	case events.RelayAccepted:
		c.Accepted++
	case events.RelayDeclined:
		c.Declined++
	case events.RelayCancelled:
		c.Cancelled++
	case events.RelayError:
		c.Error++
	case events.RelayTimedOut:
		c.TimedOut++
	case events.RelayRefused:
		c.Refused++
	}
}

// relayCopy returns a copy of c for a report or a snapshot; nil when no
// relay was counted.
func relayCopy(c *RelayCounts) *RelayCounts {
	if c.Total() == 0 {
		return nil
	}
	x := *c
	return &x
}
