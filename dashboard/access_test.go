package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/dashboard"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
)

// TestBundleReadsAccess: the page reads the access policy's evidence under
// the names the Go types give it — the summary's policy (in force: mode,
// digest, policies, seq; loads, those dropped; every decision), an
// activation report's access (totals, by action, by policy, the ids left
// out), the audit's denials with their deciding policies — and tells a
// denial in the events it follows by the kinds, fields and values package
// events gives them, so a renamed field fails here rather than vanish
// from the page. Each name is looked for as a property read (".name"),
// each value as a quoted string.
func TestBundleReadsAccess(t *testing.T) {
	rec := httptest.NewRecorder()
	newHandler(t, dashboard.Options{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/assets/app.js", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /assets/app.js: %d", rec.Code)
	}
	bundle := rec.Body.String()
	var reads []string
	names := func(v any, fields ...string) {
		for _, field := range fields {
			f, ok := reflect.TypeOf(v).FieldByName(field)
			if !ok {
				t.Fatalf("%T has no field %s", v, field)
			}
			n, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			reads = append(reads, n)
		}
	}
	names(audit.Summary{}, "Policy")
	names(projector.PolicyReport{}, "InForce", "Loads", "Recent", "LoadsOmitted", "Decisions")
	names(projector.PolicyLoad{}, "Seq", "Mode", "Digest", "Policies")
	names(projector.ActivationReport{}, "Access")
	names(projector.AccessCounts{}, "Allowed", "Denied", "Actions", "Policies", "PoliciesOmitted")
	names(projector.AccessOutcomes{}, "Allowed", "Denied")
	names(audit.Activation{}, "AccessDenied", "AccessDeniedOmitted")
	names(audit.Denial{}, "Seq", "Action", "Session", "CallID", "Tool", "TargetSHA256", "Policies", "PoliciesOmitted", "PolicyDigest")
	// The events the page counts a session's denials from.
	names(events.AccessDecided{}, "Action", "Allowed", "Policies")
	names(events.CallRefused{}, "Reason", "Policies", "Tool")
	for _, n := range reads {
		if !strings.Contains(bundle, "."+n) {
			t.Errorf("the bundle never reads .%s", n)
		}
	}
	for _, v := range []string{string(events.KindAccessDecided), string(new(events.CallRefused).Kind()), string(events.KindPolicyLoaded),
		string(events.RefusedPolicy), string(events.PolicyEnforced), string(events.AccessCallTool)} {
		if !strings.Contains(bundle, `"`+v+`"`) {
			t.Errorf("the bundle never names %q", v)
		}
	}
}
