package gatewaybench

// The critical path of a sequential call, read back from the execution
// trace of a profiled phase: where a call's time goes between the client's
// request and its response, stage by stage, from the goroutine state
// transitions the trace records (a goroutine blocking, being woken by
// another, getting a core). CPU profiles say what the process spends;
// this says what one call waits for, and on two cores a call mostly waits
// for hand-offs between goroutines and for a core.

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// Stage is one stage of the critical path: its distribution over the
// calls in which the trace showed it.
type Stage struct {
	Name string `json:"name"`
	Latency
}

// CriticalPath is the stages of a profiled side's sequential calls, in
// call order; a stage the side does not have (the ledger's, on a proxy)
// is absent.
type CriticalPath struct {
	Calls  int     `json:"calls"`
	Stages []Stage `json:"stages"`
}

// The stages' names, in call order. Those of the ledger are a gateway's
// only; the upstream hop's are those of the proxies and gateways (an HTTP
// upstream's request, or a JSON-RPC call to a stdio server).
const (
	stageRequestIn   = "request in: client send to upstream send (proxy) or to ledger enqueue (gateway)"
	stageSeal        = "ledger: committer woken to WAL writer woken (sealing, the applier's hand-off)"
	stageWALWait     = "ledger: WAL writer woken to running (waits for a core)"
	stageFsync       = "ledger: WAL write + fdatasync, to syncer woken"
	stageAck         = "ledger: syncer woken to appender running (BeforeAck, wake-ups)"
	stageAckToSend   = "after the ack: appender running to upstream send"
	stageUpstream    = "upstream round trip: send to response"
	stageResponseOut = "response out: upstream response to client response"
	stageTotal       = "total: client send to client response"
)

// stageNames are the stages in call order.
var stageNames = []string{stageRequestIn, stageSeal, stageWALWait, stageFsync, stageAck, stageAckToSend, stageUpstream, stageResponseOut, stageTotal}

// frame flags: what a transition's stacks show.
const (
	fRoundTrip    = 1 << iota // blocked in net/http's persistConn.roundTrip
	fReadLoop                 // woken by net/http's persistConn.readLoop
	fClient                   // the benchmark's sequential client
	fUpstream                 // the side's own upstream call
	fCommitter                // the ledger's committer
	fFlushLoop                // Pebble's WAL writer
	fSyncer                   // the ledger's syncer
	fAwait                    // blocked in the go-sdk's wait for a JSON-RPC response
	fReadIncoming             // woken by the go-sdk's JSON-RPC reader
)

// upstreamMark names the function through which a side sends its
// upstream request, and how it waits for the answer: an HTTP upstream's
// request waits in net/http's round trip for the response's headers,
// woken by the connection's read loop; a call to a stdio server waits in
// the go-sdk's JSON-RPC call for its response, woken by the connection's
// reader.
type upstreamMark struct {
	fn    string
	stdio bool
}

// upstreamMarkers are the sides' upstream marks; a direct side has none.
var upstreamMarkers = map[string]upstreamMark{
	GatewayHTTP:   {fn: "leaseledger/runtime.(*leaseRoundTripper).RoundTrip"},
	ProxyHTTP:     {fn: "gatewaybench.(*proxy).echo"},
	GatewayStdio:  {fn: "leaseledger/runtime.(*callRun).run", stdio: true},
	ProxyStdio:    {fn: "gatewaybench.(*proxy).echo", stdio: true},
	ProxyGuardian: {fn: "gatewaybench.(*proxy).echo", stdio: true},
}

// transition is one goroutine state transition: at t, goroutine g went
// from one state to another, by actor's doing (the goroutine that woke
// it, or g itself).
type transition struct {
	t        trace.Time
	g, actor trace.GoID
	from, to trace.GoState
	flags    int
}

