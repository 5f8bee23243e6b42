package events

// ---- connection: owned connections and close reports ----

// ConnectionOpened records an owned connection of an activation.
type ConnectionOpened struct {
	Transport Transport `json:"transport"` // stdio, http
	Cleanup   Cleanup   `json:"cleanup"`   // verified, best_effort
	OneShot   bool      `json:"one_shot"`
}

// Kind implements [Payload].
func (*ConnectionOpened) Kind() Kind { return "connection.opened" }

// Validate implements [Payload].
func (p *ConnectionOpened) Validate() error {
	return checks{member("transport", p.Transport), member("cleanup", p.Cleanup)}.first()
}

// ConnectionPhase records a phase change: active → closing → closed.
type ConnectionPhase struct {
	Phase    Phase `json:"phase"` // closing, closed
	BudgetNS int64 `json:"budget_ns,omitempty"`
}

// Kind implements [Payload].
func (*ConnectionPhase) Kind() Kind { return "connection.phase" }

// Validate implements [Payload].
func (p *ConnectionPhase) Validate() error {
	return checks{recordedPhase("phase", p.Phase), nonNegative("budget_ns", p.BudgetNS)}.first()
}

// ConnectionBarrier records what one close obligation observed.
type ConnectionBarrier struct {
	Obligation Obligation     `json:"obligation"` // transport, workers, supervisor, http_requests
	Outcome    BarrierOutcome `json:"outcome"`    // ok, error, timeout, missing, unsupported, pending
	Detail     string         `json:"detail,omitempty"`
	ElapsedNS  int64          `json:"elapsed_ns"`
}

// Kind implements [Payload].
func (*ConnectionBarrier) Kind() Kind { return "connection.barrier" }

// Validate implements [Payload].
func (p *ConnectionBarrier) Validate() error {
	return checks{member("obligation", p.Obligation),
		member("outcome", p.Outcome),
		optCode("detail", p.Detail), nonNegative("elapsed_ns", p.ElapsedNS)}.first()
}

// ConnectionClosed records a close call's end. Repeated closes record this
// again with repeat=true; the projector keeps the first outcome.
type ConnectionClosed struct {
	ElapsedNS int64 `json:"elapsed_ns"`
	Repeat    bool  `json:"repeat"`
}

// Kind implements [Payload].
func (*ConnectionClosed) Kind() Kind { return "connection.closed" }

// Validate implements [Payload].
func (p *ConnectionClosed) Validate() error { return nonNegative("elapsed_ns", p.ElapsedNS) }
