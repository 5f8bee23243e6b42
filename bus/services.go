package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/nats-io/nats.go"
)

// Services: request/reply APIs that other packages define (the runtime's
// control API, the projection API, see package control) and the bus
// serves with the discipline of its own API: per-user request subjects
// (busclient.UserSubject) that the server's permissions let only their
// user publish to, replies to the requester's own inbox only, the per-class
// rate limits, bounded request and reply bodies, and refusals carried in
// busclient.HeaderError / HeaderErrorCode with static text.

// Access says who may call a service.
type Access int

const (
	// AccessRead services answer anonymous clients (unless
	// Options.DenyAnonymous), the read-only, the writer and the control
	// user. They must not change anything.
	AccessRead Access = iota + 1
	// AccessControl services answer the control user only
	// (Options.ControlUser): for any other user their subjects are a
	// permission violation at the server, the request never reaches the
	// handler.
	AccessControl
)

// String names an access class ("read", "control").
func (a Access) String() string {
	switch a {
	case AccessRead:
		return "read"
	case AccessControl:
		return "control"
	}
	return fmt.Sprintf("access(%d)", int(a))
}

// Handler answers one request of a service. caller is the bus user that
// sent it ("" for an anonymous client) and body the request, at most
// MaxServiceRequestBytes. It returns the reply body, at most
// MaxServiceReplyBytes. An error made by Refuse is answered with its code
// and text; any other error with a fixed text ("request failed", or
// "request timed out" when ctx's deadline passed), and logged: its text is
// never sent. ctx ends at the service's timeout or when the bus closes.
type Handler func(ctx context.Context, caller string, body []byte) ([]byte, error)

// Service is one request subject served by the bus.
type Service struct {
	// Subject is the API subject, busclient.APISubjects' prefix followed
	// by lowercase tokens ([a-z0-9_]+), e.g. "leaseledger.api.runtime.revoke".
	// Requests arrive on busclient.UserSubject(Subject, user). No subject
	// may be a prefix (in tokens) of another, nor of the bus's own
	// replay/head/append subjects: the user suffix must stay unambiguous.
	Subject string
	// Access says who may call it.
	Access Access
	// Handle answers requests; at most Limits.ServiceConcurrency of one
	// class of users run at once.
	Handle Handler
	// Timeout bounds one call (its ctx); DefaultServiceTimeout when zero.
	Timeout time.Duration
}

// Bounds of services.
const (
	// MaxServiceRequestBytes bounds one service request's body; a larger
	// one is refused (busclient.CodeBadRequest) without calling the handler.
	MaxServiceRequestBytes = 64 << 10
	// MaxServiceReplyBytes bounds one service reply's body. Handlers keep
	// their replies under it (paging or counted truncation); a larger
	// reply is never sent cut: the requester gets an error ("reply too
	// large") and the bus logs it. Start refuses services on a bus whose
	// Limits.MaxPayload cannot carry it (plus serviceHeaderRoom).
	MaxServiceReplyBytes = 768 << 10
	// DefaultServiceTimeout bounds one service call when its Service sets
	// no Timeout.
	DefaultServiceTimeout = 30 * time.Second
	// DefaultServiceConcurrency is how many service calls of one class of
	// users (anonymous, read-only, writer, control) run at once; a request
	// arriving when every slot of its class is taken is refused at once
	// with CodeBusy (never queued: a queue would run requests after their
	// callers gave up). Classes do not share slots, so anonymous readers
	// cannot hold the control user up.
	DefaultServiceConcurrency = 8
	// serviceHeaderRoom is what a reply's headers may take besides its body.
	serviceHeaderRoom = 4 << 10
)

// CodeBusy (busclient.HeaderErrorCode) refuses a service request that
// arrived when every service slot of its caller's class was taken: nothing
// was done, retry later.
const CodeBusy = "busy"

// Refuse returns the error a Handler returns to refuse a request: the
// requester gets text (static: never echo the request or a provider) in
// busclient.HeaderError and code in busclient.HeaderErrorCode (for
// example busclient.CodeBadRequest, or a code the service defines).
func Refuse(code, text string) error {
	return &Error{Op: "refuse", Code: code, Err: errors.New(text)}
}

// JSON adapts a typed function to a Handler: the body is read strictly —
// exactly one JSON object, no unknown field, nothing after it — into a
// Req (refused with busclient.CodeBadRequest naming the problem, never
// the bytes), and fn's reply is encoded as JSON.
func JSON[Req, Reply any](fn func(ctx context.Context, caller string, req *Req) (*Reply, error)) Handler {
	return func(ctx context.Context, caller string, body []byte) ([]byte, error) {
		var req Req
		if err := strictJSON(body, &req); err != nil {
			return nil, Refuse(busclient.CodeBadRequest, "malformed request: "+err.Error())
		}
		reply, err := fn(ctx, caller, &req)
		if err != nil {
			return nil, err
		}
		return json.Marshal(reply)
	}
}