// readCriticalPath reads the execution trace at path, of a sequential
// phase of side, and returns its calls' critical path.
func readCriticalPath(path, side string) (CriticalPath, error) {
	mark, upstream := upstreamMarkers[side]
	marker := mark.fn
	var all []transition
	roles := map[trace.GoID]int{} // goroutine → fCommitter, fFlushLoop or fSyncer
	err := goTransitions(path, func(ev *trace.Event, st trace.StateTransition) {
		from, to := st.Goroutine()
		tr := transition{t: ev.Time(), g: st.Resource.Goroutine(), actor: ev.Goroutine(), from: from, to: to}
		if (from == trace.GoRunning && to == trace.GoWaiting) || (from == trace.GoWaiting && to == trace.GoRunnable) {
			tr.flags = frameFlags(st.Stack, marker) | frameFlags(ev.Stack(), marker)
		}
		if from == trace.GoRunning && to == trace.GoWaiting {
			if role := tr.flags & (fCommitter | fFlushLoop | fSyncer); role != 0 && roles[tr.g] == 0 {
				roles[tr.g] = role
			}
		}
		all = append(all, tr)
	}, nil)
	if err != nil {
		return CriticalPath{}, err
	}
	return criticalPath(all, roles, upstream, mark.stdio), nil
}

// goTransitions reads the execution trace at path and calls each with
// every goroutine state transition, in the trace's order, and every with
// every event (nil: none).
func goTransitions(path string, each func(*trace.Event, trace.StateTransition), every func(*trace.Event)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		return fmt.Errorf("gatewaybench: trace %s: %w", path, err)
	}
	for {
		ev, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("gatewaybench: trace %s: %w", path, err)
		}
		if every != nil {
			every(&ev)
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		if st := ev.StateTransition(); st.Resource.Kind == trace.ResourceGoroutine {
			each(&ev, st)
		}
	}
}

// frameMarks are the functions whose frames set each flag (a frame's
// function name contains the mark: readLoop's closures count as readLoop).
var frameMarks = []struct {
	mark string
	flag int
}{
	{"net/http.(*persistConn).roundTrip", fRoundTrip},
	{"net/http.(*persistConn).readLoop", fReadLoop},
	{"gatewaybench.(*side).sequential", fClient},
	{"ledger.(*Ledger).committer", fCommitter},
	{"record.(*LogWriter).flushLoop", fFlushLoop},
	{"ledger.(*Ledger).syncer", fSyncer},
	{"jsonrpc2.(*AsyncCall).Await", fAwait},
	{"jsonrpc2.(*Connection).readIncoming", fReadIncoming},
}

// frameFlags returns the flags of the frames of s; marker, when not
// empty, sets fUpstream.
func frameFlags(s trace.Stack, marker string) int {
	flags := 0
	for fr := range s.Frames() {
		for _, m := range frameMarks {
			if strings.Contains(fr.Func, m.mark) {
				flags |= m.flag
			}
		}
		if marker != "" && strings.Contains(fr.Func, marker) {
			flags |= fUpstream
		}
	}
	return flags
}

