package control

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/nats-io/nats.go"
)

// Client calls the control and projection APIs over a NATS connection to
// a ledger bus. It is safe for concurrent use.
type Client struct {
	nc   *nats.Conn
	user string
	host string // whose space requests go to (busclient.HostSubject); "" bare
	// base is the reply inbox prefix of this client, "<user's inbox
	// prefix>.<unique token>": each request's inbox is base.<n>, so the
	// bus rates all of this client's requests as one connection's.
	base string
	n    atomic.Uint64
}

// NewClient wraps nc, connected as bus user user ("" for anonymous) with
// that user's options (busclient.UserOptions: its reply inbox prefix).
// Requests go to user's own subjects (busclient.UserSubject).
func NewClient(nc *nats.Conn, user string) *Client {
	return &Client{nc: nc, user: user, base: nc.NewInbox()}
}

// WithHost returns a client on the same connection whose requests go to
// host's space of a fleet (busclient.HostSubject); "" is the bare space
// of a single host.
func (c *Client) WithHost(host string) *Client {
	return &Client{nc: c.nc, user: c.user, host: host, base: c.nc.NewInbox()}
}

// requestSlack is added to a server-side timeout for the client's own,
// so the server's answer ("request timed out") arrives first.
const requestSlack = 5 * time.Second

// Leases returns one page of the projection's lease table.
func (c *Client) Leases(ctx context.Context, req LeasesRequest) (LeasesReply, error) {
	var out LeasesReply
	err := c.call(ctx, "leases", LeasesSubject, ProjectionTimeout, req, &out)
	return out, err
}

// LiveLeases returns one page of the live leases (control user only).
func (c *Client) LiveLeases(ctx context.Context, req LiveLeasesRequest) (LeasesReply, error) {
	var out LeasesReply
	err := c.call(ctx, "live leases", LiveLeasesSubject, ProjectionTimeout, req, &out)
	return out, err
}

// Revoke revokes (with req.Deny: denies) a lease (control user only) and
// says how many leases were revoked; ErrNotFound when there was nothing
// to act on (see RevokeRequest).
func (c *Client) Revoke(ctx context.Context, req RevokeRequest) (RevokeReply, error) {
	var out RevokeReply
	err := c.call(ctx, "revoke", RevokeSubject, RuntimeTimeout, req, &out)
	return out, err
}

// Allow lifts a denial (control user only).
func (c *Client) Allow(ctx context.Context, req AllowRequest) error {
	return c.call(ctx, "allow", AllowSubject, RuntimeTimeout, req, &Done{})
}

// EndSession ends a session (control user only); ErrNotFound when no such
// session is open.
func (c *Client) EndSession(ctx context.Context, session string) error {
	return c.call(ctx, "end session", EndSessionSubject, RuntimeTimeout, EndSessionRequest{Session: session}, &Done{})
}

// Reap reaps the leases idle for at least idleMax now (0: the runtime's
// bound; control user only).
func (c *Client) Reap(ctx context.Context, idleMax time.Duration) (ReapReply, error) {
	var out ReapReply
	err := c.call(ctx, "reap", ReapSubject, RuntimeTimeout, ReapRequest{IdleMaxNS: int64(idleMax)}, &out)
	return out, err
}

// Reload has serve read its server configuration again and put it in
// force (control user only), and says what changed; ErrConfigNotLoaded
// when the file failed to load (nothing changed).
func (c *Client) Reload(ctx context.Context) (ReloadReply, error) {
	var out ReloadReply
	err := c.call(ctx, "reload", ReloadSubject, RuntimeTimeout, ReloadRequest{}, &out)
	return out, err
}

// Activation returns one activation's audit (as `leaseledger audit --json`).
func (c *Client) Activation(ctx context.Context, req ActivationRequest) (audit.Activation, error) {
	var out audit.Activation
	err := c.call(ctx, "activation", ActivationSubject, ProjectionTimeout, req, &out)
	return out, err
}

// Audit returns the audit summary (as `leaseledger audit --all --json`).
func (c *Client) Audit(ctx context.Context, req AuditRequest) (audit.Summary, error) {
	var out audit.Summary
	err := c.call(ctx, "audit", AuditSubject, ProjectionTimeout, req, &out)
	return out, err
}

