package audit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
	"go.uber.org/goleak"
)

var (
	t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	d  = eventgen.D
)

// sealed is a log: the envelopes and their stored bytes, in seq order.
type sealed struct {
	envs []events.Envelope
	raws [][]byte
}

func seal(ds ...events.Draft) *sealed {
	c := eventgen.NewChain(t0)
	s := &sealed{}
	for _, x := range ds {
		env, raw := c.Seal(x)
		s.envs = append(s.envs, env)
		s.raws = append(s.raws, raw)
	}
	return s
}

// fold adds every event of activation a and returns the result.
func (s *sealed) fold(t *testing.T, a string, opts audit.Options) audit.Activation {
	t.Helper()
	f := audit.NewFold(a, opts)
	for i := range s.envs {
		if s.envs[i].Activation != a {
			continue
		}
		if err := f.Add(&s.envs[i]); err != nil {
			t.Fatal(err)
		}
	}
	out, err := f.Result()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// closedRequest is a resource request's life: registered, dispatched,
// continued twice, one timed-out await, completed.
func closedRequest(a, handle string) []events.Draft {
	return []events.Draft{
		d(a, &events.RequestRegistered{Handle: handle, Owner: "o-1", Method: events.MethodReadResource, TimeoutNS: 1e9}),
		d(a, &events.RequestDispatched{Handle: handle, WireID: "1"}),
		d(a, &events.RequestContinued{Handle: handle, WireID: "2", Round: 1}),
		d(a, &events.RequestAwaitTimedOut{Handle: handle, WaitedNS: 5e6}),
		d(a, &events.RequestContinued{Handle: handle, WireID: "3", Round: 2}),
		d(a, &events.RequestCompleted{Handle: handle, Outcome: events.RequestError, ResultBytes: 10, Detail: "remote_error", Code: -32002}),
	}
}

// The request timeline keeps registration, every wire id, timed-out
// awaits and the settlement, each as a step with its seq.
func TestAuditFoldRequestTimeline(t *testing.T) {
	log := seal(closedRequest("act-1", "r-1")...)
	out := log.fold(t, "act-1", audit.Options{})
	if len(out.Requests) != 1 || out.RequestsOmitted != 0 {
		t.Fatalf("requests: %+v", out.Requests)
	}
	r := out.Requests[0]
	want := []string{"1 registered", "2 dispatched wire 1", "3 continued wire 2 (round 1)", "4 await timed out after 5ms",
		"5 continued wire 3 (round 2)", "6 completed error, 10 bytes, remote_error (code -32002)"}
	if r.Handle != "r-1" || r.Owner != "o-1" || r.Method != events.MethodReadResource || r.RegisteredSeq != 1 ||
		!reflect.DeepEqual(r.WireIDs, []string{"1", "2", "3"}) || r.AwaitTimeouts != 1 || r.Completed == nil ||
		r.Completed.Code != -32002 || !reflect.DeepEqual(r.Steps, want) {
		t.Fatalf("request timeline: %+v", r)
	}
	if len(out.Timeline) != 6 || out.TimelineOmitted != 0 || out.Timeline[5].Kind != "request.completed" || out.Report.Activation != "act-1" {
		t.Fatalf("timeline: %+v", out.Timeline)
	}
}

// The timeline keeps the last Options.Timeline events, oldest first, and
// counts the earlier ones; All keeps every event; zero keeps
// DefaultTimeline.
func TestAuditFoldTimelineBound(t *testing.T) {
	var ds []events.Draft
	for i := range audit.DefaultTimeline + 5 {
		ds = append(ds, d("act-1", &events.HTTPRegistered{Ref: fmt.Sprintf("h-%d", i), Scope: "request", Method: events.HTTPPost, Origin: "https://a.example"}))
	}
	log := seal(ds...)
	for _, tc := range []struct {
		keep, n int
		first   uint64
	}{{3, 3, uint64(len(ds)) - 2}, {0, audit.DefaultTimeline, 6}, {audit.All, len(ds), 1}, {len(ds) + 1, len(ds), 1}} {
		out := log.fold(t, "act-1", audit.Options{Timeline: tc.keep})
		if len(out.Timeline) != tc.n || out.Timeline[0].Seq != tc.first || out.Timeline[tc.n-1].Seq != uint64(len(ds)) ||
			out.TimelineOmitted != uint64(len(ds)-tc.n) {
			t.Fatalf("keep %d: %d events from seq %d, %d omitted", tc.keep, len(out.Timeline), out.Timeline[0].Seq, out.TimelineOmitted)
		}
		for i := 1; i < len(out.Timeline); i++ {
			if out.Timeline[i].Seq != out.Timeline[i-1].Seq+1 {
				t.Fatalf("keep %d: timeline out of order at %d", tc.keep, i)
			}
		}
	}
}

// Past MaxRequests registrations are counted, not listed; past MaxSteps a
// request's steps are counted, not listed.
func TestAuditFoldRequestBounds(t *testing.T) {
	var ds []events.Draft
	for i := range audit.MaxRequests + 2 {
		ds = append(ds, d("act-1", &events.RequestRegistered{Handle: fmt.Sprintf("r-%d", i), Owner: "o-1", Method: events.MethodListResources, TimeoutNS: 1}))
	}
	for range audit.MaxSteps + 3 {
		ds = append(ds, d("act-1", &events.RequestAwaitTimedOut{Handle: "r-0", WaitedNS: 1}))
	}
	ds = append(ds, d("act-1", &events.RequestAwaitTimedOut{Handle: fmt.Sprintf("r-%d", audit.MaxRequests), WaitedNS: 1}))
	out := seal(ds...).fold(t, "act-1", audit.Options{Timeline: 1})
	if len(out.Requests) != audit.MaxRequests || out.RequestsOmitted != 2 {
		t.Fatalf("%d requests, %d omitted", len(out.Requests), out.RequestsOmitted)
	}
	r := out.Requests[0]
	if len(r.Steps) != audit.MaxSteps || r.StepsOmitted != 4 || r.AwaitTimeouts != audit.MaxSteps+3 {
		t.Fatalf("r-0: %d steps, %d omitted, %d awaits", len(r.Steps), r.StepsOmitted, r.AwaitTimeouts)
	}
}

func TestAuditFoldErrors(t *testing.T) {
	log := seal(d("act-1", &events.HTTPRegistered{Ref: "h-1", Scope: "request", Method: events.HTTPPost, Origin: "https://a.example"}),
		d("act-2", &events.HTTPRegistered{Ref: "h-1", Scope: "request", Method: events.HTTPPost, Origin: "https://a.example"}))
	f := audit.NewFold("act-1", audit.Options{})
	var ae *audit.Error
	if _, err := f.Result(); !errors.Is(err, audit.ErrNoEvents) || !errors.As(err, &ae) || ae.Op != "result" {
		t.Fatalf("empty fold: %v", err)
	}
	if err := f.Add(&log.envs[1]); !errors.Is(err, audit.ErrOtherActivation) || !errors.As(err, &ae) || ae.Seq != 2 {
		t.Fatalf("other activation: %v", err)
	}
	if err := f.AddRaw(log.raws[0]); err != nil {
		t.Fatal(err)
	}
	if err := f.Add(&log.envs[0]); !errors.Is(err, projector.ErrOutOfOrder) {
		t.Fatalf("replayed seq: %v", err)
	}
	if err := f.AddRaw([]byte(`{"seq":`)); err == nil || !errors.As(err, &ae) || ae.Op != "add" {
		t.Fatalf("bad bytes: %v", err)
	}
	out, err := f.Result()
	if err != nil || f.Events() != 1 || len(out.Timeline) != 1 || out.Report.Events != 1 {
		t.Fatalf("a failed Add changed the fold: %v %d %+v", err, f.Events(), out.Timeline)
	}
}

// AddRaw of the stored bytes gives the same audit as Add of the envelopes.
func TestAuditAddRawEqualsAdd(t *testing.T) {
	log := seal(closedRequest("act-1", "r-1")...)
	f := audit.NewFold("act-1", audit.Options{})
	for _, raw := range log.raws {
		if err := f.AddRaw(raw); err != nil {
			t.Fatal(err)
		}
	}
	got, err := f.Result()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(log.fold(t, "act-1", audit.Options{}))
	if string(a) != string(b) {
		t.Fatalf("AddRaw:\n%s\nAdd:\n%s", a, b)
	}
}

// A Result is a snapshot: later Adds do not change it.
func TestAuditResultIsSnapshot(t *testing.T) {
	ds := closedRequest("act-1", "r-1")
	log := seal(ds...)
	f := audit.NewFold("act-1", audit.Options{Timeline: 2})
	for i := range 3 {
		if err := f.Add(&log.envs[i]); err != nil {
			t.Fatal(err)
		}
	}
	early, _ := f.Result()
	before, _ := json.Marshal(early)
	for i := 3; i < len(log.envs); i++ {
		if err := f.Add(&log.envs[i]); err != nil {
			t.Fatal(err)
		}
	}
	after, _ := json.Marshal(early)
	if string(before) != string(after) {
		t.Fatalf("result changed by later adds:\n%s\n%s", before, after)
	}
}

// The JSON shape is stable: every documented key is present, lists are
// [] when empty, never null.
func TestAuditJSONShape(t *testing.T) {
	out := seal(d("act-1", &events.ConnectionOpened{Transport: events.TransportStdio, Cleanup: events.CleanupVerified, OneShot: true})).
		fold(t, "act-1", audit.Options{})
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"report", "requests", "requests_omitted", "http_requests", "http_requests_omitted", "timeline", "timeline_omitted",
		"access_denied", "access_denied_omitted"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("key %s missing: %s", k, b)
		}
	}
	if string(m["requests"]) != "[]" || string(m["http_requests"]) != "[]" || string(m["access_denied"]) != "[]" {
		t.Fatalf("empty lists: %s %s %s", m["requests"], m["http_requests"], m["access_denied"])
	}
}

