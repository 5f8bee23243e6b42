package events

// ---- http: HTTP resources ----

// HTTPRegistered records an HTTP allocation registered before the request
// begins. Ref is the resource reference within the activation.
type HTTPRegistered struct {
	Ref    string     `json:"ref"`
	Scope  string     `json:"scope"` // aggregate scope, e.g. "request", "sse", "jwks"
	Method HTTPMethod `json:"method"`
	Origin string     `json:"origin"`
}

// Kind implements [Payload].
func (*HTTPRegistered) Kind() Kind { return "http.registered" }

// Validate implements [Payload].
func (p *HTTPRegistered) Validate() error {
	return checks{id("ref", p.Ref), code("scope", p.Scope), member("method", p.Method), text("origin", p.Origin, true)}.first()
}

// MaxRedirectHops is the number of 307 hops a request may follow.
const MaxRedirectHops = 3

// HTTPRedirect records one redirect hop; the hop is its own tracked resource.
type HTTPRedirect struct {
	Ref        string `json:"ref"`
	Hop        int    `json:"hop"`
	HopRef     string `json:"hop_ref"`
	Status     int    `json:"status"`
	Origin     string `json:"origin"`
	SameOrigin bool   `json:"same_origin"`
}

// Kind implements [Payload].
func (*HTTPRedirect) Kind() Kind { return "http.redirect" }

// Validate implements [Payload].
func (p *HTTPRedirect) Validate() error {
	return checks{id("ref", p.Ref), between("hop", int64(p.Hop), 1, MaxRedirectHops), id("hop_ref", p.HopRef),
		between("status", int64(p.Status), 300, 399), text("origin", p.Origin, true)}.first()
}

// HTTPCompleted records the response the request ended with.
type HTTPCompleted struct {
	Ref       string      `json:"ref"`
	Status    int         `json:"status"`  // 0 when no response arrived
	Outcome   HTTPOutcome `json:"outcome"` // ok, error, timeout, aborted
	BodyBytes int64       `json:"body_bytes"`
	// Detail says why a request did not end ok (a code: connect_timeout,
	// receive_timeout, request_timeout, redirect_refused, …); empty when ok.
	Detail string `json:"detail,omitempty"`
}

// Kind implements [Payload].
func (*HTTPCompleted) Kind() Kind { return "http.completed" }

// Validate implements [Payload].
func (p *HTTPCompleted) Validate() error {
	return checks{id("ref", p.Ref), between("status", int64(p.Status), 0, 599),
		member("outcome", p.Outcome), nonNegative("body_bytes", p.BodyBytes), optCode("detail", p.Detail)}.first()
}

// HTTPBarrier records what a request-completion barrier returned. Ref names
// the resource it settles: a request's Ref, or a redirect hop's HopRef
// (every hop is its own tracked resource and needs its own barrier).
type HTTPBarrier struct {
	Ref     string             `json:"ref"`
	Outcome HTTPBarrierOutcome `json:"outcome"` // ok, error, timeout, unsupported
}

// Kind implements [Payload].
func (*HTTPBarrier) Kind() Kind { return "http.barrier" }

// Validate implements [Payload].
func (p *HTTPBarrier) Validate() error {
	return checks{id("ref", p.Ref), member("outcome", p.Outcome)}.first()
}

// HTTPWorkerDown records the owning worker's observed end.
type HTTPWorkerDown struct {
	Ref    string `json:"ref"`
	Worker string `json:"worker"`
	Reason string `json:"reason"`
}

// Kind implements [Payload].
func (*HTTPWorkerDown) Kind() Kind { return "http.worker_down" }

// Validate implements [Payload].
func (p *HTTPWorkerDown) Validate() error {
	return checks{id("ref", p.Ref), id("worker", p.Worker), code("reason", p.Reason)}.first()
}

// HTTPLost records evidence that can no longer be obtained for a resource.
type HTTPLost struct {
	Ref    string `json:"ref"`
	Reason string `json:"reason"`
}

// Kind implements [Payload].
func (*HTTPLost) Kind() Kind { return "http.lost" }

// Validate implements [Payload].
func (p *HTTPLost) Validate() error {
	return checks{id("ref", p.Ref), code("reason", p.Reason)}.first()
}
