package runtime

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/guardian"
)

// The operator's account of a failure: why an acquisition or a
// call failed underneath the step its sentinel names — a refused dial, a
// resolver or TLS failure, which timer fired, an HTTP status, an exited
// process. It is what the runtime observed at its own boundary (local
// errors, socket errors, the configured endpoint's host:port, numbers),
// never text from the server, so it may be logged and recorded
// (lease.acquire_failed) and carried in LeaseError; MCP clients of the
// gateway still get only its static answers.

// ExitStatus is a server process's wait status, as its guardian receipt
// reported it.
type ExitStatus struct {
	// Code is the exit code; -1 when the process was killed by a signal.
	Code int
	// Signal names the terminating signal ("KILL", "TERM", …), or "".
	Signal string
}

// failureInfo is the operator's account of one failure.
type failureInfo struct {
	cause      events.FailureCause
	target     string // host:port of the HTTP request; "" for stdio
	httpStatus int    // the error status, for cause http_status
}

// classifyErr is the one place a Go error becomes a FailureCause. It
// returns "" when err names nothing in the set (the caller picks the
// default its step implies). Context ends are the caller's to judge (its
// own budget or its caller's): they are classified only when the boundary
// named the timer (the ErrHTTP* sentinels).
func classifyErr(err error) events.FailureCause {
	var (
		dnsErr   *net.DNSError
		recErr   tls.RecordHeaderError
		alertErr tls.AlertError
		verErr   *tls.CertificateVerificationError
		authErr  x509.UnknownAuthorityError
		hostErr  x509.HostnameError
		certErr  x509.CertificateInvalidError
		netErr   net.Error
	)
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrHTTPConnectTimeout):
		return events.CauseConnectTimeout
	case errors.Is(err, ErrHTTPReceiveTimeout):
		return events.CauseReceiveTimeout
	case errors.Is(err, ErrHTTPRequestTimeout):
		return events.CauseRequestTimeout
	case errors.Is(err, ErrHTTPResponseTooLarge):
		return events.CauseResponseTooLarge
	case errors.Is(err, ErrHTTPRedirect), errors.Is(err, ErrHTTPTooManyRedirects), errors.Is(err, ErrHTTPCrossOrigin),
		errors.Is(err, ErrHTTPBadLocation), errors.Is(err, ErrHTTPBodyNotReplayable):
		return events.CauseRedirectRefused
	case errors.Is(err, guardian.ErrHelperNotFound), errors.Is(err, guardian.ErrHelperUnsupported), errors.Is(err, guardian.ErrHelperVersion):
		return events.CauseHelperUnavailable
	case errors.Is(err, guardian.ErrTargetStart):
		return events.CauseSpawnFailed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ""
	case errors.As(err, &dnsErr):
		return events.CauseDNS
	case errors.As(err, &recErr), errors.As(err, &alertErr), errors.As(err, &verErr),
		errors.As(err, &authErr), errors.As(err, &hostErr), errors.As(err, &certErr):
		return events.CauseTLS
	case errors.Is(err, syscall.ECONNREFUSED):
		return events.CauseConnectionRefused
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return events.CauseHostUnreachable
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return events.CauseConnectionReset
	case errors.As(err, &netErr) && netErr.Timeout():
		// Before a response, the transport's only own timers are the
		// dial's and the TLS handshake's (the receive and request timers
		// are the boundary's, named above).
		return events.CauseConnectTimeout
	}
	return ""
}

// targetOf is the host:port an HTTP failure names: u's host (lower case)
// and port (a default port written out), never its scheme, path, query or
// user info; "" when it would not fit an event's text field.
func targetOf(u *url.URL) string {
	if u == nil || u.Host == "" {
		return ""
	}
	t := strings.ToLower(hostPort(u))
	if len(t) > events.MaxTextLen || !utf8.ValidString(t) {
		return ""
	}
	return t
}

