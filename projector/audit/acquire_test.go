package audit_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
)

// TestAuditAcquireFailed: the audit of an activation whose acquisition
// failed shows the failure's cause (a refused dial to host:port; an
// exited process with its wait status from guardian.reaped), in its JSON;
// an activation with no failure has no acquire_failed.
func TestAuditAcquireFailed(t *testing.T) {
	s := seal(
		d("act-http", &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}),
		d("act-http", &events.ConnectionOpened{Transport: events.TransportHTTP, Cleanup: events.CleanupBestEffort}),
		d("act-http", &events.LeaseAcquireFailed{Fingerprint: eventgen.Digest, Reason: "initialize_failed", DurationNS: 7,
			Cause: events.CauseConnectionRefused, Target: "127.0.0.1:3011"}),
		d("act-http", &events.LeaseTerminated{Reason: events.TerminatedAcquireFailed}),

		d("act-exit", &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}),
		d("act-exit", &events.LeaseChildStarted{PID: 100, GuardianPID: 101, Cleanup: events.CleanupVerified}),
		d("act-exit", &events.LeaseAcquireFailed{Fingerprint: eventgen.Digest, Reason: "initialize_failed", DurationNS: 7,
			Cause: events.CauseProcessExited}),
		d("act-exit", &events.LeaseTerminated{Reason: events.TerminatedAcquireFailed}),
		d("act-exit", &events.GuardianReaped{TargetPID: 100, ExitCode: 3, At: events.At(t0)}),

		d("act-ok", &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}),
		d("act-ok", &events.LeaseAcquired{Fingerprint: eventgen.Digest, DurationNS: 7}),
	)
	out := s.fold(t, "act-http", audit.Options{})
	want := audit.AcquireFailure{Seq: 3, Reason: "initialize_failed", Cause: events.CauseConnectionRefused, Target: "127.0.0.1:3011", DurationNS: 7}
	if out.AcquireFailed == nil || *out.AcquireFailed != want {
		t.Fatalf("act-http: %+v, want %+v", out.AcquireFailed, want)
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"acquire_failed":{"seq":3,"reason":"initialize_failed","cause":"connection_refused","target":"127.0.0.1:3011","duration_ns":7}`) {
		t.Fatalf("act-http JSON: %s", b)
	}
	out = s.fold(t, "act-exit", audit.Options{})
	if a := out.AcquireFailed; a == nil || a.Cause != events.CauseProcessExited || a.ExitCode == nil || *a.ExitCode != 3 || a.Signal != "" || a.Target != "" {
		t.Fatalf("act-exit: %+v", a)
	}
	if out := s.fold(t, "act-ok", audit.Options{}); out.AcquireFailed != nil {
		t.Fatalf("act-ok: %+v", out.AcquireFailed)
	}
}