// criticalPath cuts the transitions into calls and stages. A call is the
// client's wait in a round trip, from its blocking to its wake-up by the
// response (the HTTP read loop); its upstream hop is the same wait of
// another goroutine, through the side's upstream function, within it, or
// with stdio set the wait of the side's JSON-RPC call, woken by its
// connection's reader (upstream reports whether the side has one). The
// ledger's stages are bounded by the first wake-up of the committer in
// the call, the WAL writer's wake-up and run after it, its wake-up of the
// syncer, and the syncer's wake-up of the goroutine that then sends the
// upstream request (the appender).
func criticalPath(all []transition, roles map[trace.GoID]int, upstream, stdio bool) CriticalPath {
	slices.SortStableFunc(all, func(a, b transition) int { return cmp.Compare(a.t, b.t) })
	byG := map[trace.GoID][]transition{}
	for _, tr := range all {
		byG[tr.g] = append(byG[tr.g], tr)
	}
	// role is the busiest goroutine of a role: another ledger's idle
	// stages may show too.
	role := func(flag int) trace.GoID {
		best := trace.NoGoroutine
		for g, r := range roles {
			if r == flag && (best == trace.NoGoroutine || len(byG[g]) > len(byG[best])) {
				best = g
			}
		}
		return best
	}
	committer, flushLoop, syncer := role(fCommitter), role(fFlushLoop), role(fSyncer)
	// next returns goroutine g's first transition from..to at or after t
	// and before end, by actor when actor is not NoGoroutine.
	next := func(g trace.GoID, t, end trace.Time, from, to trace.GoState, actor trace.GoID) (transition, bool) {
		ts := byG[g]
		i, _ := slices.BinarySearchFunc(ts, t, func(tr transition, t trace.Time) int { return cmp.Compare(tr.t, t) })
		for ; i < len(ts) && ts[i].t < end; i++ {
			if ts[i].from == from && ts[i].to == to && (actor == trace.NoGoroutine || ts[i].actor == actor) {
				return ts[i], true
			}
		}
		return transition{}, false
	}
	// waits are the waits answered by a response: blocked in roundTrip,
	// then woken by the read loop (the client's, an HTTP upstream's), or
	// blocked in a JSON-RPC call, then woken by the connection's reader (a
	// stdio upstream's).
	type wait struct {
		g          trace.GoID
		start, end trace.Time
	}
	var calls, ups []wait
	for g, ts := range byG {
		for i := 0; i+1 < len(ts); i++ {
			a, b := ts[i], ts[i+1]
			if a.from != trace.GoRunning || a.to != trace.GoWaiting || b.from != trace.GoWaiting || b.to != trace.GoRunnable {
				continue
			}
			overHTTP := a.flags&fRoundTrip != 0 && b.flags&fReadLoop != 0
			overRPC := a.flags&fAwait != 0 && b.flags&fReadIncoming != 0
			switch {
			case a.flags&fClient != 0 && overHTTP:
				calls = append(calls, wait{g, a.t, b.t})
			case a.flags&fUpstream != 0 && (stdio && overRPC || !stdio && overHTTP):
				ups = append(ups, wait{g, a.t, b.t})
			}
		}
	}
	slices.SortFunc(ups, func(a, b wait) int { return cmp.Compare(a.start, b.start) })
	samples := map[string][]time.Duration{}
	add := func(name string, from, to trace.Time) {
		if to >= from {
			samples[name] = append(samples[name], to.Sub(from))
		}
	}
	for _, c := range calls {
		add(stageTotal, c.start, c.end)
		upSend := c.end
		var up wait
		if upstream {
			i, _ := slices.BinarySearchFunc(ups, c.start, func(u wait, t trace.Time) int { return cmp.Compare(u.start, t) })
			if i == len(ups) || ups[i].end > c.end {
				continue // no upstream hop seen in this call
			}
			up = ups[i]
			upSend = up.start
			add(stageUpstream, up.start, up.end)
			add(stageResponseOut, up.end, c.end)
		}
		enq, ok := next(committer, c.start, upSend, trace.GoWaiting, trace.GoRunnable, trace.NoGoroutine)
		if !ok {
			if upstream { // a proxy: its request goes straight out
				add(stageRequestIn, c.start, upSend)
			}
			continue
		}
		add(stageRequestIn, c.start, enq.t)
		fw, ok1 := next(flushLoop, enq.t, upSend, trace.GoWaiting, trace.GoRunnable, trace.NoGoroutine)
		fr, ok2 := next(flushLoop, fw.t, upSend, trace.GoRunnable, trace.GoRunning, trace.NoGoroutine)
		sw, ok3 := next(syncer, fr.t, upSend, trace.GoWaiting, trace.GoRunnable, flushLoop)
		if !ok1 || !ok2 || !ok3 {
			continue
		}
		add(stageSeal, enq.t, fw.t)
		add(stageWALWait, fw.t, fr.t)
		add(stageFsync, fr.t, sw.t)
		if !upstream {
			continue
		}
		aw, ok1 := next(up.g, sw.t, upSend, trace.GoWaiting, trace.GoRunnable, syncer)
		ar, ok2 := next(up.g, aw.t, upSend, trace.GoRunnable, trace.GoRunning, trace.NoGoroutine)
		if ok1 && ok2 {
			add(stageAck, sw.t, ar.t)
			add(stageAckToSend, ar.t, upSend)
		}
	}
	cp := CriticalPath{Calls: len(calls)}
	for _, name := range stageNames {
		if s := samples[name]; len(s) > 0 {
			cp.Stages = append(cp.Stages, Stage{Name: name, Latency: latencyOf(s)})
		}
	}
	return cp
}
