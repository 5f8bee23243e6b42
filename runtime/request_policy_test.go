//go:build linux

package runtime

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"pgregory.net/rapid"
)

// For random interleavings of start / await / cancel / owner end /
// completion (the fake child's gated reads), every registered request is
// settled exactly once — in the events and in the projector (owner
// summaries: nothing unsettled, no orphan) — the runtime's own settlement
// of each handle is the one recorded, and the projector fed live (Apply)
// equals its replay from stored bytes (ApplyRaw).
func TestPolicyRequestsSettleOnce(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		l, w := &memLedger{}, newFakeWorld()
		cfg := &MapConfigSource{}
		cfg.Set("fs", ServerConfig{Command: "fake"})
		m, err := NewManager(Options{Config: cfg, Ledger: l})
		if err != nil {
			rt.Fatal(err)
		}
		m.launch = w.launch
		ctx := context.Background()
		s, err := m.OpenSession(ctx, "s1")
		if err != nil {
			rt.Fatal(err)
		}
		capa := s.Capability()
		var owners []*Owner
		for range 2 {
			o, err := capa.NewOwner(ctx)
			if err != nil {
				rt.Fatal(err)
			}
			owners = append(owners, o)
		}
		type started struct {
			h   *ResourceHandle
			uri string
		}
		var hs []started
		// what the runtime told the caller: handle → settled by completion
		completed := map[string]bool{}
		steps := rapid.IntRange(1, 25).Draw(rt, "steps")
		for i := range steps {
			switch rapid.SampledFrom([]string{"start", "start", "await", "cancel", "complete", "end"}).Draw(rt, "op") {
			case "start":
				o := owners[rapid.IntRange(0, 1).Draw(rt, "owner")]
				uri := "fake://gate/" + strconv.Itoa(i)
				h, err := capa.ReadResource(ctx, o, "fs", uri, RequestOptions{Budget: 5 * time.Second})
				if errors.Is(err, ErrOwnerEnded) {
					continue
				}
				if err != nil {
					rt.Fatal(err)
				}
				hs = append(hs, started{h, uri})
			case "complete":
				if len(hs) > 0 {
					w.openGate(hs[rapid.IntRange(0, len(hs)-1).Draw(rt, "which")].uri)
				}
			case "await":
				if len(hs) > 0 {
					h := hs[rapid.IntRange(0, len(hs)-1).Draw(rt, "which")].h
					actx, cancel := context.WithTimeout(ctx, time.Duration(rapid.IntRange(0, 3).Draw(rt, "ms"))*time.Millisecond)
					_, err := h.Await(actx)
					cancel()
					switch {
					case err == nil:
						completed[h.ID()] = true
					case errors.Is(err, ErrAwaitTimeout), errors.Is(err, ErrHandleSettled), errors.Is(err, ErrOwnerEnded):
					default:
						rt.Fatalf("await: %v", err)
					}
				}
			case "cancel":
				if len(hs) > 0 {
					h := hs[rapid.IntRange(0, len(hs)-1).Draw(rt, "which")].h
					rep, err := h.Cancel(ctx)
					switch {
					case err == nil && rep.Settlement == SettlementAlreadyCompleted:
						completed[h.ID()] = true
					case err == nil && rep.Settlement == SettlementSettled:
					case errors.Is(err, ErrHandleSettled), errors.Is(err, ErrOwnerEnded):
					default:
						rt.Fatalf("cancel: %+v %v", rep, err)
					}
				}
			case "end":
				if _, err := owners[rapid.IntRange(0, 1).Draw(rt, "owner")].End(ctx); err != nil {
					rt.Fatal(err)
				}
			}
		}
		// Complete what is left, then end both owners and the manager.
		for _, x := range hs {
			w.openGate(x.uri)
		}
		for _, x := range hs {
			<-x.h.Done()
			if _, err := x.h.Await(ctx); err == nil {
				completed[x.h.ID()] = true
			}
		}
		for _, o := range owners {
			if _, err := o.End(ctx); err != nil {
				rt.Fatal(err)
			}
		}
		_ = s.Release(ctx)
		if err := m.Close(ctx); err != nil {
			rt.Fatal(err)
		}

		envs := l.envelopes()
		live, replay := projector.New(), projector.New()
		settledBy := map[string]string{}
		count := map[string]int{}
		for i := range envs {
			if err := live.Apply(&envs[i]); err != nil {
				rt.Fatal(err)
			}
			if err := replay.ApplyRaw(envs[i].AppendCanonical(nil, true)); err != nil {
				rt.Fatal(err)
			}
			p, _ := envs[i].Payload()
			switch p := p.(type) {
			case *events.RequestRegistered:
				count[p.Handle] += 0
			case *events.RequestCompleted:
				count[p.Handle]++
				settledBy[p.Handle] = "completed"
			case *events.RequestCancelled:
				if p.LocalSettled {
					count[p.Handle]++
					settledBy[p.Handle] = "cancelled"
				}
			}
		}
		if len(count) != len(hs) {
			rt.Fatalf("%d registrations, %d handles started", len(count), len(hs))
		}
		for h, n := range count {
			if n != 1 {
				rt.Fatalf("handle %s settled %d times", h, n)
			}
		}
		for _, x := range hs {
			if want := completed[x.h.ID()]; want != (settledBy[x.h.ID()] == "completed") {
				rt.Fatalf("handle %s: runtime says completed=%v, events %s", x.h.ID(), want, settledBy[x.h.ID()])
			}
		}
		var sum projector.OwnerSummary
		for _, o := range owners {
			po, ok := live.Owner(o.ID())
			if !ok || !po.Ended || po.Summary == nil {
				rt.Fatalf("owner %s not ended in the projector", o.ID())
			}
			sum.Completed += po.Summary.Completed
			sum.Cancelled += po.Summary.Cancelled
			sum.Unsettled += po.Summary.Unsettled
		}
		if sum.Unsettled != 0 || int(sum.Completed+sum.Cancelled) != len(hs) || live.Anomalies().OrphanRequest != 0 {
			rt.Fatalf("projector summary %+v for %d handles, anomalies %+v", sum, len(hs), live.Anomalies())
		}
		a, _ := projector.Marshal(live)
		b, _ := projector.Marshal(replay)
		if string(a) != string(b) {
			rt.Fatal("live projection differs from its replay")
		}
		if n := w.live.Load(); n != 0 {
			rt.Fatalf("%d fake children live", n)
		}
	})
}