// Checkpoint asks for a signed checkpoint of the durable head (which the
// server also publishes on busclient.CheckpointSubject): the signed note,
// for verify.ParseCheckpoint.
func (c *Client) Checkpoint(ctx context.Context) ([]byte, error) {
	var out CheckpointReply
	if err := c.call(ctx, "checkpoint", ProofCheckpointSubject, ProofTimeout, CheckpointRequest{}, &out); err != nil {
		return nil, err
	}
	return []byte(out.Checkpoint), nil
}

// InclusionProof returns event seq's canonical bytes and the proof that
// it is in the tree of size events (for verify.VerifyInclusion).
func (c *Client) InclusionProof(ctx context.Context, seq, size uint64) (InclusionReply, error) {
	var out InclusionReply
	err := c.call(ctx, "inclusion", InclusionSubject, ProofTimeout, InclusionRequest{Seq: seq, Size: size}, &out)
	return out, err
}

// ConsistencyProof returns the proof that the tree of from events is a
// prefix of the tree of to events (for verify.VerifyConsistency).
func (c *Client) ConsistencyProof(ctx context.Context, from, to uint64) ([][]byte, error) {
	var out ConsistencyReply
	if err := c.call(ctx, "consistency", ConsistencySubject, ProofTimeout, ConsistencyRequest{From: from, To: to}, &out); err != nil {
		return nil, err
	}
	if out.From != from || out.To != to {
		return nil, &Error{Op: "consistency", Subject: ConsistencySubject, Err: ErrMalformedReply}
	}
	return out.Hashes, nil
}

func (c *Client) call(ctx context.Context, op, subject string, timeout time.Duration, req, reply any) error {
	fail := func(err error) error { return &Error{Op: op, Subject: subject, Err: err} }
	body, err := json.Marshal(req)
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+requestSlack)
	defer cancel()
	// A request of its own rather than the connection's request
	// multiplexer: after the publication, a flush (a round trip the
	// server answers after handling the publication) tells whether the
	// server refused it as a permission violation — at once, instead of
	// after the timeout.
	to := busclient.UserSubject(busclient.HostSubject(c.host, subject), c.user)
	inbox := c.base + "." + strconv.FormatUint(c.n.Add(1), 10)
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return fail(err)
	}
	defer sub.Unsubscribe()
	if err := c.nc.PublishMsg(&nats.Msg{Subject: to, Reply: inbox, Data: body}); err != nil {
		return fail(err)
	}
	if err := c.nc.FlushWithContext(ctx); err != nil {
		return fail(err)
	}
	if c.forbidden(to) {
		return fail(ErrForbidden)
	}
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return fail(err)
	}
	if m.Header.Get(statusHeader) == noResponders {
		return fail(ErrNoService)
	}
	if text := m.Header.Get(busclient.HeaderError); text != "" {
		code := m.Header.Get(busclient.HeaderErrorCode)
		cause := ErrFailed
		switch code {
		case "":
		case busclient.CodeBadRequest:
			cause = ErrInvalid
		case busclient.CodeRateLimited:
			cause = ErrRateLimited
		case bus.CodeBusy:
			cause = ErrBusy
		case CodeNotFound:
			cause = ErrNotFound
		case CodeTooLarge:
			cause = ErrTooLarge
		case CodeUnavailable:
			cause = ErrUnavailable
		case CodeConfigNotLoaded:
			cause = ErrConfigNotLoaded
		default:
			cause = ErrRefused
		}
		return &Error{Op: op, Subject: subject, Code: code, Reply: text, Err: cause}
	}
	if err := json.Unmarshal(m.Data, reply); err != nil {
		return fail(ErrMalformedReply)
	}
	return nil
}

// The status header of a NATS "no responders" reply (nats.go's own
// constants are unexported).
const (
	statusHeader = "Status"
	noResponders = "503"
)

// forbidden reports whether the connection's last error is the server's
// permission violation for publishing to subject: the bus drops such a
// request, so only the connection learns why it went unanswered.
func (c *Client) forbidden(subject string) bool {
	err := c.nc.LastError()
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`)
}