// validateServices checks the services of one space (see
// Service.Subject): AccessControl ones need a control user, and replies
// their maximum payload.
func validateServices(services []Service, controlUser string, maxPayload int32) error {
	subjects := []string{busclient.ReplaySubject, busclient.HeadSubject, busclient.AppendSubject}
	base := strings.TrimSuffix(busclient.APISubjects, ">")
	for i := range services {
		s := &services[i]
		rest, ok := strings.CutPrefix(s.Subject, base)
		if !ok || !validTokens(rest) {
			return fmt.Errorf("%w: service subject %d must be %s followed by tokens of [a-z0-9_]", ErrOptions, i, base)
		}
		if s.Handle == nil {
			return fmt.Errorf("%w: service %s has no handler", ErrOptions, s.Subject)
		}
		switch s.Access {
		case AccessRead:
		case AccessControl:
			if controlUser == "" {
				return fmt.Errorf("%w: service %s is for the control user, and there is none", ErrOptions, s.Subject)
			}
		default:
			return fmt.Errorf("%w: service %s has no access class", ErrOptions, s.Subject)
		}
		for _, o := range subjects {
			if o == s.Subject || strings.HasPrefix(o, s.Subject+".") || strings.HasPrefix(s.Subject, o+".") {
				return fmt.Errorf("%w: service subject %s collides with %s", ErrOptions, s.Subject, o)
			}
		}
		subjects = append(subjects, s.Subject)
	}
	if len(services) > 0 && maxPayload < MaxServiceReplyBytes+serviceHeaderRoom {
		return fmt.Errorf("%w: services need Limits.MaxPayload of at least %d bytes", ErrOptions, MaxServiceReplyBytes+serviceHeaderRoom)
	}
	return nil
}

// validTokens reports whether s is one or more dot-separated tokens of
// [a-z0-9_].
func validTokens(s string) bool {
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" {
			return false
		}
		for i := 0; i < len(tok); i++ {
			if c := tok[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
				return false
			}
		}
	}
	return true
}

// servicePublish returns the request subjects of services a user of class
// c may publish to (user "" for anonymous clients).
func servicePublish(services []Service, host string, c class, user string) []string {
	var out []string
	for _, s := range services {
		if s.Access == AccessRead || c == classControl {
			out = append(out, busclient.UserSubject(busclient.HostSubject(host, s.Subject), user))
		}
	}
	return out
}

// serviceHandlers adds the request subjects of every service of sp for
// every route allowed to call it.
func (b *Bus) serviceHandlers(sp *space, handlers map[string]nats.MsgHandler) {
	for i := range sp.services {
		s := &sp.services[i]
		for _, r := range b.routes() {
			if s.Access == AccessControl && r.class != classControl {
				continue
			}
			handlers[busclient.UserSubject(sp.subject(s.Subject), r.user)] = func(m *nats.Msg) { b.serveService(m, r, s) }
		}
	}
}

// serveService admits one request (reply inbox, rate limit, size) and
// runs its handler in a free slot of the caller's class, or refuses it
// with CodeBusy when there is none; Close waits for it. The call's deadline
// counts from the request's arrival here, and a call whose deadline passed
// before its handler started is dropped unanswered (its caller gave up).
func (b *Bus) serveService(m *nats.Msg, r route, s *Service) {
	received := time.Now()
	if !b.serviceReply(m, r) || !b.admit(m, r.class) {
		return
	}
	if len(m.Data) > MaxServiceRequestBytes {
		refuse(m, busclient.CodeBadRequest, fmt.Sprintf("request too large: limit MaxServiceRequestBytes=%d", MaxServiceRequestBytes))
		return
	}
	b.appendsMu.Lock()
	if b.closing {
		b.appendsMu.Unlock()
		return
	}
	b.calls.Add(1)
	b.appendsMu.Unlock()
	slots := b.callSlots[r.class]
	select {
	case slots <- struct{}{}:
	default:
		b.calls.Done()
		refuse(m, CodeBusy, "every service slot is taken: retry later")
		return
	}
	go func() {
		defer b.calls.Done()
		defer func() { <-slots }()
		timeout := s.Timeout
		if timeout <= 0 {
			timeout = DefaultServiceTimeout
		}
		ctx, cancel := context.WithDeadline(b.ctx, received.Add(timeout))
		defer cancel()
		if ctx.Err() != nil {
			return
		}
		out, err := s.Handle(ctx, r.user, m.Data)
		reply := nats.NewMsg(m.Reply)
		var re *Error
		switch {
		case errors.As(err, &re) && re.Code != "":
			reply.Header.Set(busclient.HeaderError, re.Err.Error())
			reply.Header.Set(busclient.HeaderErrorCode, re.Code)
		case err != nil:
			text := "request failed"
			if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
				text = "request timed out"
			}
			reply.Header.Set(busclient.HeaderError, text)
			b.opts.Logger.Error("bus: service", "subject", s.Subject, "err", err)
		case len(out) > MaxServiceReplyBytes:
			reply.Header.Set(busclient.HeaderError, fmt.Sprintf("reply too large: limit MaxServiceReplyBytes=%d", MaxServiceReplyBytes))
			b.opts.Logger.Error("bus: service reply too large", "subject", s.Subject, "bytes", len(out))
		default:
			reply.Data = out
		}
		_ = m.RespondMsg(reply)
	}()
}

// serviceReply reports whether m's reply inbox is its requester's own
// (checkReply's rule for services). A request without an inbox, or with
// another user's (a spoofed inbox: NATS does not check it), is dropped
// silently and counted as misrouted: answering it, even with a refusal,
// would publish into someone else's inbox, and it is not charged to the
// rate limit of the inbox's connection, which did not send it.
func (b *Bus) serviceReply(m *nats.Msg, r route) bool {
	if isInbox(m.Reply) && ownInbox(m.Reply, r) {
		return true
	}
	if isInbox(m.Reply) {
		b.limiter.mu.Lock()
		b.limiter.misrouted++
		b.limiter.mu.Unlock()
	}
	return false
}