func TestAuditSummarize(t *testing.T) {
	var ds []events.Draft
	ok := eventgen.Workload(64, 1) // act-000000, closed and confirmed
	ds = append(ds, ok...)
	for i := range 3 {
		ds = append(ds, d(fmt.Sprintf("act-open-%d", i), &events.HTTPRegistered{Ref: "h-1", Scope: "request", Method: events.HTTPPost, Origin: "https://a.example"}))
	}
	ds = append(ds, d("act-cap", &events.LeaseAcquireFailed{Fingerprint: eventgen.Digest, Reason: "too_many_leases"}))
	s := projector.New()
	for _, env := range seal(ds...).envs {
		if err := s.Apply(&env); err != nil {
			t.Fatal(err)
		}
	}
	sum := audit.Summarize(s, 2)
	if sum.Events != uint64(len(ds)) || sum.Activations != 5 || sum.NotClosed != 3 ||
		!reflect.DeepEqual(sum.Verdicts, map[string]int{"confirmed": 1, "unconfirmed": 3, "unverified": 0, "never_started": 1}) ||
		len(sum.Unconfirmed) != 2 || sum.Omitted != 1 || sum.Unconfirmed[0].Activation != "act-open-0" ||
		sum.Unconfirmed[0].Closed || !strings.HasPrefix(sum.Unconfirmed[0].Reasons[0], "not_closed") {
		t.Fatalf("summary: %+v", sum)
	}
	if all := audit.Summarize(s, audit.All); len(all.Unconfirmed) != 3 || all.Omitted != 0 {
		t.Fatalf("All: %+v", all)
	}
	empty := audit.Summarize(projector.New(), 0)
	b, _ := json.Marshal(empty)
	if want := `{"events":0,"activations":0,"verdicts":{"confirmed":0,"never_started":0,"unconfirmed":0,"unverified":0},"not_closed":0,"unconfirmed":[],"unconfirmed_omitted":0,"anomalies":{},"policy":{"loads":0}}`; string(b) != want {
		t.Fatalf("empty summary:\n%s\nwant\n%s", b, want)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