// noteFailure records what one HTTP request of an acquisition or a call
// observed, in the slot of the context the request was made under (see
// httpCallCause): the first one is kept. A loss probe's requests speak
// for no one.
func noteFailure(ctx context.Context, fi failureInfo) {
	c, ok := ctx.Value(httpCauseKey{}).(*httpCallCause)
	if !ok || fi.cause == "" || ctx.Value(probeKey{}) != nil {
		return
	}
	c.mu.Lock()
	if c.info.cause == "" {
		c.info = fi
	}
	c.mu.Unlock()
}

// noteRequestFailure is noteFailure for a request that failed with err at
// the boundary (after typedErr) while sending to u. A request whose
// context ended (the acquisition's or the call's budget, the caller's
// cancellation, the lease's end) is not noted: its caller judges that.
func noteRequestFailure(ctx context.Context, u *url.URL, err error) {
	c := classifyErr(err)
	if c == "" {
		if ctx.Err() != nil || errors.Is(err, ErrHTTPDetached) || errors.Is(err, ErrHTTPNotRecorded) {
			return
		}
		c = events.CauseTransport
	}
	noteFailure(ctx, failureInfo{cause: c, target: targetOf(u)})
}

// failure returns the noted failure (zero for a nil slot).
func (c *httpCallCause) failure() failureInfo {
	if c == nil {
		return failureInfo{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// acquireFailure is the operator's account of an acquisition that failed
// with reason: err is the launch's error for spawn_failed and the step's
// (Connect's, the listing's) otherwise; slot holds what the HTTP
// boundary observed. A stdio child whose session ends within
// ChildEndWait of the failure exited first: process_exited.
func (l *lease) acquireFailure(ctx context.Context, slot *httpCallCause, reason string, err error) failureInfo {
	hc, isHTTP := l.child.(*httpChild)
	switch reason {
	case "initialize_failed", "listing_failed":
	case "spawn_failed":
		if l.cfg.isHTTP() {
			return failureInfo{} // the endpoint failed its own check: a config error
		}
		if c := classifyErr(err); c != "" {
			return failureInfo{cause: c}
		}
		return failureInfo{cause: events.CauseSpawnFailed}
	default: // the ledger, a listing over its bounds: nothing underneath
		return failureInfo{}
	}
	if fi := slot.failure(); fi.cause != "" {
		return fi
	}
	var fi failureInfo
	if isHTTP {
		fi.target = targetOf(hc.rt.endpoint)
	}
	_, remote := remoteCode(err)
	switch {
	case ctx.Err() != nil:
		fi.cause = events.CauseCancelled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			fi.cause = events.CauseAcquireTimeout
		}
	case remote:
		fi.cause = events.CauseProtocol // the server answered with an error
	case isHTTP:
		fi.cause = events.CauseProtocol // every request went through: the exchange failed
		if hc.lost() != "" {
			fi.cause = events.CauseTransport
		}
	case l.child != nil && l.awaitChildEnd(ctx):
		fi.cause = events.CauseProcessExited
	default:
		fi.cause = events.CauseProtocol
	}
	return fi
}

// exitStatus is the target's wait status from the lease's guardian
// receipt, once its cleanup ran; nil when none was reported.
func (l *lease) exitStatus() *ExitStatus {
	if dc, ok := l.child.(*directChild); ok {
		return dc.exitStatus() // the host's own wait
	}
	r := l.cleanup.Receipt
	if r == nil || !r.Reaped {
		return nil
	}
	return &ExitStatus{Code: r.ExitCode, Signal: r.Signal}
}

// setFailure puts fi (and, for an exited process, its wait status) on e.
func (e *LeaseError) setFailure(fi failureInfo, exit *ExitStatus) {
	e.Cause, e.Target, e.HTTPStatus = fi.cause, fi.target, fi.httpStatus
	if fi.cause == events.CauseProcessExited {
		e.Exit = exit
	}
}
